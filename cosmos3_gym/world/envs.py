"""The world as an environment: the procedural ground truth, and Cosmos 3 imagining it.

``ProceduralWorld-v0`` (:class:`ProceduralWorldEnv`) runs the physics of
:mod:`cosmos3_gym.rollout.procedural_world`; ``Cosmos3World-v0`` (:class:`Cosmos3WorldVectorEnv`, and
:class:`Cosmos3WorldEnv`, its B = 1 view) has the same spaces, but each step is one
forward-dynamics generation of Cosmos 3 conditioned on the current frame and the action
chunk: the model imagines the chunk, and its last frame is the next observation. A policy
trained in one is evaluated in the other as it is.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ..rollout.seeding import SEED_RANGE, checked_seed, per_env_seeds, rng_continuation
from ..model.interrupts import deferred_interrupts
from ..model.tasks import Task
from ..env.presets import WORLD_ENV_HINTS, check_keywords, load_preset
from ..env.rendering import can_render
from ..env.spaces import build_engine, checked_action, checked_options
from ..env.autoreset import AutoresetVectorEnv, PreparedStep, checked_autoreset_mode
from ..env.infos import object_column
from ..model.checkpoint import component_config, read_json
from ..model.model import Cosmos3Model
from ..model.tiny_model import TINY_CHECKPOINT
from ..env.single_view import SingleEnvView, check_view_keywords, checked_vector_env, constructor_keywords
from ..rollout.procedural_world import (SUCCESS_RADIUS, PushTask, checked_goal, checked_success_margin, draw, push,
                                       sample_task, task_reward)

CHUNK, HORIZON, SIZE = 8, 8, 32
COMMAND_HINT = "(a velocity command (dx, dy) per frame); clip the commands to [-1, 1]"
RESET_HINT = "; the task comes from the seed, and its goal corner from gym.make(..., goal='top left')"


def world_spaces(chunk: int, size: int) -> tuple[spaces.Box, spaces.Box]:
    """``(observation, action)`` spaces of both worlds: the current frame, and one 2-D velocity
    command in [-1, 1] per frame of the chunk."""
    return (spaces.Box(0, 255, (size, size, 3), np.uint8),
            spaces.Box(-1.0, 1.0, (chunk, 2), np.float32))


def _checked_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}={value!r} is invalid; use an integer >= {low}")
    return int(value)


def reset_generator(env: gym.Env, seed: int | None) -> tuple[np.random.Generator, int | None]:
    """The ``np_random`` (and its seed) that ``env.reset(seed=seed)`` installs, made without changing
    ``env``: Gymnasium's generator for a seed (or a first reset), else a continuation of ``env``'s own.
    Draw a reset from it, then install both, so that a reset that raises leaves ``env`` as it was."""
    if seed is None and env._np_random is not None:
        return rng_continuation(env._np_random), env._np_random_seed
    return seeding.np_random(seed)


# The world each trainer's checkpoints imagine (a checkpoint's training.json names its trainer).
TRAINED_FOR = {"cosmos3_gym.train.world_model": "Cosmos3World-v0", "cosmos3_gym.train_pusht": "Cosmos3PushT-v0"}


def training_record(checkpoint) -> tuple[Path, dict] | None:
    """``checkpoint``'s ``training.json`` (its path and contents), or None where it has none."""
    if not isinstance(checkpoint, (str, Path)) or not checkpoint:
        return None
    record = Path(checkpoint).expanduser() / "training.json"
    if not record.is_file():
        return None
    return record, read_json(record, "the checkpoint's training record")


def check_frame_size(size: int, env_id: str, checkpoint, model) -> None:
    """A ``ValueError`` naming ``size`` where the model's VAE cannot divide the frame (read from the
    checkpoint's config, before anything loads); the request's height and width are this size."""
    if isinstance(model, Cosmos3Model):
        factor = model.spatial_compression
    else:
        try:
            factor = component_config(Path(checkpoint or TINY_CHECKPOINT), "vae").get("scale_factor_spatial", 1)
        except (OSError, ValueError):  # a checkpoint that will not load: loading it names what is wrong
            return
    if size % factor:
        raise ValueError(f"size={size} is not allowed for {env_id}: use a multiple of {factor} (the model's VAE "
                         f"shrinks each side {factor}x)")


