"""PushT, a twin people know: Cosmos 3 imagines LeRobot's gym-pusht, scored against the real thing.

``Cosmos3PushT-v0`` (:class:`Cosmos3PushTVectorEnv`, and :class:`Cosmos3PushTEnv`, its one-env view)
is PushT imagined by Cosmos 3 in forward-dynamics mode; ``PushT-Twin-v0`` (:class:`PushTTwinEnv`) is
its ground truth, gym-pusht itself, stepped a chunk at a time. Both have the same spaces and the
same first frames, so a policy trained in one runs in the other as it is:

* observation: gym-pusht's ``pixels`` observation, uint8 ``[96, 96, 3]``
  (``gym.make("gym_pusht/PushT-v0", obs_type="pixels").observation_space``);
* action: a chunk of ``chunk`` consecutive gym-pusht actions, ``Box(0, 512, (chunk, 2), float32)``:
  the agent's target positions in gym-pusht's 512x512 canvas;
* ``reset(seed=s)``: the state and frame gym-pusht's own ``reset(seed=s)`` gives, bit for bit;
* reward: the sum over the chunk's frames of gym-pusht's reward ``clip(coverage / 0.95, 0, 1)``;
  terminated (success) at the first frame whose coverage exceeds gym-pusht's
  ``success_threshold`` (0.95): the rest of the chunk is not played (gym-pusht's episode is over),
  ``info["frames"]`` repeats that frame, and it is the observation; truncated after ``horizon``
  chunks (default: gym-pusht's 300 steps, ``ceil(300 / chunk)`` chunks).

The twin reads coverage and success from gym-pusht's state; the imagined world has only pixels,
and reads them from its imagined frames with :mod:`cosmos3_gym.world.pusht_coverage` (the T block's
pose fitted to a segmentation of gym-pusht's rendered colours, intersected with the goal; on
gym-pusht's own frames 0.002 from its coverage on average, about 0.02 at worst).

**Actions for the model.** Cosmos 3's ``pusht`` embodiment takes a 2-D action per frame, in one of
two frames (:func:`model_actions`; a checkpoint's ``training.json`` says which it was trained in, as
``args.action_frame``, and the env follows it; ``action_frame=`` overrides):

* ``"canvas"`` (the shipped model): the target positions scaled from gym-pusht's canvas to [-1, 1]
  (``a / 256 - 1``; x and y as gym-pusht gives them, y downwards), absolute targets, as LeRobot's
  PushT data records them (min-max normalised, with the canvas as the range);
* ``"agent"``: each target relative to the agent as the conditioning frame shows it (the mass centre
  of its colour, :func:`~cosmos3_gym.world.pusht_coverage.agent_position`), ``(a - agent) / 512``:
  where to move the disc from where it is seen, the same thing anywhere on the canvas, as the
  procedural world's commands are. A frame without the agent takes the canvas centre.

**The model.** By default the PushT Cosmos 3 shipped in ``cosmos3_gym/assets/cosmos3-pusht``
(:data:`PUSHT_CHECKPOINT`: the tiny model's classes, the transformer widened to 192 and 8 layers,
7.4 M parameters, and a 0.6 M VAE, trained on 6000 gym-pusht clips by :mod:`cosmos3_gym.train_pusht`
for 15.5 minutes on an H100, then 8 more on its own imaginings as conditions; 17.4 MB with the
transformer stored in float16, run in float32). A first model: its imaginings blur within a chunk or
two and the agent fades into the block
(``cosmos3-gym world-eval --world pusht`` measures how far; BENCHMARKS.md has the numbers). ``checkpoint=DIR`` takes another
(a diffusers-layout Cosmos 3 directory, as ``Cosmos3World-v0`` takes); ``model=`` a loaded one.

Needs ``pip install -e '.[pusht]'`` in a clone of the repository (gym-pusht: pymunk, pygame, shapely, opencv).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ..env.infos import object_column
from ..env.rendering import can_render
from ..env.single_view import check_view_keywords, checked_vector_env
from ..env.spaces import checked_action, checked_options
from ..model.interrupts import deferred_interrupts
from ..rollout.seeding import SEED_RANGE, checked_seed
from .envs import (Cosmos3WorldVectorEnv, WorldEnvView, _checked_int, checked_chunk, reset_generator,
                   training_record)
from .pusht_coverage import SIZE, agent_position, chunk_coverages, make_pusht, pusht_reward

CHUNK = 8  # gym-pusht actions per step (Cosmos 3 generates 1 + 4m frames: chunk is a multiple of 4)
MAX_EPISODE_STEPS = 300  # gym-pusht's registered TimeLimit (gym_pusht/__init__.py)
CANVAS = 512.0  # gym-pusht's action range [0, 512] per axis
# the PushT world model shipped with the package (python -m cosmos3_gym.train_pusht; its training.json says how)
PUSHT_CHECKPOINT = str(Path(__file__).resolve().parents[1] / "assets" / "cosmos3-pusht")
PROMPT = "A top-down view of a blue circular agent pushing a grey T-shaped block into the green T-shaped target."
TARGET_HINT = "(agent target positions in gym-pusht's 512x512 canvas); clip the targets to [0, 512]"
RESET_HINT = "; the start is gym-pusht's reset(seed=...)"


def pusht_action_space(chunk: int = CHUNK) -> spaces.Box:
    """``Box(0, 512, (chunk, 2), float32)``: ``chunk`` gym-pusht actions (agent target positions)."""
    return spaces.Box(0.0, CANVAS, (chunk, 2), np.float32)


ACTION_FRAMES = ("canvas", "agent")  # what the model's actions are measured from (the module docstring)


def model_actions(chunks: np.ndarray, frames: np.ndarray | None = None) -> np.ndarray:
    """The ``pusht`` action units Cosmos 3 is conditioned on, ``[..., chunk, 2]`` from gym-pusht targets
    ``chunks`` ``[..., chunk, 2]``: without ``frames``, the canvas frame (targets scaled to [-1, 1]);
    with the chunks' conditioning ``frames`` (uint8 ``[..., 96, 96, 3]``, one per chunk), the agent frame
    (each target minus the agent's position in its chunk's frame, over 512; the canvas centre where no
    agent shows)."""
    chunks = np.asarray(chunks, dtype=np.float32)
    if frames is None:
        return (chunks / (CANVAS / 2) - 1.0).astype(np.float32)
    frames = np.asarray(frames)
    if frames.shape != (*chunks.shape[:-2], SIZE, SIZE, 3):
        raise ValueError(f"frames has shape {frames.shape}; chunks of shape {chunks.shape} are measured from one "
                         f"uint8 frame each, of shape {(*chunks.shape[:-2], SIZE, SIZE, 3)}")
    seen = [agent_position(frame) for frame in frames.reshape(-1, SIZE, SIZE, 3)]
    anchors = np.stack([np.full(2, CANVAS / 2) if p is None else p for p in seen]).reshape(*frames.shape[:-3], 1, 2)
    return ((chunks - anchors) / CANVAS).astype(np.float32)


def frame_actions(chunks: np.ndarray, frames: np.ndarray, action_frame: str) -> np.ndarray:
    """:func:`model_actions` of ``chunks`` starting at ``frames`` in ``action_frame``: what the env and the
    trainer feed a model trained in that frame."""
    return model_actions(chunks, frames if action_frame == "agent" else None)


def checkpoint_action_frame(checkpoint: str) -> str:
    """The action frame a PushT checkpoint was trained in: its ``training.json``'s ``args.action_frame``,
    ``"canvas"`` where it has none (checkpoints from before the agent frame, or from elsewhere)."""
    found = training_record(checkpoint)
    if found is None:
        return "canvas"
    record, args = found[0], found[1].get("args", {})
    frame = args.get("action_frame", "canvas") if isinstance(args, dict) else None
    if frame not in ACTION_FRAMES:
        raise ValueError(f"{record}: args.action_frame={frame!r} is not one of {ACTION_FRAMES}; fix the record, or "
                         "pass action_frame= (what the checkpoint was trained in)")
    return frame


def checked_action_frame(action_frame) -> str:
    """``action_frame`` if it is one of :data:`ACTION_FRAMES`, else a ``ValueError`` saying what is allowed."""
    if action_frame not in ACTION_FRAMES:
        raise ValueError(f"action_frame={action_frame!r} is invalid; use one of {ACTION_FRAMES} (what the model's "
                         "actions are measured from: the canvas, or the agent the conditioning frame shows)")
    return action_frame


def default_horizon(chunk: int) -> int:
    """Chunks per episode: gym-pusht's 300 steps, rounded up to whole chunks."""
    return math.ceil(MAX_EPISODE_STEPS / chunk)


