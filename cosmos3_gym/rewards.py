"""Rewards on decoded videos.

A reward is any callable ``reward(frames, prompts) -> np.ndarray float32 [B]`` with
``frames`` uint8 ``[B, T, H, W, 3]`` and ``prompts`` a list of ``B`` strings, so one
function serves the single env, the vector env and a trainer. Presets name a built-in by
its key in :data:`REWARDS`; ``gym.make(..., reward_fn=callable)`` plugs in any other.
The name ``"none"`` (:data:`NO_REWARD`) skips decoding: latent-only rollouts whose reward
a trainer computes elsewhere; the env then reports reward 0 and no frames.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np


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


NO_REWARD = "none"

REWARDS: dict[str, Callable[[np.ndarray, list[str]], np.ndarray] | None] = {
    "colorfulness": colorfulness,
    "brightness": brightness,
    "temporal_smoothness": temporal_smoothness,
    NO_REWARD: None,
}


def checked_reward(reward_fn, frames: np.ndarray, prompts: list[str]) -> np.ndarray:
    """Call ``reward_fn`` and insist on its contract: a finite float32 array of shape ``[B]``."""
    values = np.asarray(reward_fn(frames, prompts), dtype=np.float32)
    if values.shape != (frames.shape[0],):
        raise ValueError(f"reward_fn returned shape {values.shape}; expected ({frames.shape[0]},), one per video")
    return values