def trained_for(checkpoint) -> tuple[Path, str, str] | None:
    """``(training.json, trainer module, world env id)`` where ``checkpoint``'s record names one of
    :data:`TRAINED_FOR`'s trainers; None for a checkpoint without a record, or from elsewhere."""
    found = training_record(checkpoint)
    command = found[1].get("command") if found is not None else None
    words = command.split()[:3] if isinstance(command, str) else []
    if words[:2] != ["python", "-m"] or len(words) != 3 or words[2] not in TRAINED_FOR:
        return None
    return found[0], words[2], TRAINED_FOR[words[2]]


def check_checkpoint_world(checkpoint, env_id: str, given: str = "checkpoint") -> None:
    """A ``ValueError`` where ``checkpoint``'s ``training.json`` says it was trained for another world
    than ``env_id``'s (a checkpoint without a record, or from elsewhere, is taken as it is); ``given``:
    how the caller named it (``"model"``: the folder a shared ``model=`` was loaded from)."""
    found = trained_for(checkpoint)
    if found is None or found[2] == env_id:
        return
    record, trainer, world = found
    named = f"checkpoint={checkpoint!r}" if given == "checkpoint" else f"model= (loaded from {str(checkpoint)!r})"
    raise ValueError(f"{named} was trained for {world} ({record}: python -m {trainer}), not for {env_id}; use "
                     f"gym.make({world!r}, {given}=...), or a {'model' if given == 'model' else 'checkpoint'} "
                     f"trained for {env_id}")


def checked_chunk(chunk) -> int:
    """``chunk`` (actions per step of an imagined world, and of its twin), or a ``ValueError`` naming it."""
    chunk = _checked_int("chunk", chunk)
    if chunk % 4:
        raise ValueError(f"chunk={chunk} is invalid; Cosmos 3 generates 1 + 4m frames, so use a multiple of 4 "
                         "(the twin takes the same chunk as the imagined world)")
    return chunk