def _play_out(coverages: np.ndarray, threshold: float) -> tuple[int, float, bool]:
    """``(frames played, summed reward, success)`` of a chunk's coverages: the chunk ends at the first
    frame over ``threshold``, as gym-pusht's episode does."""
    over = np.flatnonzero(coverages > threshold)
    played = int(over[0]) + 1 if over.size else len(coverages)
    return played, float(sum(pusht_reward(c, threshold) for c in coverages[:played])), bool(over.size)


def _padded(frames: np.ndarray, played: int) -> np.ndarray:
    out = frames.copy()
    out[played:] = frames[played - 1]
    return out


class PushTTwinEnv(gym.Env):
    """gym-pusht played a chunk at a time: the ground truth of ``Cosmos3PushT-v0`` (same spaces).

    ## Action Space
    ``Box(0, 512, (chunk, 2), float32)``: ``chunk`` consecutive gym-pusht actions (agent target
    positions); out-of-bounds or non-finite actions raise.

    ## Observation Space
    gym-pusht's ``pixels`` observation: ``Box(0, 255, (96, 96, 3), uint8)``, the frame after the chunk.

    ## Rewards
    The sum of gym-pusht's rewards (``clip(coverage / 0.95, 0, 1)``) over the actions played.

    ## Starting State
    ``reset(seed=s)`` is gym-pusht's ``reset(seed=s)``: the same state, the same frame.

    ## Episode End
    Terminated when gym-pusht terminates (coverage > its ``success_threshold``, 0.95): the rest of
    the chunk is not played. Truncated after ``horizon`` chunks (default ``ceil(300 / chunk)``,
    gym-pusht's 300 steps).
    A chunk is played whole: a Ctrl-C during ``step`` or ``reset`` waits until the call has
    finished; an error raised inside gym-pusht ends the episode (call ``reset()``), since its
    physics cannot be rolled back.

    ## Info
    ``frames`` (uint8 ``[chunk, 96, 96, 3]``, one per action; after a success the success frame
    repeats), ``coverages`` (``[chunk]``, gym-pusht's ``info["coverage"]`` after each action,
    repeated likewise), ``coverage`` (the observation's), ``played`` (actions played), ``success``
    and ``is_success``, and gym-pusht's last step info (``pos_agent``, ``vel_agent``, ``block_pose``,
    ``goal_pose``, ``n_contacts``). Reset info: gym-pusht's, plus ``coverage``.

    ## Arguments
    ``gym.make("PushT-Twin-v0", chunk=8, horizon=None, render_mode=None, **pusht_kwargs)``
    (``pusht_kwargs``: gym-pusht's ``PushTEnv`` arguments, e.g. ``damping``).

    ## Version History
    * v0: initial release.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, chunk: int = CHUNK, horizon: int | None = None, render_mode: str | None = None, **pusht_kwargs):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        self.chunk = checked_chunk(chunk)
        self.horizon = default_horizon(self.chunk) if horizon is None else _checked_int("horizon", horizon)
        self.render_mode = render_mode
        self.pusht = make_pusht(**pusht_kwargs)
        self.threshold = float(self.pusht.success_threshold)
        self.observation_space = self.pusht.observation_space
        self.action_space = pusht_action_space(self.chunk)
        self.frame: np.ndarray | None = None
        self.t: int | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        checked_options(options, (), RESET_HINT)
        seed = None if seed is None else checked_seed(seed)  # a Python int: gym-pusht takes no numpy integer
        rng, rng_seed = reset_generator(self, seed)
        if seed is None:  # gym-pusht keeps its own generator; draw its seed from ours
            seed = int(rng.integers(SEED_RANGE[1]))
        with self._played_whole():
            self.frame, info = self.pusht.reset(seed=seed)
            self._np_random, self._np_random_seed, self.t = rng, rng_seed, 0
            return self.frame.copy(), {**info, "coverage": float(self.pusht._get_coverage())}

    def step(self, action):
        if self.t is None:
            raise RuntimeError("call reset() before step() (and after an episode ends)")
        action = checked_action(action, self.action_space, bounds_hint=TARGET_HINT).numpy()
        frames, coverages, reward, info, success = [], [], 0.0, {}, False
        with self._played_whole():
            for target in action:
                frame, r, terminated, _, info = self.pusht.step(target)
                frames.append(frame)
                coverages.append(float(info["coverage"]))
                reward += float(r)
                if terminated:
                    success = True
                    break
            played = len(frames)
            frames = np.stack(frames + [frames[-1]] * (self.chunk - played))
            coverages = np.array(coverages + [coverages[-1]] * (self.chunk - played))
            self.t += 1
            self.frame = frames[-1]
            truncated = self.t >= self.horizon and not success
            if success or truncated:
                self.t = None
            info = {**info, "frames": frames, "coverages": coverages, "coverage": coverages[-1], "played": played,
                    "success": success, "is_success": success}
            return self.frame.copy(), reward, success, truncated, info

    def render(self):
        return None if not can_render(self) or self.frame is None else self.frame.copy()

    @contextmanager
    def _played_whole(self):
        """gym-pusht's physics has no undo: a Ctrl-C waits until the call has finished (and then says
        it took effect), and an error inside gym-pusht ends the episode (``reset()`` before the next
        step) rather than leave it half played."""
        with deferred_interrupts():
            try:
                yield
            except BaseException:
                self.t = None
                raise

    def close(self):
        self.pusht.close()


@dataclass(frozen=True)
class PushTEpisode:
    """One imagined episode: the gym-pusht seed its first frame came from, and the model's prompt."""

    seed: int
    prompt: str


