"""Rewards on decoded videos.

A reward is any callable ``reward(frames, prompts) -> np.ndarray float32 [B]`` with
``frames`` uint8 ``[B, T, H, W, 3]`` and ``prompts`` a list of ``B`` strings, so one
function serves the single env, the vector env and a trainer. Presets name a built-in by
its key in :data:`REWARDS`; ``gym.make(..., reward_fn=callable)`` plugs in any other.
The name ``"none"`` (:data:`NO_REWARD`) skips decoding: latent-only rollouts whose reward
a trainer computes elsewhere; the env then reports reward 0 and no frames.
"""

from __future__ import annotations

import inspect
from typing import Callable, Protocol

import numpy as np

from .presets import REWARD_NAMES
from ..rollout.procedural_world import DIRECTIONS, detect, parse_prompt


class RewardFn(Protocol):
    def __call__(self, frames: np.ndarray, prompts: list[str]) -> np.ndarray: ...


def colorfulness(frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """Hasler & Suesstrunk colourfulness of each video (mean over frames), divided by 100.

    Roughly 0 for grey videos, about 1 for vivid ones; ignores the prompt.
    """
    rgb = frames.astype(np.float32)
    rg = rgb[..., 0] - rgb[..., 1]
    yb = 0.5 * (rgb[..., 0] + rgb[..., 1]) - rgb[..., 2]
    std = np.sqrt(rg.std(axis=(2, 3)) ** 2 + yb.std(axis=(2, 3)) ** 2)
    mean = np.sqrt(rg.mean(axis=(2, 3)) ** 2 + yb.mean(axis=(2, 3)) ** 2)
    return ((std + 0.3 * mean).mean(axis=1) / 100.0).astype(np.float32)


def brightness(frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """Mean pixel intensity in [0, 1]; ignores the prompt."""
    return (frames.astype(np.float32).mean(axis=(1, 2, 3, 4)) / 255.0).astype(np.float32)


def temporal_smoothness(frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """``1 - mean |frame[t+1] - frame[t]| / 255``: 1 for a still video (and for images)."""
    if frames.shape[1] < 2:
        return np.ones(frames.shape[0], dtype=np.float32)
    diff = np.abs(np.diff(frames.astype(np.float32), axis=1)).mean(axis=(1, 2, 3, 4))
    return (1.0 - diff / 255.0).astype(np.float32)


def _per_video(score, frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    return np.array([score(detect(video), parse_prompt(prompt), video) for video, prompt in zip(frames, prompts)],
                    dtype=np.float32)


def color_adherence(frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """Fraction of the object's pixels whose nearest world colour is the one the prompt names.

    0 when no object is visible or the detected colour is another one; 1 for a clean match.
    Prompts without a colour word score 0.
    """
    return _per_video(lambda d, want, _: d.color_purity if want["color"] and d.color == want["color"] else 0.0,
                      frames, prompts)


def direction_adherence(frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """How well the object's motion follows the prompt's direction, in [0, 1].

    The cosine between the centroid's displacement (first to last frame) and the asked
    direction, mapped to [0, 1], times how far it moved (saturating at 6 pixels).
    """
    def score(d, want, _):
        if want["direction"] is None:
            return 0.0
        dx, dy = d.displacement
        length = float(np.hypot(dx, dy))
        if length == 0.0:
            return 0.0
        ux, uy = DIRECTIONS[want["direction"]]
        return 0.5 * (1.0 + (dx * ux + dy * uy) / length) * min(1.0, length / 6.0)

    return _per_video(score, frames, prompts)


def position_adherence(frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """1 minus the distance (in frame widths) from the object's final position to where the
    prompt puts it ("at the top", "on the left", ...); 0 for prompts without a position."""
    def score(d, want, _):
        if want["position"] is None or d.color is None:
            return 0.0
        return max(0.0, 1.0 - float(np.hypot(d.position[0] - want["position"][0], d.position[1] - want["position"][1])))

    return _per_video(score, frames, prompts)


def prompt_adherence(frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """The mean of the colour, direction and position scores the prompt asks for, plus 0.2 x
    temporal smoothness (the aesthetic-free regulariser), divided by 1.2: in [0, 1]."""
    parts = {"color": color_adherence(frames, prompts), "direction": direction_adherence(frames, prompts),
             "position": position_adherence(frames, prompts)}
    asked = np.array([[parse_prompt(p)[k] is not None for k in parts] for p in prompts], dtype=np.float32)
    scores = np.stack(list(parts.values()), axis=1)
    mean = (scores * asked).sum(1) / np.maximum(asked.sum(1), 1.0)
    return ((mean + 0.2 * temporal_smoothness(frames, prompts)) / 1.2).astype(np.float32)


NO_REWARD = "none"

REWARDS: dict[str, Callable[[np.ndarray, list[str]], np.ndarray] | None] = {
    "colorfulness": colorfulness,
    "brightness": brightness,
    "temporal_smoothness": temporal_smoothness,
    "color_adherence": color_adherence,
    "direction_adherence": direction_adherence,
    "position_adherence": position_adherence,
    "prompt_adherence": prompt_adherence,
    NO_REWARD: None,
}
if tuple(REWARDS) != REWARD_NAMES:  # presets validate names against that light copy
    raise ImportError(f"rewards.REWARDS keys {list(REWARDS)} differ from presets.REWARD_NAMES {list(REWARD_NAMES)}; "
                      f"update REWARD_NAMES in cosmos3_gym/presets.py")


def checked_reward_fn(reward_fn, reward: str | None = None):
    """``reward_fn`` if it can be called as ``reward_fn(frames, prompts)`` (checked when the env is
    made, not at an episode's last step) and no ``reward`` name was given beside it, else a
    ``ValueError`` that says what it must look like."""
    contract = "pass reward(frames, prompts) -> float32 [B] (frames uint8 [B, T, H, W, 3], prompts a list of B str)"
    if not callable(reward_fn):
        raise ValueError(f"reward_fn={reward_fn!r} is not callable; {contract}")
    name = getattr(reward_fn, "__name__", reward_fn)
    if reward is not None:
        raise ValueError(f"reward={reward!r} and reward_fn={name!r} both name the reward; pass one of them")
    try:
        inspect.signature(reward_fn).bind(None, None)
    except TypeError as error:
        raise ValueError(f"reward_fn={name!r} cannot be called with "
                         f"(frames, prompts): {error}; {contract}") from None
    except ValueError:  # no signature to read (some builtins): the call will tell
        pass
    return reward_fn


def checked_reward(reward_fn, frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """Call ``reward_fn`` and insist on its contract: a finite float32 array of shape ``[B]``."""
    raw = np.asarray(reward_fn(frames, prompts))
    if raw.dtype.kind not in "fiu":
        raise ValueError(f"reward_fn returned {raw.dtype} values; expected real numbers (float32), one per video")
    values = raw.astype(np.float32)
    if values.shape != (frames.shape[0],):
        raise ValueError(f"reward_fn returned shape {values.shape}; expected ({frames.shape[0]},), one per video")
    if not np.isfinite(values).all():
        raise ValueError(f"reward_fn returned non-finite rewards {values.tolist()} for prompts {prompts}; rewards "
                         f"must be finite (the step was not taken: fix the reward function and step again)")
    return values