class ProceduralWorldEnv(gym.Env):
    """Push an object to a goal corner in the procedural world (the ground truth).

    ## Action Space
    ``Box(-1, 1, (chunk, 2), float32)``: a velocity command ``(dx, dy)`` per frame, times
    :data:`~cosmos3_gym.rollout.procedural_world.MAX_SPEED` pixels; out-of-bounds or non-finite actions raise.

    ## Observation Space
    ``Box(0, 255, (size, size, 3), uint8)``: the current frame.

    ## Rewards
    :func:`~cosmos3_gym.rollout.procedural_world.task_reward` on the chunk's frames: the progress toward the goal
    (fraction of the width) plus 1 on success.

    ## Starting State
    ``reset(seed=s)`` draws the object (colour, shape, size, position) and the goal corner from
    ``s``; the prompt ("move the big red ball to the top left") is ``info["prompt"]``.

    ## Episode End
    Terminated on success (the object's centre within 0.15 of the width of the goal's);
    truncated after ``horizon`` steps.

    ## Info
    ``prompt``, ``frames`` (uint8 ``[chunk, size, size, 3]``), ``position`` (the object's centre,
    pixels), ``success`` and ``is_success`` (the same, the key SB3's logger reads at an episode's end).

    ## Arguments
    ``gym.make("ProceduralWorld-v0", chunk=8, horizon=8, size=32, goal=None, render_mode=None)``.
    The frame does not show the goal: with ``goal=None`` (a random corner per episode) a policy
    must read it from ``info["prompt"]``, as Cosmos 3's own policy mode does; a policy that sees
    only pixels gets a fixed corner, e.g. ``goal="top left"``.

    ## Version History
    * v0: initial release.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    env_id = "ProceduralWorld-v0"  # the id its errors name
    success_radius = SUCCESS_RADIUS  # fraction of the width; a stand-in imagined world may ask for less (a margin)

    def __init__(self, chunk: int = CHUNK, horizon: int = HORIZON, size: int = SIZE, goal: str | None = None,
                 render_mode: str | None = None, **unknown):
        if unknown:
            self._refuse(unknown)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        self.chunk, self.horizon = _checked_int("chunk", chunk), _checked_int("horizon", horizon)
        self.size = _checked_int("size", size, 16)
        self.goal, self.render_mode = checked_goal(goal), render_mode
        self.observation_space, self.action_space = world_spaces(self.chunk, self.size)
        self.task: PushTask | None = None

    def _refuse(self, unknown: dict):
        """The ``TypeError`` for keywords this env does not take, saying where the imagined world's and a
        vector env's go."""
        own = constructor_keywords(ProceduralWorldEnv, {"self"})
        notes = {name: "a keyword of Cosmos3World-v0 (the imagined world: its model, sampler and success rule); "
                       "ProceduralWorld-v0 is its ground truth, with no model" for name in
                 constructor_keywords(Cosmos3WorldVectorEnv, {"self"}) if name not in own}
        batch = (f'a vector env\'s keyword; gym.make builds one env: for N envs use gym.make_vec("{self.env_id}", '
                 f'num_envs=N), or {WORLD_ENV_HINTS["ProceduralWorld-v0"]}')
        notes.update(num_envs=batch, autoreset_mode=batch, **Cosmos3WorldVectorEnv.keyword_notes)
        check_keywords(self.env_id, unknown, {"the env takes": own}, notes)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        checked_options(options, (), RESET_HINT)
        rng, rng_seed = reset_generator(self, None if seed is None else checked_seed(seed))
        task = sample_task(rng, self.size, self.goal)
        frame = draw(task, task.start, self.size)
        with deferred_interrupts():  # drawn on a copy, installed whole
            self._np_random, self._np_random_seed = rng, rng_seed
            self.task, self.position, self.frame, self.t = task, task.start, frame, 0
            return self.frame.copy(), {"prompt": self.task.prompt}

    def step(self, action):
        if self.task is None or self.t is None:
            raise RuntimeError("call reset() before step() (and after an episode ends)")
        action = checked_action(action, self.action_space, bounds_hint=COMMAND_HINT).numpy()
        centres = self._centres(action)
        frames = self._frames(centres)
        reward, success = task_reward(self.frame, frames, self.task.goal, self.success_radius)
        t = self.t + 1
        self.position, self.frame = tuple(centres[-1]), frames[-1]
        truncated = t >= self.horizon and not success
        self.t = None if success or truncated else t
        return self.frame.copy(), reward, success, truncated, {
            "prompt": self.task.prompt, "frames": frames, "position": self.position, "success": success,
            "is_success": success}

    def render(self):
        return None if not can_render(self) or self.task is None else self.frame.copy()

    # hooks for a world that is this one seen otherwise (benchmarks/world_eval_error_bound.py's stand-ins)
    def _centres(self, action: np.ndarray) -> np.ndarray:
        """The object's centres ``[chunk, 2]`` after each command of the checked ``action``."""
        return push(self.task, self.position, action, self.size)

    def _frames(self, centres: np.ndarray) -> np.ndarray:
        """The chunk's frames ``[chunk, size, size, 3]``, whose detected object is the reward's and the next step's."""
        return np.stack([draw(self.task, tuple(c), self.size) for c in centres])