class Cosmos3PushTVectorEnv(Cosmos3WorldVectorEnv):
    """``num_envs`` PushT envs imagined by Cosmos 3 (forward dynamics), one batched generation a step.

    The machinery is :class:`~cosmos3_gym.world.envs.Cosmos3WorldVectorEnv`'s (one engine, one
    batched transformer forward per denoising step for all envs, ``infos["trajectory"]`` with the
    log-probs, autoreset modes, transactional calls); the task is PushT's: env ``i``'s first frame is
    gym-pusht's ``reset(seed=s + i)`` frame, each step imagines the ``chunk`` frames the chunk's
    gym-pusht actions cause (conditioned on the current frame and :func:`model_actions` of the chunk
    in the model's ``action_frame``), and
    reward and success come from the imagined frames (see the module docstring). ``infos``:
    ``frames``, ``coverages`` (``[num_envs, chunk]``, read from the imagined frames), ``coverage``,
    ``played``, ``success``, ``log_prob_sum``, ``trajectory``, ``prompt``, ``seed`` (each env's
    gym-pusht reset seed).

    Args: ``num_envs``, ``chunk`` (a multiple of 4), ``horizon`` (chunks; default
    ``ceil(300 / chunk)``), ``prompt``, ``exact_coverage`` (refine the block's pose with gym-pusht's
    renderer; default True; False: the smooth fit only, faster, about 0.03 at worst), ``num_steps``,
    ``kind``, ``guidance_scale``, ``noise_level``, ``domain``, ``autoreset_mode``, ``render_mode``,
    ``checkpoint`` (a PushT-trained Cosmos 3; default: :data:`PUSHT_CHECKPOINT`), ``device``,
    ``dtype``, ``model``, ``action_frame`` (``"canvas"`` or ``"agent"``, what the model's actions are
    measured from; default: the checkpoint's, :func:`checkpoint_action_frame`, or with ``model=`` that of the
    folder it was loaded from; ``"canvas"`` for a model built in memory).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10, "autoreset_mode": AutoresetMode.NEXT_STEP}
    action_hint = TARGET_HINT
    env_id = "Cosmos3PushT-v0"
    reset_hint = RESET_HINT
    # gym-pusht's keywords a LeRobot user may pass, and why this env takes none (for the keyword errors)
    keyword_notes = {"obs_type": "the observation is always gym-pusht's obs_type='pixels' frame, uint8 96x96x3; "
                                 "leave obs_type out"}

    def __init__(self, num_envs: int = 1, *, chunk: int = CHUNK, horizon: int | None = None, prompt: str = PROMPT,
                 exact_coverage: bool = True, num_steps: int = 8, kind: str = "sde", guidance_scale: float = 4.0,
                 noise_level: float = 0.7, domain: str = "pusht",
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 checkpoint: str = "", device=None, dtype=None, model=None, action_frame: str | None = None):
        chunk = checked_chunk(chunk)
        horizon = default_horizon(chunk) if horizon is None else _checked_int("horizon", horizon)
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"prompt={prompt!r} is invalid; use a non-empty string")
        if not isinstance(exact_coverage, (bool, np.bool_)):
            raise ValueError(f"exact_coverage={exact_coverage!r} is invalid; use True (refine the block's pose with "
                             "gym-pusht's renderer) or False (the smooth fit only)")
        self.pusht = make_pusht()  # before the model loads: a missing gym-pusht fails fast
        if not checkpoint and model is None:
            checkpoint = PUSHT_CHECKPOINT
        if action_frame is not None:
            self.action_frame = checked_action_frame(action_frame)
        else:  # the record of checkpoint=, or of the folder model= came from (a bad checkpoint is refused below)
            source = checkpoint or getattr(model, "checkpoint_path", None)
            self.action_frame = checkpoint_action_frame(source) if isinstance(source, (str, Path)) else "canvas"
        super().__init__(num_envs, chunk=chunk, horizon=horizon, size=SIZE, num_steps=num_steps, kind=kind,
                         guidance_scale=guidance_scale, noise_level=noise_level, domain=domain,
                         autoreset_mode=autoreset_mode, render_mode=render_mode, checkpoint=checkpoint, device=device,
                         dtype=dtype, model=model)
        self.prompt, self.exact_coverage = prompt, bool(exact_coverage)
        self.threshold = float(self.pusht.success_threshold)
        self.single_observation_space = self.pusht.observation_space
        self.single_action_space = pusht_action_space(self.chunk)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    @property
    def success_margin(self):
        raise AttributeError(f"{self.env_id} has no success_margin (a Cosmos3World-v0 keyword): an imagined chunk "
                             f"succeeds as in gym-pusht, once the coverage read from its frames passes threshold="
                             f"{self.threshold}")

    @property
    def success_radius(self):
        raise AttributeError(f"{self.env_id} has no success_radius (Cosmos3World-v0's distance to the goal): success "
                             f"is gym-pusht's coverage above threshold={self.threshold}")

    def _first_frame(self, seed: int) -> np.ndarray:
        frame, _ = self.pusht.reset(seed=seed)
        return frame

    def _first_episode(self, seed: int, rng: np.random.Generator) -> tuple:
        """gym-pusht's own ``reset(seed=seed)`` frame (bit for bit), and the model's prompt."""
        return PushTEpisode(seed, self.prompt), self._first_frame(seed)

    def _prompt_infos(self, tasks: list[PushTEpisode]) -> dict:
        everyone = np.ones(self.num_envs, dtype=bool)
        return {"prompt": object_column(task.prompt for task in tasks), "_prompt": everyone,
                "seed": np.array([task.seed for task in tasks], dtype=np.int64), "_seed": everyone.copy()}

    # --- the autoreset protocol's hooks (env/autoreset.py): PushT's episodes and scoring ---
    def _prepare_resets(self, envs: list[int], rngs: list) -> dict:
        """Autoreset: gym-pusht's reset with a seed drawn from the env's generator."""
        seeds = {i: int(rngs[i].integers(SEED_RANGE[1])) for i in envs}
        return {i: (PushTEpisode(seed, self.prompt), self._first_frame(seed)) for i, seed in seeds.items()}

    def _model_actions(self, actions: np.ndarray, frames: np.ndarray) -> np.ndarray:
        return frame_actions(actions, frames, self.action_frame)

    def _score_chunk(self, i: int, chunk: np.ndarray) -> tuple[float, bool, np.ndarray, dict]:
        """gym-pusht's rule on the imagined frames: coverage read from each frame, the chunk played
        until the first frame above the threshold (the rest repeats it)."""
        coverages = chunk_coverages(chunk, exact=self.exact_coverage)
        played, reward, success = _play_out(coverages, self.threshold)
        coverages[played:] = coverages[played - 1]
        return reward, success, _padded(chunk, played), {"coverages": coverages, "coverage": coverages[-1],
                                                          "played": played}

    def close(self, **kwargs):
        self.pusht.close()
        super().close(**kwargs)


def make_pusht_vector_env(**keywords) -> Cosmos3PushTVectorEnv:
    """``gym.make_vec``'s vector entry point: a :class:`Cosmos3PushTVectorEnv`, its keywords checked first."""
    return checked_vector_env(Cosmos3PushTVectorEnv, keywords)


