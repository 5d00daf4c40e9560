"""Cosmos3RolloutVectorEnv: B Cosmos 3 episodes advanced by one batched forward per step.

This is the implementation; :class:`~cosmos3_gym.env.rollout_env.Cosmos3RolloutEnv` is its B = 1 view.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ..model.interrupts import deferred_interrupts
from ..model.tasks import TASKS, checked_domain
from ..rollout.engine import RolloutEngine
from ..rollout.seeding import draw_prompts, draw_seeds, reset_seeds, rng_continuation
from ..rollout.streams import LOG_PROB_INFO, OBS_KEYS
from .autoreset import AutoresetVectorEnv, PreparedStep, checked_autoreset_mode
from .infos import object_column
from .presets import Preset, as_preset
from .rendering import can_render
from .rewards import REWARDS, checked_reward, checked_reward_fn
from .spaces import (action_hint, action_space, build_engine, checked_action, checked_options, default_action,
                     finite_float32, observation_space)

OPTION_KEYS = ("prompt", "negative_prompt", "reset_mask", "image", "video", "actions", "domain")
# The dimensions of one env's value of each reset input (which inputs a task takes: model/tasks.py).
CONDITION_NDIM = {"image": 3, "video": 4, "actions": 2}
# The env id that takes an input, for the error that names it.
ENV_FOR_INPUT = {"image": "Cosmos3RolloutI2V-v0 or Cosmos3PolicyRollout-v0",
                 "video": "Cosmos3RolloutV2V-v0 or Cosmos3InverseDynamicsRollout-v0",
                 "actions": "Cosmos3ForwardDynamicsRollout-v0", "domain": "an action rollout"}
ARRAY_TYPES = ("numpy", "torch")
# Per-step info keys: (info key, Transition field).
STEP_INFO = (("log_prob", "log_prob"), ("log_prob_sum", "log_prob_sum"), ("sigma", "sigma"),
             ("sigma_next", "sigma_next"), ("timestep", "timestep"), ("guidance_scale", "guidance"),
             ("noise_level", "noise_level"))


def checked_fork(src, dst, seeds, num_envs: int) -> tuple[int, list[int]]:
    """``(src, dst)`` of ``fork(src, dst, seeds)`` as ints, or ``ValueError`` saying what is wrong."""
    n = num_envs
    if isinstance(src, bool) or not isinstance(src, (int, np.integer)) or not 0 <= int(src) < n:
        raise ValueError(f"fork(src={src!r}): src must be an env index in [0, {n})")
    if not isinstance(dst, (list, tuple, np.ndarray)):
        raise ValueError(f"fork(dst={dst!r}): dst must be a list of env indices, e.g. fork({src}, [{dst}])")
    if seeds is not None and (not isinstance(seeds, (list, tuple, np.ndarray)) or len(seeds) != len(dst)):
        raise ValueError(f"fork(seeds={seeds!r}): seeds must be a list with one seed (or None) per child")
    dst = list(dst)
    if not dst or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= int(d) < n
                      for d in dst):
        raise ValueError(f"fork(dst={dst!r}): dst must be a non-empty list of env indices in [0, {n})")
    src, dst = int(src), [int(d) for d in dst]
    if src in dst or len(set(dst)) != len(dst):
        raise ValueError(f"fork(src={src}, dst={dst}): dst must be distinct and must not contain src")
    return src, dst


def nan_error(step: int) -> str:
    return f"the latent became NaN/Inf at step {step}; the episode ends here with reward 0"


class Cosmos3RolloutVectorEnv(AutoresetVectorEnv):
    """``num_envs`` episodes of a Cosmos 3 preset in one :class:`~cosmos3_gym.rollout.engine.RolloutEngine`.

    Each step packs the conditional and unconditional rows of every env into *one*
    transformer forward (the conditional rows alone when every env's guidance scale is 1); rows are isolated by attention masks, so env ``i``'s result
    depends only on its own seed and actions (equal to the single env's within float
    rounding), never on ``num_envs`` or its neighbours.

    Spaces are the single env's (:class:`~cosmos3_gym.env.rollout_env.Cosmos3RolloutEnv`) batched with
    ``batch_space``. ``array_type="numpy"`` (default): observations, rewards, flags and
    infos are numpy arrays that lie in those spaces, so Gymnasium's vector wrappers
    (``RecordEpisodeStatistics``, ``NormalizeReward``, ...) work unmodified, and so do its
    array conversions (``NumpyToTorch``, ``ArrayConversion``): they convert every numeric
    entry and keep the entries of Python objects (prompts, trajectories, messages; see
    :mod:`cosmos3_gym.env.infos`) as they are. ``array_type="torch"``: the
    same values as torch tensors on the engine's device, without the host round trip of the
    latents that such a conversion makes (the spaces still describe shapes and dtypes).
    Actions may be torch tensors or numpy arrays either way.

    ``reset(seed=s)`` seeds env ``i`` with ``s + i`` (or takes a list of B seeds; seeds lie in
    ``[0, 2**63 - 1]``). ``options``: ``prompt`` / ``negative_prompt`` (a str for all, or a
    list: one per env, or one per group when ``group_size > 1``), ``reset_mask`` (reset
    only those envs) and, for conditioned presets (``conditioning="image"`` / ``"video"``),
    ``image`` (uint8 ``[H, W, 3]``, or one per env / per group) or ``video`` (uint8
    ``[F, H, W, 3]``, ``F = 1 + 4k``): those frames stay clean, the rest is generated. Without
    it, each group gets a scene of :mod:`cosmos3_gym.rollout.procedural_world` (its first frame, or its first
    ``condition_frames`` frames) and, unless a prompt is given, the scene's caption. Action
    rollouts take ``image`` / ``video`` / ``actions`` and ``domain`` likewise (see
    :class:`~cosmos3_gym.env.rollout_env.Cosmos3RolloutEnv`). ``group_size=g`` makes consecutive groups of ``g`` envs share a prompt
    with distinct seeds (GRPO groups). :meth:`fork` branches one env's state into others.

    Autoreset: ``autoreset_mode`` (``metadata["autoreset_mode"]``) is ``NEXT_STEP``
    (Gymnasium's default: the step after an episode ends resets that env and ignores its
    action), ``SAME_STEP`` (reset at once; ``infos["final_info"]`` holds the ended episodes'
    step infos, as in Gymnasium's ``SyncVectorEnv``, and ``infos["final_obs"]`` the batched
    observation before the reset, one dict of arrays rather than an object array of per-env
    dicts; both masked by ``_final_obs``) or ``DISABLED``. An env that begins an episode inside ``step`` reports
    that episode's ``seed`` and ``prompt`` as ``reset`` does.

    At an episode's end the step infos carry ``trajectory`` (an object array of
    :class:`~cosmos3_gym.rollout.trajectory.Trajectory`, masked by ``_trajectory``) and ``frames``
    (in ``final_info`` under ``SAME_STEP``).

    Every call is transactional: it validates and computes first and changes the envs
    last, so a call that raises (bad input, a reward function or a forward that throws,
    Ctrl-C) leaves every env exactly as before; the same step can simply be retried. The
    computed result is installed in one section a Ctrl-C cannot split (a Ctrl-C that lands
    there is raised once it is installed).

    Arguments are the single env's plus ``num_envs``, ``group_size``, ``autoreset_mode`` and
    ``array_type``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, preset: str | Preset = "Cosmos3Rollout-v0", *, group_size: int = 1,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 device=None, dtype=None, reward_fn=None, model=None, array_type: str = "numpy", **overrides):
        preset = as_preset(preset)
        preset.check_keywords(overrides, ENV_ARGUMENTS)
        self.preset = preset.override(**overrides)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} is invalid; use an integer >= 1")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1 or num_envs % group_size:
            raise ValueError(f"group_size={group_size!r} must be a positive divisor of num_envs={num_envs}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        if array_type not in ARRAY_TYPES:
            raise ValueError(f"array_type={array_type!r} is not supported; choose one of {ARRAY_TYPES}")
        if reward_fn is not None:
            checked_reward_fn(reward_fn, overrides.get("reward"))
        self.autoreset_mode = checked_autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.num_envs, self.group_size, self.render_mode, self.array_type = num_envs, group_size, render_mode, array_type
        self.reward_fn = reward_fn or REWARDS[self.preset.reward]
        self.engine: RolloutEngine = build_engine(self.preset, num_envs, device=device, dtype=dtype, model=model)
        self.device = self.engine.device
        self.single_observation_space = observation_space(self.engine.stream_shapes, self.engine.num_steps)
        self.single_action_space = action_space(self.preset, self.engine.stream_shapes)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.default_action = default_action(self.preset, self.single_action_space)
        self._rng = np.random.default_rng()

    @property
    def _needs_reset(self) -> np.ndarray:
        """Which envs have no running episode (read from the engine: one source of truth)."""
        return np.array([e is None or e.done for e in self.engine.episodes])

    @property
    def _was_reset(self) -> bool:
        return all(e is not None for e in self.engine.episodes)

    @property
    def model(self):
        """The :class:`~cosmos3_gym.model.model.Cosmos3Model` (possibly shared with other envs)."""
        return self.engine.model

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    # --- outputs --------------------------------------------------------------------
    def _out(self, value):
        """A torch tensor as this env's array type (numpy on the host, or the tensor itself)."""
        if self.array_type == "torch" or not isinstance(value, torch.Tensor):
            return value
        return value.detach().cpu().numpy()

    def _obs(self) -> dict:
        episodes = [self.engine.episode(i) for i in range(self.num_envs)]
        steps = torch.tensor([[e.step] for e in episodes], device=self.device)
        return {
            **{OBS_KEYS[name]: self._out(torch.stack([e.current(name) for e in episodes]).clone())
               for name in self.engine.streams},
            "sigma": self._out(torch.stack([e.sigmas[e.step : e.step + 1] for e in episodes]).clone()),
            "step": self._out(steps),
        }

    @staticmethod
    def numpy_obs(obs: dict) -> dict:
        """The numpy view of an observation dict (for ``array_type="torch"`` users)."""
        return {key: value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
                for key, value in obs.items()}

    # --- reset ----------------------------------------------------------------------
    def _per_env(self, name: str, value, default) -> list:
        """Expand a str / per-env list / per-group list option to one value per env."""
        if value is None:
            value = default
        if isinstance(value, str):
            return [value] * self.num_envs
        if not isinstance(value, (list, tuple, np.ndarray)):
            raise ValueError(f"options[{name!r}]={value!r} is not a str or a list of str")
        value = list(value)
        groups = self.num_envs // self.group_size
        if len(value) == self.num_envs and self.group_size == 1:
            return value
        if len(value) == groups:
            return [v for v in value for _ in range(self.group_size)]
        allowed = f"{self.num_envs} (one per env)" if self.group_size == 1 else f"{groups} (one per group)"
        raise ValueError(f"options[{name!r}] has {len(value)} entries; expected a str or a list of {allowed}")

    def _rng_copy(self) -> np.random.Generator:
        """The env RNG's continuation, to draw from and install only once a call succeeds."""
        return rng_continuation(self._rng)

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        options = checked_options(options, OPTION_KEYS)
        mask = np.asarray(options.pop("reset_mask", np.ones(self.num_envs, dtype=bool)))
        if mask.shape != (self.num_envs,) or mask.dtype != bool:
            raise ValueError(f"options['reset_mask'] is {mask!r}; expected a bool array of shape ({self.num_envs},)")
        if not mask.all() and not self._was_reset:
            raise ValueError("options['reset_mask'] must select every env on the first reset()")
        seeds, rng = reset_seeds(seed, self.num_envs, self._rng_copy())
        envs = np.flatnonzero(mask).tolist()
        episodes = self._prepare_episodes(rng, options, envs, seeds)
        # Everything is checked: install, and build the return value in the same section (a Ctrl-C
        # during either says that the reset took effect; once it has, only the return remains).
        with deferred_interrupts():
            self.engine.commit(resets=dict(zip(envs, episodes)))
            self._rng = rng
            return self._obs(), self._reset_infos(envs)

    def _reset_infos(self, envs: list[int]) -> dict:
        """``seed`` and ``prompt`` of the episodes that ``envs`` have just begun, masked to them."""
        seeds = np.zeros(self.num_envs, dtype=np.int64)
        seeds[envs] = [self.engine.episode(i).seed for i in envs]
        mask = self._mask(envs)
        return {"seed": seeds, "_seed": mask, "prompt": object_column(e.prompt for e in self.engine.episodes),
                "_prompt": mask.copy()}

    def _prepare_episodes(self, rng: np.random.Generator, options: dict, envs: list[int], seeds: list[int]) -> list:
        """Episodes for ``envs`` from the reset options (see :meth:`_requests`), not installed."""
        prompts, negatives, conditions, domains = self._requests(rng, options, envs)
        return self.engine.prepare_reset(envs, [seeds[i] for i in envs], [prompts[i] for i in envs],
                                         [negatives[i] for i in envs], conditions=[conditions[i] for i in envs],
                                         domains=[domains[i] for i in envs])

    def _requests(self, rng: np.random.Generator, options: dict, envs: list[int]) -> tuple[list, list, list, list]:
        """Per-env prompts, negative prompts, conditions (encoded for ``envs`` only) and embodiments
        from the reset options, drawing what they leave open (one draw per GRPO group)."""
        p, groups = self.preset, self.num_envs // self.group_size
        inputs = TASKS[p.task].inputs
        for key in ("image", "video", "actions", "domain"):
            if key in options and key not in inputs and not (key == "domain" and p.action_task):
                raise ValueError(f"options[{key!r}] is not an input of this env (conditioning={p.conditioning!r}, "
                                 f"which takes {list(inputs) or 'none of image/video/actions'}); use "
                                 f"{ENV_FOR_INPUT[key]}")
        frames_key = inputs[0] if inputs else None
        if frames_key is not None and options.get(frames_key) is None:
            clips, default_prompts = self._draw_scenes(rng, groups)
        else:
            clips, default_prompts = None, draw_prompts(rng, p.prompts, groups)
        prompts = self._per_env("prompt", options.get("prompt"), default_prompts)
        negatives = self._per_env("negative_prompt", options.get("negative_prompt"), p.negative_prompt)
        domains = self._per_env("domain", options.get("domain"), p.domain) if p.action_task else [""] * self.num_envs
        action_dim = self.engine.stream_shapes["action"][1] if p.action_task else 0
        raw_dims = [checked_domain(d, action_dim, "options['domain']")[1] if p.action_task else 0 for d in domains]
        conditions = [None] * self.num_envs
        if frames_key is None:
            return prompts, negatives, conditions, domains
        frames = clips if clips is not None else self._per_env_arrays(frames_key, options[frames_key])
        actions = [None] * self.num_envs
        if "actions" in inputs:
            given = options.get("actions")
            actions = self._draw_actions(rng, raw_dims) if given is None else self._per_env_arrays("actions", given, raw_dims)
            for i, (item, raw_dim) in enumerate(zip(actions, raw_dims)):
                if tuple(item.shape) != (p.num_frames - 1, raw_dim):
                    raise ValueError(f"options['actions'] for env {i} has shape {tuple(item.shape)}; expected "
                                     f"({p.num_frames - 1}, {raw_dim}): one action per transition (chunk = "
                                     f"num_frames - 1) of the {domains[i]!r} embodiment")
        encoded = {}
        for i in envs:  # one encode per distinct input (a GRPO group shares one)
            key = (id(frames[i]), id(actions[i]))
            if key not in encoded:
                if p.action_task:
                    encoded[key] = self.engine.model.encode_action_condition(
                        p.conditioning, p.num_frames - 1, p.resolution_tier, actions=actions[i],
                        **{frames_key: frames[i]})
                else:
                    encoded[key] = self.engine.model.encode_condition(p.num_frames, p.height, p.width,
                                                                      **{frames_key: frames[i]})
            conditions[i] = encoded[key]
        return prompts, negatives, conditions, domains

    def _draw_scenes(self, rng: np.random.Generator, count: int) -> tuple[list[np.ndarray], list[str]]:
        """``count`` conditioning clips from scenes of the procedural world, and their captions."""
        from ..rollout.procedural_world import render, sample_scene

        p = self.preset
        key = TASKS[p.task].inputs[0]
        if p.height != p.width:
            raise ValueError(f"reset() without options[{key!r}] draws a scene of the square procedural "
                             f"world, but this env is {p.height}x{p.width}: pass options[{key!r}]")
        frames = {"leading": p.condition_frames, "all": p.num_frames}.get(TASKS[p.task].clean_frames, 1)
        scenes = [sample_scene(rng, p.num_frames, p.height) for _ in range(count)]
        clips = [render(scene, p.num_frames, p.height)[:frames] for scene in scenes]
        clips = [clip[0] if key == "image" else clip for clip in clips]
        return [clip for clip in clips for _ in range(self.group_size)], [s.caption for s in scenes]

    def _draw_actions(self, rng: np.random.Generator, raw_dims: list[int]) -> list[np.ndarray]:
        """Uniform actions in [-1, 1] per group (forward dynamics without ``options['actions']``)."""
        chunk, drawn = self.preset.num_frames - 1, []
        for group in range(self.num_envs // self.group_size):
            actions = rng.uniform(-1.0, 1.0, (chunk, raw_dims[group * self.group_size])).astype(np.float32)
            drawn += [actions] * self.group_size
        return drawn

    def _per_env_arrays(self, name: str, value, raw_dims: list[int] | None = None) -> list[np.ndarray]:
        """Expand one conditioning array, or one per env / per group, to one per env; check each
        (``raw_dims``: each env's embodiment action size, for the actions' message)."""
        p, ndim = self.preset, CONDITION_NDIM[name]
        try:
            array = np.asarray(value)
        except ValueError:  # numpy's "inhomogeneous shape": a list of arrays of different shapes
            try:
                shapes = [np.shape(item) for item in value][:4]
            except ValueError:
                shapes = "nested deeper"
            raise ValueError(f"options[{name!r}] holds arrays of different shapes ({shapes}); give arrays of one "
                             "shape, one per env or one per group") from None
        groups = self.num_envs // self.group_size
        raw_dim = raw_dims[0] if raw_dims and len(set(raw_dims)) == 1 else "raw_dim"
        one = {"image": f"uint8 array of shape ({p.height}, {p.width}, 3)",
               "video": f"uint8 array of shape (frames, {p.height}, {p.width}, 3)",
               "actions": f"float32 array of shape ({p.num_frames - 1}, {raw_dim})"}[name]
        if array.ndim == ndim:
            items = [array] * self.num_envs
        elif array.ndim == ndim + 1 and len(array) == groups:
            items = [item for item in array for _ in range(self.group_size)]
        elif array.ndim == ndim + 1 and len(array) == self.num_envs:
            items = list(array)
        else:
            stacks = f"{self.num_envs} (one per env)" + (f" or {groups} (one per group)" if self.group_size > 1 else "")
            raise ValueError(f"options[{name!r}] has shape {array.shape}; expected one {one}"
                             + ("" if self.num_envs == 1 else f" for every env, or a stack of {stacks}"))
        if name == "actions":
            if array.dtype.kind != "f":
                raise ValueError(f"options['actions'] must hold finite floats (one {one}); got "
                                 f"dtype {array.dtype}")
            finite_float32(array, "options['actions']")  # after the cast: a float64 1e300 is inf in float32
            return [item.astype(np.float32) for item in items]
        for item in items:
            shape = (p.height, p.width, 3)
            if item.dtype != np.uint8:
                raise ValueError(f"options[{name!r}] has dtype {item.dtype}; expected uint8 pixels in [0, 255]")
            if tuple(item.shape[-3:]) != shape:
                raise ValueError(f"options[{name!r}] has frames of shape {tuple(item.shape[-3:])}; this env "
                                 f"generates {shape} (height, width, RGB)")
            if name == "video" and TASKS[p.task].clean_frames == "all":
                if item.shape[0] != p.num_frames:
                    raise ValueError(f"options['video'] has {item.shape[0]} frames; inverse dynamics infers the "
                                     f"actions between all {p.num_frames} frames (chunk + 1)")
            elif name == "video":
                count, latent_frames = item.shape[0], self.engine.latent_shape[1]
                if (count - 1) % 4 or not 1 <= (count - 1) // 4 + 1 < latent_frames:
                    raise ValueError(f"options['video'] has {count} frames; give 1 + 4k frames (whole latent "
                                     f"frames), fewer than num_frames={p.num_frames} so that some are generated")
        return items

    def _prepare_autoreset(self, envs: list[int], rng: np.random.Generator) -> dict:
        """Fresh episodes for ``envs`` (new seeds; new prompts and conditions per GRPO group), not installed."""
        seeds = draw_seeds(rng, len(envs))
        return dict(zip(envs, self._prepare_episodes(rng, {}, envs, dict(zip(envs, seeds)))))

    # --- step: the autoreset protocol's hooks (env/autoreset.py) ---------------------
    @property
    def _started(self) -> bool:
        return self._was_reset

    def _checked_actions(self, actions):
        return checked_action(actions, self.single_action_space, (self.num_envs,), device=self.device,
                              bounds_hint=action_hint(self.preset))

    def _rng_continuation(self) -> np.random.Generator:
        return self._rng_copy()

    def _prepare_resets(self, envs: list[int], rng: np.random.Generator) -> dict:
        return self._prepare_autoreset(envs, rng)

    def _prepare_step(self, actions, stepping: list[int], rng) -> PreparedStep:
        """One denoising step of ``stepping`` (one batched forward), scored where an episode ends."""
        n = self.num_envs
        rewards = torch.zeros(n, device=self.device)
        terminations = torch.zeros(n, dtype=torch.bool, device=self.device)
        infos: dict = {}
        transition, ended = None, []
        if stepping:
            transition = self._prepare_transition(actions, stepping)
            ended = [s for s, d in zip(stepping, transition.done.tolist()) if d]
            if ended:
                rewards[ended], infos = self._score(ended, transition)
                infos.update(self._generated(ended, transition))
                terminations[ended] = True
            infos.update(self._step_infos(transition))
        truncations = torch.zeros(n, dtype=torch.bool, device=self.device)
        if self.array_type == "numpy":
            rewards, terminations, truncations = (rewards.cpu().numpy().astype(np.float64),
                                                  terminations.cpu().numpy(), truncations.cpu().numpy())
        return PreparedStep(rewards, terminations, truncations, ended, infos, transition)

    def _install(self, transition, resets: dict | None, rng: np.random.Generator) -> None:
        self.engine.commit(transition, resets)
        self._rng = rng

    def _ended_infos(self, envs: list[int]) -> dict:
        return self._out_masked("trajectory", {i: self.engine.trajectory(i) for i in envs})

    def _observations(self) -> dict:
        return self._obs()

    def _prepare_transition(self, actions: torch.Tensor, stepping: list[int]):
        index = torch.tensor(stepping, device=self.device)
        if self.preset.action_mode == "noise":
            guidance = torch.full((len(stepping),), float(self.preset.guidance_scale))
            noise_level = torch.full((len(stepping),), float(self.preset.noise_level))
            by_key = actions if isinstance(actions, dict) else {"latent": actions}
            noise = {name: by_key[OBS_KEYS[name]][index] for name in self.engine.streams}
        else:
            guidance, noise_level, noise = actions[index, 0], actions[index, 1], None
        return self.engine.prepare_step(stepping, guidance, noise_level, noise)

    def _out_masked(self, key: str, values: dict) -> dict:
        """``{key: object array with values at their envs, _key: mask}``."""
        column = object_column(size=self.num_envs)
        for env, value in values.items():
            column[env] = value
        return {key: column, f"_{key}": self._mask(list(values))}

    def _step_infos(self, transition) -> dict:
        n, index = self.num_envs, torch.tensor(transition.slots, device=self.device)
        mask = self._mask(transition.slots)
        infos = {}
        for key, field in STEP_INFO:
            full = torch.full((n,), float("nan"), device=self.device)
            full[index] = getattr(transition, field).to(self.device, torch.float32)
            infos[key], infos[f"_{key}"] = self._out(full), mask.copy()
        for name, values in transition.log_prob_sums.items():
            full = torch.full((n,), float("nan"), device=self.device)
            full[index] = values.to(self.device, torch.float32)
            infos[LOG_PROB_INFO[name]], infos[f"_{LOG_PROB_INFO[name]}"] = self._out(full), mask.copy()
        deterministic = torch.zeros(n, dtype=torch.bool, device=self.device)
        deterministic[index] = transition.deterministic
        infos["deterministic"], infos["_deterministic"] = self._out(deterministic), mask.copy()
        infos["weights_version"] = np.full(n, transition.weights_version, dtype=np.int64)
        infos["_weights_version"] = mask.copy()
        return infos

    def _score(self, ended: list[int], transition) -> tuple[torch.Tensor, dict]:
        """Rewards of the ended envs (decoded from the not yet installed latents) and their infos."""
        n, infos = self.num_envs, {}
        finite = dict(zip(transition.slots, transition.finite.tolist()))
        rows = {slot: j for j, slot in enumerate(transition.slots)}
        errors = [i for i in ended if not finite[i]]
        if errors:
            error = object_column([""] * n)
            for i in errors:
                error[i] = nan_error(self.engine.episode(i).step)
            infos["error"], infos["_error"] = error, self._mask(errors)
        rewards = torch.zeros(len(ended), device=self.device)
        scored = [i for i in ended if finite[i]]
        if self.reward_fn is None or not scored:
            return rewards, infos
        frames = self.engine.model.decode(transition.latents["video"][[rows[i] for i in scored]])
        values = checked_reward(self.reward_fn, frames, [self.engine.episode(i).prompt for i in scored])
        rewards[[ended.index(i) for i in scored]] = torch.as_tensor(values, device=self.device)
        all_frames = np.zeros((n, *frames.shape[1:]), dtype=np.uint8)
        all_frames[scored] = frames
        infos.update(frames=all_frames, _frames=self._mask(scored))
        return rewards, infos

    def _generated(self, ended: list[int], transition) -> dict:
        """What the ended episodes generated besides frames: ``actions`` (float32 ``[chunk, raw_dim]``
        per env, the embodiment's units) and ``waveform`` (float32 ``[channels, samples]``)."""
        rows = [transition.slots.index(i) for i in ended]
        infos = {}
        if "action" in transition.latents:
            actions = transition.latents["action"][rows].detach().cpu().numpy()
            infos.update(self._out_masked("actions", {
                i: actions[j, :, : self.engine.episode(i).row.raw_action_dim].copy() for j, i in enumerate(ended)}))
        if "sound" in transition.latents:
            waves = self.engine.model.decode_sound(transition.latents["sound"][rows])
            infos.update(self._out_masked("waveform", dict(zip(ended, waves))))
        return infos

    # --- branching, state, weights ----------------------------------------------------
    def fork(self, src: int, dst: list[int], seeds: list[int | None] | None = None) -> list[int | None]:
        """Copy env ``src``'s whole state (latent, generator, step, grid, tokens, history) into ``dst``.

        Each child is reseeded with ``seeds[j]`` (default: fresh distinct seeds), so children
        diverge from the next step on; ``None`` keeps the parent's generator state, so that
        child reproduces the parent exactly. Returns the seeds used. Checked whole first: a
        bad argument changes no env.
        """
        src, dst = checked_fork(src, dst, seeds, self.num_envs)
        if self._needs_reset[src]:
            raise ValueError(f"fork(src={src}): env {src} has no running episode to branch")
        return self.import_episode(self.engine.episode(src), dst, seeds)

    def export_episode(self, env: int):
        """A deep copy of env ``env``'s running episode (for :meth:`import_episode` elsewhere)."""
        if isinstance(env, bool) or not isinstance(env, (int, np.integer)) or not 0 <= int(env) < self.num_envs \
                or self._needs_reset[int(env)]:
            raise ValueError(f"export_episode(env={env!r}): not an env index in [0, {self.num_envs}) with a running "
                             f"episode")
        return self.engine.episode(int(env)).copy()

    def import_episode(self, episode, dst: list[int], seeds: list[int | None] | None = None) -> list[int | None]:
        """Install copies of ``episode`` (from :meth:`export_episode` of an env of this configuration)
        into envs ``dst``, reseeded like :meth:`fork`'s children. Checked whole first."""
        n = self.num_envs
        if not isinstance(dst, (list, tuple, np.ndarray)) or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dst):
            raise ValueError(f"import_episode(dst={dst!r}): dst must be a list of env indices in [0, {n})")
        dst = [int(d) for d in dst]
        if not dst or len(set(dst)) != len(dst) or not all(0 <= d < n for d in dst):
            raise ValueError(f"import_episode(dst={dst!r}): dst must be distinct env indices in [0, {n})")
        rng = self._rng_copy()
        seeds = draw_seeds(rng, len(dst)) if seeds is None else list(seeds)
        children = self.engine.prepare_fork(episode, dst, seeds)
        with deferred_interrupts():
            self.engine.commit(resets=children)
            self._rng = rng
        return seeds

    def episode_attribute(self, name: str) -> list:
        """``name`` (``prompt``, ``negative_prompt``, ``seed`` or ``step``) of every env's episode."""
        if name not in ("prompt", "negative_prompt", "seed", "step"):
            raise AttributeError(f"{name!r} is not a per-env episode attribute; use prompt, negative_prompt, seed or "
                                 f"step")
        return [getattr(self.engine.episode(i), name) for i in range(self.num_envs)]

    def get_state(self) -> dict:
        """A deep copy of every env's episode and the env's own RNG (restore with :meth:`set_state`)."""
        return {"engine": self.engine.get_state(), "rng": self._rng.bit_generator.state}

    def set_state(self, state: dict) -> None:
        """Restore a :meth:`get_state` snapshot; a mid-episode snapshot makes the envs steppable
        again from that point. A snapshot of another configuration raises and changes nothing."""
        if not isinstance(state, dict) or set(state) != {"engine", "rng"}:
            raise ValueError("set_state expects a dict returned by get_state() of this kind of env")
        rng = np.random.default_rng()
        try:
            rng.bit_generator.state = state["rng"]
        except (TypeError, ValueError, KeyError) as error:
            raise ValueError(f"set_state: the state's 'rng' is not a numpy generator state ({error})") from None
        with deferred_interrupts():
            self.engine.set_state(state["engine"])  # validates whole before changing
            self._rng = rng

    def update_weights(self, weights) -> int:
        """New transformer weights from a trainer; see :meth:`Cosmos3Model.update_weights`."""
        return self.engine.update_weights(weights)

    def render(self):
        if not can_render(self):
            return None
        frames = self.engine.decode(list(range(self.num_envs)), x0=True)
        return tuple(np.concatenate(list(video), axis=1) for video in frames)


# The keywords a rollout env takes besides its preset's fields (an unknown keyword's error lists them).
ENV_ARGUMENTS = [name for name in inspect.signature(Cosmos3RolloutVectorEnv.__init__).parameters
                 if name not in ("self", "overrides")]