class Cosmos3WorldVectorEnv(AutoresetVectorEnv):
    """``num_envs`` copies of the push task, each step imagined by Cosmos 3 in forward-dynamics mode.

    ``reset(seed=s)`` draws env ``i``'s task and first frame exactly as
    ``ProceduralWorld-v0`` does with seed ``s + i``. ``step(actions)`` runs, for all envs
    together, one forward-dynamics generation (``num_steps`` denoising steps, one batched
    transformer forward each) conditioned on each env's current frame and action chunk; the
    last imagined frame becomes the observation. Reward and termination come from
    :func:`~cosmos3_gym.rollout.procedural_world.task_reward` on the imagined frames (the world's detector).

    Spaces, rewards and episode ends are ``ProceduralWorld-v0``'s. ``infos``: ``prompt``,
    ``frames`` (the imagined chunk, uint8 ``[num_envs, chunk, size, size, 3]``), ``success``,
    ``log_prob_sum`` (the generation's summed log-density, a float per env) and ``trajectory``
    (the inner denoising :class:`~cosmos3_gym.rollout.trajectory.Trajectory` of each env, with its
    log-probs, for RL-tuning the world model against the ground truth). The denoising runs
    with ``kind``, ``guidance_scale`` and ``noise_level`` (``kind="ode"``: a deterministic
    imagination, log-probs 0). ``guidance_scale`` defaults to 1, no classifier-free guidance: the
    prompt states the goal, and guiding toward it imagines progress the actions do not cause (on
    ``cosmos3-gym world-eval``, 8 steps: exploit rate 36 % at guidance 4, 27 % at 1; Spearman rho
    0.88 and 0.94); and a step runs the conditional rows only, half the forward.

    Autoreset: ``NEXT_STEP`` (Gymnasium's default), ``SAME_STEP`` (an ended episode's last frame
    in ``infos["final_obs"]`` (a batch array, valid where ``infos["_final_obs"]``), its step infos
    in ``infos["final_info"]``, the new episode's prompt at the top level; what SB3 expects, see
    :class:`~cosmos3_gym.env.sb3.Cosmos3SB3VecEnv`) or ``DISABLED``. Every call is
    transactional: a call that raises leaves every env as it was.

    Args: ``num_envs``, ``chunk``, ``horizon``, ``size``, ``goal`` (None: a random corner per
    episode; see ``ProceduralWorld-v0``), ``num_steps``, ``kind``,
    ``guidance_scale``, ``noise_level``, ``domain`` (the embodiment of the actions),
    ``autoreset_mode``, ``render_mode``, ``checkpoint`` (a local diffusers-layout Cosmos 3
    directory, such as the ``--out`` of ``python -m cosmos3_gym.train.world_model``; default: the
    embedded model), ``device``, ``dtype``, ``model`` (a shared
    :class:`~cosmos3_gym.model.model.Cosmos3Model`; not with ``checkpoint``), ``disagreement`` (opt-in
    uncertainty: ``K >= 2`` imagines each step ``K`` times with different noise and reports the spread
    as ``infos["disagreement"]``, the mean per-pixel standard deviation in [0, 1]; the episode itself
    is the first sample, exactly as without the option; costs ``K`` generations a step),
    ``success_margin`` (opt-in pessimism, in pixels, in [0, 0.15 * size): an imagined success needs the
    detected object within the success radius (0.15 of the width: 4.8 px at size 32) minus this margin
    of the goal, so that a dream off by up to the margin does not call a success the true world would
    miss; default 0, the true world's rule. Train in a pessimistic dream (the embedded model on an H100,
    108 seeds: 2.5 px cut the harness's exploit rate from 27 % to 5.9 %; its successes are rarer, so PPO
    needs its full budget there), but rank and evaluate policies at 0: near-radius
    successes become rare in imagination, and a margin near the radius leaves almost none; see
    BENCHMARKS.md, "How far the dream can be trusted").
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8, "autoreset_mode": AutoresetMode.NEXT_STEP}
    env_id = "Cosmos3World-v0"  # the id its errors name
    keyword_notes = {"obs_type": "the observation is always the RGB frame, uint8 (size, size, 3)"}  # gym-pusht's
    reset_hint = RESET_HINT  # where an episode's start comes from, for reset's error messages

    def __init__(self, num_envs: int = 1, *, chunk: int = CHUNK, horizon: int = HORIZON, size: int = SIZE,
                 goal: str | None = None, num_steps: int = 8, kind: str = "sde", guidance_scale: float = 1.0,
                 noise_level: float = 0.7, domain: str = "pusht",
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 checkpoint: str = "", device=None, dtype=None, model=None, disagreement: int = 0,
                 success_margin: float = 0.0):
        self.num_envs = _checked_int("num_envs", num_envs)
        self.disagreement = _checked_int("disagreement", disagreement, 0)
        if self.disagreement == 1:
            raise ValueError("disagreement=1 is invalid: one sample has no spread; use 0 (off) or a number of "
                             "samples >= 2")
        self.chunk, self.horizon = checked_chunk(chunk), _checked_int("horizon", horizon)
        self.size, self.goal = _checked_int("size", size, 16), checked_goal(goal)
        self._success_margin = checked_success_margin(success_margin, self.size)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        self.autoreset_mode, self.render_mode = checked_autoreset_mode(autoreset_mode), render_mode
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        check_checkpoint_world(checkpoint, self.env_id)
        check_checkpoint_world(getattr(model, "checkpoint_path", None), self.env_id, given="model")
        # the forward-dynamics preset under this env's id, so that a bad keyword's error names the env made
        forward_dynamics = dataclasses.replace(load_preset("Cosmos3ForwardDynamicsRollout-v0"), id=self.env_id)
        self.preset = forward_dynamics.override(
            num_frames=self.chunk + 1, height=self.size, width=self.size, num_steps=num_steps, kind=kind,
            guidance_scale=guidance_scale, noise_level=noise_level, domain=domain, reward="none", checkpoint=checkpoint)
        check_frame_size(self.size, self.env_id, checkpoint, model)
        self.engine = build_engine(self.preset, self.num_envs, device=device, dtype=dtype, model=model)
        self.device = self.engine.device
        self.single_observation_space, self.single_action_space = world_spaces(self.chunk, self.size)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.tasks: list[PushTask | None] = [None] * self.num_envs
        self.frames = np.zeros((self.num_envs, self.size, self.size, 3), dtype=np.uint8)
        self.t = np.zeros(self.num_envs, dtype=np.int64)
        self.needs_reset = np.ones(self.num_envs, dtype=bool)
        self._rngs = [np.random.default_rng() for _ in range(self.num_envs)]  # seeded by reset(seed=...)

    @property
    def model(self):
        return self.engine.model

    @property
    def success_margin(self) -> float:
        """The ``success_margin`` this env was made with, in pixels (read-only: make another env to change it)."""
        return self._success_margin

    @property
    def success_radius(self) -> float:
        """Imagined success: the object's centre within this fraction of the width of the goal's."""
        return SUCCESS_RADIUS - self._success_margin / self.size

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        checked_options(options, (), self.reset_hint)
        seeds = per_env_seeds(seed, self.num_envs)
        if seeds is None:
            seeds = [int(r.integers(SEED_RANGE[1])) for r in self._rng_continuation()]  # installed below, or not at all
        rngs = [np.random.default_rng(s) for s in seeds]
        starts = {i: self._first_episode(s, rng) for i, (s, rng) in enumerate(zip(seeds, rngs))}
        with deferred_interrupts():  # the return value is built in the section: a Ctrl-C there says it took effect
            self._install(None, starts, rngs)
            return self.frames.copy(), self._prompt_infos(self.tasks)

    def _first_episode(self, seed: int, rng: np.random.Generator) -> tuple:
        """``(task, first frame)`` of the episode ``reset(seed=...)`` gives an env: ``ProceduralWorld-v0``'s."""
        task = sample_task(rng, self.size, self.goal)
        return task, draw(task, task.start, self.size)

    # --- the autoreset protocol's hooks (env/autoreset.py) ----------------------------
    @property
    def _started(self) -> bool:
        return self.tasks[0] is not None

    @property
    def _needs_reset(self) -> np.ndarray:
        return self.needs_reset.copy()

    action_hint = COMMAND_HINT  # what the actions' entries are, for their error messages

    def _checked_actions(self, actions, count: int | None = None) -> np.ndarray:
        """A batch of ``count`` actions (default: one per env), validated."""
        return checked_action(actions, self.single_action_space, (count or self.num_envs,),
                              bounds_hint=self.action_hint).numpy()

    def _rng_continuation(self) -> list[np.random.Generator]:
        return [rng_continuation(rng) for rng in self._rngs]

    def _prepare_resets(self, envs: list[int], rngs: list) -> dict:
        """A new task and first frame for each of ``envs``, drawn from its generator's continuation."""
        tasks = {i: sample_task(rngs[i], self.size, self.goal) for i in envs}
        return {i: (task, draw(task, task.start, self.size)) for i, task in tasks.items()}

    def _model_actions(self, actions: np.ndarray, frames: np.ndarray) -> np.ndarray:
        """The robot action chunks the model is conditioned on, given the frames they start from (this
        world: the commands as they are)."""
        return actions

    def _score_chunk(self, i: int, chunk: np.ndarray) -> tuple[float, bool, np.ndarray, dict]:
        """Env ``i``'s ``(reward, success, frames kept, extra infos)`` for its imagined ``chunk``
        (:func:`~cosmos3_gym.rollout.procedural_world.task_reward`, read by the world's detector)."""
        reward, success = task_reward(self.frames[i], chunk, self.tasks[i].goal, self.success_radius)
        return reward, success, chunk, {}

    def _prepare_step(self, actions: np.ndarray, stepping: list[int], rngs: list) -> PreparedStep:
        """One imagined chunk per stepping env (one batched generation), scored by :meth:`_score_chunk`."""
        rewards = np.zeros(self.num_envs)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        infos, pending = {}, {}
        if stepping:
            frames = self.frames[stepping]
            imagined, trajectories, spread = self._imagine(stepping, [self.tasks[i] for i in stepping], frames,
                                                           self._model_actions(actions[stepping], frames), rngs)
            infos.update(self._disagreement_infos(stepping, spread))
            mask = np.isin(np.arange(self.num_envs), stepping)
            chunk_frames = np.zeros((self.num_envs, *imagined.shape[1:]), dtype=np.uint8)
            extras: dict = {}
            for j, i in enumerate(stepping):
                rewards[i], terminated[i], chunk_frames[i], extra = self._score_chunk(i, imagined[j])
                for key, value in extra.items():
                    if key not in extras:
                        extras[key] = np.zeros((self.num_envs, *np.shape(value)), dtype=np.asarray(value).dtype)
                    extras[key][i] = value
                pending[i] = (chunk_frames[i, -1], self.t[i] + 1)
                truncated[i] = pending[i][1] >= self.horizon and not terminated[i]
            column = object_column(size=self.num_envs)
            column[stepping] = trajectories
            log_prob = np.full(self.num_envs, np.nan)
            log_prob[stepping] = [float(tr.log_prob_sums.sum()) for tr in trajectories]
            infos.update(frames=chunk_frames, _frames=mask, trajectory=column, _trajectory=mask.copy(),
                         log_prob_sum=log_prob, _log_prob_sum=mask.copy(), success=terminated.copy(),
                         _success=mask.copy())  # one mask array per key, as Gymnasium makes them
            for key, values in extras.items():
                infos.update({key: values, f"_{key}": mask.copy()})
        infos.update(self._prompt_infos(self.tasks))
        ended = np.flatnonzero(terminated | truncated).tolist()
        return PreparedStep(rewards, terminated, truncated, ended, infos, (pending, ended))

    def _install(self, step, resets: dict | None, rngs: list) -> None:
        self._rngs = rngs
        pending, ended = step or ({}, [])
        for i, (frame, t) in pending.items():
            self.frames[i], self.t[i] = frame, t
        self.needs_reset[ended] = True
        for i, (task, frame) in (resets or {}).items():
            self.tasks[i], self.frames[i], self.t[i], self.needs_reset[i] = task, frame, 0, False

    def _observations(self) -> np.ndarray:
        return self.frames.copy()

    def _reset_infos(self, envs: list[int]) -> dict:
        return self._prompt_infos(self.tasks)

    def _prompt_infos(self, tasks: list[PushTask]) -> dict:
        """Every env's task prompt (the reset info; a step reports it for every env too)."""
        return {"prompt": object_column(task.prompt for task in tasks), "_prompt": np.ones(self.num_envs, dtype=bool)}

    def imagine(self, frames, actions, seeds, prompts) -> np.ndarray:
        """What the model imagines from frames of your choosing: ``frames`` uint8 ``[b, *obs shape]``
        (``1 <= b <= num_envs``) under ``actions`` ``[b, *action shape]`` (this env's action space), one
        generation per frame from ``seeds`` with ``prompts``: the uint8 chunks ``[b, chunk, *obs shape]``.
        The generation a step runs (this env's sampler settings; the chunk a step would score, before a
        PushT step repeats its success frame), with no env's state changed: for what-if questions, and
        for training a world model on its own imaginings (``python -m cosmos3_gym.train_pusht
        --imagined-conditions``). The same frames, actions, seeds and prompts in the same order give a
        step's chunks bit for bit; a subset of them can differ by a pixel level (the batch's rounding,
        see :meth:`_imagine`). Bad input raises ``ValueError``; nothing changes either way."""
        frames = np.asarray(frames)
        shape = self.single_observation_space.shape
        if frames.dtype != np.uint8 or frames.ndim != len(shape) + 1 or frames.shape[1:] != shape \
                or not 1 <= len(frames) <= self.num_envs:
            raise ValueError(f"frames has dtype {frames.dtype} and shape {frames.shape}; expected uint8 frames of "
                             f"shape (b, {', '.join(map(str, shape))}) with 1 <= b <= num_envs={self.num_envs} "
                             "(stack observations, e.g. np.stack([obs]))")
        count = len(frames)
        actions = self._checked_actions(actions, count)
        if not all(isinstance(given, (list, tuple, np.ndarray)) for given in (seeds, prompts)) \
                or len(seeds) != count or len(prompts) != count:
            raise ValueError(f"{count} frames take a list of {count} seeds and one of {count} prompts, got "
                             f"seeds={seeds!r} and prompts={prompts!r}")
        seeds = [checked_seed(seed, f"seeds[{j}]") for j, seed in enumerate(seeds)]
        for j, prompt in enumerate(prompts):
            if not isinstance(prompt, str) or not prompt:
                raise ValueError(f"prompts[{j}]={prompt!r} is invalid; use a non-empty string (the env's: "
                                 "info['prompt'])")
        slots = list(range(count))  # the engine is scratch space between steps: no env's state lives there
        conditions = self._conditions(frames, self._model_actions(actions, frames))
        return self._generate(slots, seeds, prompts, conditions)[:, 1:]

    def _conditions(self, frames: np.ndarray, model_actions: np.ndarray) -> list:
        """Forward dynamics' clean conditions of ``frames`` under ``model_actions``, encoded in one VAE call."""
        return self.engine.model.encode_action_conditions(Task.FORWARD_DYNAMICS, self.chunk,
                                                          self.preset.resolution_tier, frames, model_actions)

    def _imagine(self, slots: list[int], tasks: list[PushTask], frames: np.ndarray, actions: np.ndarray,
                 rngs: list[np.random.Generator]) -> tuple[np.ndarray, list]:
        """One forward-dynamics generation per slot: the imagined chunk uint8 ``[b, chunk, H, W, 3]``,
        the inner denoising trajectories and (``disagreement >= 2``) the spread of that many samples.
        The engine is this env's scratch space.

        The slots' conditioning frames are encoded in one VAE call and their chunks decoded in another
        (per sample): on a 2-core CPU the tiny world imagines 1.4-1.5x the frames/s at 16 envs, 1.7x at
        4, of encoding one env at a time (``benchmarks/world_batching_cpu.txt``). Batching moves only the
        rounding: in fp32 on the CPU a slot's conditioning latent is within 1.3e-6 of its own encode, its
        denoised latents within 2.5e-5 of a single-env run's, and an imagined pixel within one uint8
        level of its own decode (12 of 393,216 pixels at 16 envs), so a slot's chunk depends on the slots
        stepping beside it only that far."""
        conditions = self._conditions(frames, actions)
        seeds = [int(rngs[i].integers(SEED_RANGE[1])) for i in slots]
        prompts = [task.prompt for task in tasks]
        video = self._generate(slots, seeds, prompts, conditions)
        trajectories = [self.engine.trajectory(i) for i in slots]
        spread = None
        if self.disagreement >= 2:  # more samples of the same step, from seeds of their own (the episode's draws stay)
            samples = [video] + [self._generate(slots, [int(np.random.default_rng([s, k]).integers(SEED_RANGE[1]))
                                                         for s in seeds], prompts, conditions)
                                 for k in range(1, self.disagreement)]
            spread = np.stack(samples).astype(np.float32).std(axis=0).mean(axis=(1, 2, 3, 4)) / 255.0
        return video[:, 1:], trajectories, spread

    def _generate(self, slots: list[int], seeds: list[int], prompts: list[str], conditions: list) -> np.ndarray:
        """One forward-dynamics generation per slot from ``seeds``: uint8 ``[b, chunk + 1, H, W, 3]``."""
        p = self.preset
        self.engine.reset_slots(slots, seeds, prompts, [p.negative_prompt] * len(slots),
                                conditions=conditions, domains=[p.domain] * len(slots))
        guidance = torch.full((len(slots),), p.guidance_scale)
        level = torch.full((len(slots),), p.noise_level)
        with torch.no_grad():
            for _ in range(self.engine.num_steps):
                self.engine.step(slots, guidance, level)
        return self.engine.decode(slots)

    def _disagreement_infos(self, stepping: list[int], spread) -> dict:
        """``disagreement``: the mean per-pixel standard deviation (in [0, 1]) of ``disagreement`` imagined
        samples of the step (different noise), where it was asked for."""
        if spread is None:
            return {}
        values = np.full(self.num_envs, np.nan)
        values[stepping] = spread
        return {"disagreement": values, "_disagreement": np.isin(np.arange(self.num_envs), stepping)}

    def render(self):
        if not can_render(self) or not self._started:
            return None
        return tuple(frame.copy() for frame in self.frames)