class Cosmos3PushTEnv(WorldEnvView):
    """PushT imagined by Cosmos 3: one env of :class:`Cosmos3PushTVectorEnv` (its docstring and the
    module's have every detail).

    ## Action Space, Observation Space, Starting State
    ``PushT-Twin-v0``'s (:class:`PushTTwinEnv`): ``chunk`` gym-pusht actions ``Box(0, 512, (chunk, 2),
    float32)``, gym-pusht's uint8 ``(96, 96, 3)`` pixels; ``reset(seed=s)`` returns gym-pusht's
    ``reset(seed=s)`` frame.

    ## Rewards and Episode End
    ``PushT-Twin-v0``'s rules on the imagined frames: the sum over the frames played of gym-pusht's
    reward, ``clip(coverage / 0.95, 0, 1)``, with the coverage of the goal by the T block segmented from
    each frame's colours; terminated above gym-pusht's success threshold (the rest of the chunk is not
    played), truncated after ``horizon`` chunks.

    ## Info
    ``frames``, ``coverages``, ``coverage``, ``played``, ``success`` and ``is_success`` (what SB3's
    callbacks read), ``log_prob_sum``, ``trajectory``, ``prompt``, ``seed``.

    ## Arguments
    ``gym.make("Cosmos3PushT-v0", chunk=8, horizon=None, prompt=PROMPT, exact_coverage=True, num_steps=8,
    kind="sde", guidance_scale=4.0, noise_level=0.7, domain="pusht", checkpoint="", device=None,
    dtype=None, model=None, action_frame=None, render_mode=None)``: what each does is in
    :class:`Cosmos3PushTVectorEnv`.

    ## Version History
    * v0: initial release.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None, **kwargs):
        check_view_keywords("Cosmos3PushT-v0", Cosmos3PushTVectorEnv, kwargs)
        super().__init__(Cosmos3PushTVectorEnv(1, autoreset_mode=AutoresetMode.DISABLED, render_mode=render_mode,
                                               **kwargs), render_mode, bounds_hint=TARGET_HINT)