def make_world_vector_env(**keywords) -> Cosmos3WorldVectorEnv:
    """``gym.make_vec``'s vector entry point: a :class:`Cosmos3WorldVectorEnv`, its keywords checked first."""
    return checked_vector_env(Cosmos3WorldVectorEnv, keywords)


class WorldEnvView(SingleEnvView):
    """One env of a world vector env: its step info also carries ``is_success`` (its ``success``), the
    key SB3's logger reads at an episode's end, as the ground-truth worlds' infos do; it renders its
    env's current frame."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["is_success"] = info["success"]
        return obs, reward, terminated, truncated, info

    def render(self):
        frames = self.vector.render() if can_render(self) else None
        return None if frames is None else frames[0]


class Cosmos3WorldEnv(WorldEnvView):
    """The procedural world's push task, each step imagined by Cosmos 3: one env of
    :class:`Cosmos3WorldVectorEnv` (its docstring has every detail).

    ## Action Space, Observation Space, Starting State
    ``ProceduralWorld-v0``'s (:class:`ProceduralWorldEnv`): ``Box(-1, 1, (chunk, 2), float32)`` velocity
    commands, the uint8 ``(size, size, 3)`` frame; ``reset(seed=s)`` returns ``ProceduralWorld-v0``'s
    first frame for ``s``.

    ## Rewards and Episode End
    ``ProceduralWorld-v0``'s rules, read from the imagined frames by the world's detector: progress
    toward the goal plus 1 on success; terminated on imagined success (within the radius less
    ``success_margin``), truncated after ``horizon`` steps.

    ## Info
    ``prompt``, ``frames`` (the imagined chunk), ``success`` and ``is_success`` (the same, the key SB3's
    logger reads), ``log_prob_sum`` and ``trajectory`` (the denoising trajectory, to RL-tune the world
    model); ``disagreement`` with ``disagreement=K``. No ``position``: the dream has no true state (the
    harness reads the object from the frames, :func:`~cosmos3_gym.world.harness.object_centre`).
    ``render()`` (``render_mode="rgb_array"``) returns the current frame, uint8 ``(size, size, 3)``.

    ## Arguments
    ``gym.make("Cosmos3World-v0", chunk=8, horizon=8, size=32, goal=None, num_steps=8, kind="sde",
    guidance_scale=1.0, noise_level=0.7, domain="pusht", checkpoint="", device=None, dtype=None,
    model=None, disagreement=0, success_margin=0.0, render_mode=None)``: what each does is in
    :class:`Cosmos3WorldVectorEnv`.

    ## Version History
    * v0: initial release; ``guidance_scale`` 4 by default until this release, now 1 (pass
      ``guidance_scale=4`` for the earlier imagination).
      ``success_margin`` added since (opt-in; its default, 0, keeps the episodes as they were).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, render_mode: str | None = None, **kwargs):
        check_view_keywords("Cosmos3World-v0", Cosmos3WorldVectorEnv, kwargs)
        super().__init__(Cosmos3WorldVectorEnv(1, autoreset_mode=AutoresetMode.DISABLED, render_mode=render_mode,
                                               **kwargs), render_mode, bounds_hint=COMMAND_HINT)

    @property
    def success_margin(self) -> float:
        """The ``success_margin`` this env was made with, in pixels (see :class:`Cosmos3WorldVectorEnv`)."""
        return self.vector.success_margin
