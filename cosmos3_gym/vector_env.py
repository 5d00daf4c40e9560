"""Cosmos3RolloutVectorEnv: B Cosmos 3 episodes advanced by one batched forward per step."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from .presets import Preset, load_preset
from .rewards import REWARDS, checked_reward
from .spaces import OPTION_KEYS as SINGLE_ENV_OPTION_KEYS
from .spaces import action_space, build_engine, checked_action, checked_options, observation_space

OPTION_KEYS = (*SINGLE_ENV_OPTION_KEYS, "reset_mask")


class Cosmos3RolloutVectorEnv(VectorEnv):
    """``num_envs`` episodes of a Cosmos 3 preset in one :class:`~cosmos3_gym.engine.RolloutEngine`.

    Each step packs the conditional and unconditional rows of every env into *one*
    transformer forward; rows are isolated by attention masks, so env ``i``'s result
    depends only on its own seed and actions (equal to the single env's within float
    rounding), never on ``num_envs`` or its neighbours.

    Spaces are the single env's (:class:`~cosmos3_gym.env.Cosmos3RolloutEnv`) batched with
    ``batch_space``. Observations, rewards and flags are **torch tensors on the engine's
    device** (``latent`` [B, C, T, H, W] float32, ``sigma`` [B, 1], ``step`` [B] int64);
    :meth:`numpy_obs` converts for numpy users. Actions may be torch tensors or numpy arrays.

    ``reset(seed=s)`` seeds env ``i`` with ``s + i`` (or takes a list of B seeds).
    ``options``: ``prompt`` / ``negative_prompt`` (a str for all, or a list: one per env,
    or one per group when ``group_size > 1``) and ``reset_mask`` (reset only those envs).
    ``group_size=g`` makes consecutive groups of ``g`` envs share a prompt with distinct
    seeds (GRPO groups). :meth:`fork` branches one env's state into others.

    Autoreset: ``autoreset_mode`` (``metadata["autoreset_mode"]``) is ``NEXT_STEP``
    (Gymnasium's default: the step after an episode ends resets that env and ignores its
    action), ``SAME_STEP`` (reset at once; ``infos["final_obs"]`` / ``infos["final_info"]``
    hold the ended episode) or ``DISABLED``.

    At an episode's end ``infos`` carries ``trajectory`` (an object array of
    :class:`~cosmos3_gym.trajectory.Trajectory`, masked by ``_trajectory``) and ``frames``.

    Arguments are the single env's plus ``num_envs``, ``group_size``, ``autoreset_mode``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, preset: str | Preset = "Cosmos3Rollout-v0", *, group_size: int = 1,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, render_mode: str | None = None,
                 device=None, dtype=None, reward_fn=None, generator=None, **overrides):
        preset = load_preset(preset) if isinstance(preset, str) else preset
        self.preset = preset.override(**overrides)
        if not isinstance(group_size, int) or group_size < 1 or num_envs % group_size:
            raise ValueError(f"group_size={group_size!r} must be a positive divisor of num_envs={num_envs}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.num_envs, self.group_size, self.render_mode = num_envs, group_size, render_mode
        self.reward_fn = reward_fn or REWARDS[self.preset.reward]
        self.engine = build_engine(self.preset, num_envs, device=device, dtype=dtype, generator=generator)
        self.device = self.engine.device
        self.single_observation_space = observation_space(self.engine.latent_shape, self.engine.num_steps)
        self.single_action_space = action_space(self.preset, self.engine.latent_shape)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.default_action = np.array([self.preset.guidance_scale, self.preset.noise_level], dtype=np.float32)
        self._needs_reset = np.ones(num_envs, dtype=bool)
        self._was_reset = False
        self._rng = np.random.default_rng()

    # --- observations ---------------------------------------------------------------
    def _obs(self) -> dict:
        engine = self.engine
        steps = torch.tensor(engine.steps, device=self.device)
        return {
            "latent": engine.latents.clone(),
            "sigma": engine.sigmas.gather(1, steps[:, None]).clone(),
            "step": steps,
        }

    @staticmethod
    def numpy_obs(obs: dict) -> dict:
        """The numpy view of an observation dict (for numpy-based code)."""
        return {key: value.detach().cpu().numpy() for key, value in obs.items()}

    # --- reset ----------------------------------------------------------------------
    def _per_env(self, name: str, value, default) -> list:
        """Expand a str / per-env list / per-group list option to one value per env."""
        if value is None:
            value = default
        if isinstance(value, str):
            return [value] * self.num_envs
        value = list(value)
        groups = self.num_envs // self.group_size
        if len(value) == self.num_envs and self.group_size == 1:
            return value
        if len(value) == groups:
            return [v for v in value for _ in range(self.group_size)]
        allowed = f"{self.num_envs} (one per env)" if self.group_size == 1 else f"{groups} (one per group)"
        raise ValueError(f"options[{name!r}] has {len(value)} entries; expected a str or a list of {allowed}")

    def _draw_prompts(self, count: int) -> list[str]:
        prompts = self.preset.prompts
        return [prompts[int(i)] for i in self._rng.integers(len(prompts), size=count)]

    def _start(self, envs: list[int], seeds: list[int], prompts: list[str], negatives: list[str]) -> None:
        self.engine.reset_slots(envs, seeds, prompts, negatives)
        self._needs_reset[envs] = False

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        options = checked_options(options, OPTION_KEYS)
        mask = np.asarray(options.pop("reset_mask", np.ones(self.num_envs, dtype=bool)), dtype=bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"options['reset_mask'] has shape {mask.shape}; expected ({self.num_envs},)")
        if isinstance(seed, (list, tuple, np.ndarray)):
            if len(seed) != self.num_envs:
                raise ValueError(f"seed has {len(seed)} entries; expected one per env ({self.num_envs})")
            seeds = [int(s) for s in seed]
            self._rng = np.random.default_rng(seeds[0])
        elif seed is not None:
            seeds = [int(seed) + i for i in range(self.num_envs)]
            self._rng = np.random.default_rng(int(seed))
        else:
            seeds = [int(s) for s in self._rng.integers(0, 2**62, size=self.num_envs)]
        groups = self.num_envs // self.group_size
        prompts = self._per_env("prompt", options.get("prompt"), self._draw_prompts(groups))
        negatives = self._per_env("negative_prompt", options.get("negative_prompt"), self.preset.negative_prompt)
        envs = [i for i in range(self.num_envs) if mask[i]]
        self._start(envs, [seeds[i] for i in envs], [prompts[i] for i in envs], [negatives[i] for i in envs])
        self._was_reset = True
        infos = {"seed": np.array(seeds), "prompt": np.array(prompts, dtype=object)}
        return self._obs(), infos

    def _autoreset(self, envs: list[int]) -> None:
        """Fresh episodes for ``envs``: new seeds; one new prompt per GRPO group."""
        seeds = [int(s) for s in self._rng.integers(0, 2**62, size=len(envs))]
        group_prompts = {}
        for env in envs:
            group = env // self.group_size
            group_prompts.setdefault(group, self._draw_prompts(1)[0])
        self._start(envs, seeds, [group_prompts[e // self.group_size] for e in envs],
                    [self.preset.negative_prompt] * len(envs))

    # --- step -----------------------------------------------------------------------
    def step(self, actions):
        if not self._was_reset:
            raise RuntimeError("call reset() before step()")
        n = self.num_envs
        actions = checked_action(actions, self.single_action_space, (n,), device=self.device)
        resetting = np.flatnonzero(self._needs_reset).tolist()
        if resetting and self.autoreset_mode != AutoresetMode.NEXT_STEP:
            raise RuntimeError(f"envs {resetting} have ended their episodes: call reset() "
                               f"(autoreset_mode={self.autoreset_mode.value})")
        if resetting:
            self._autoreset(resetting)
        return self._step(actions, [i for i in range(n) if i not in resetting])

    def _step(self, actions: torch.Tensor, stepping: list[int]):
        n = self.num_envs
        rewards = torch.zeros(n, device=self.device)
        terminations = torch.zeros(n, dtype=torch.bool, device=self.device)
        infos: dict = {}
        if stepping:
            index = torch.tensor(stepping, device=self.device)
            if self.preset.action_mode == "noise":
                guidance = torch.full((len(stepping),), float(self.default_action[0]))
                noise_level = torch.full((len(stepping),), float(self.default_action[1]))
                noise = actions[index]
            else:
                guidance, noise_level, noise = actions[index, 0], actions[index, 1], None
            result = self.engine.step(stepping, guidance, noise_level, noise)
            terminations[index] = result.done
            infos = self._step_infos(stepping, result, guidance, noise_level)
            ended = [s for s, d in zip(stepping, result.done.tolist()) if d]
            if ended:
                rewards[torch.tensor(ended, device=self.device)] = self._finish(ended, result, infos)
        truncations = torch.zeros(n, dtype=torch.bool, device=self.device)
        self._needs_reset[terminations.cpu().numpy()] = True
        obs = self._obs()
        if self.autoreset_mode == AutoresetMode.SAME_STEP and self._needs_reset.any():
            infos["final_obs"], infos["final_info"] = obs, dict(infos)
            infos["_final_obs"] = infos["_final_info"] = terminations.cpu().numpy()
            self._autoreset([i for i in range(n) if self._needs_reset[i]])
            obs = self._obs()
        return obs, rewards, terminations, truncations, infos

    def _step_infos(self, stepping, result, guidance, noise_level) -> dict:
        n, index = self.num_envs, torch.tensor(stepping, device=self.device)
        mask = np.zeros(n, dtype=bool)
        mask[stepping] = True
        infos = {}
        for key, values in (("log_prob", result.log_prob), ("log_prob_sum", result.log_prob_sum),
                            ("sigma", result.sigma), ("sigma_next", result.sigma_next),
                            ("timestep", result.timestep), ("guidance_scale", guidance),
                            ("noise_level", noise_level)):
            full = torch.full((n,), float("nan"), device=self.device)
            full[index] = values.to(self.device, torch.float32)
            infos[key], infos[f"_{key}"] = full, mask
        infos["weights_version"] = np.full(n, self.engine.weights_version)
        infos["_weights_version"] = mask
        return infos

    def _finish(self, ended: list[int], result, infos: dict) -> torch.Tensor:
        """Attach trajectories; decode the ended episodes in one batch and score them."""
        n = self.num_envs
        mask = np.isin(np.arange(n), ended)
        trajectories = np.full(n, None, dtype=object)
        for i in ended:
            trajectories[i] = self.engine.trajectory(i)
        infos.update(trajectory=trajectories, _trajectory=mask)
        finite = dict(zip(result.slots, result.finite.tolist()))
        errors = [i for i in ended if not finite[i]]
        if errors:
            error = np.full(n, "", dtype=object)
            for i in errors:
                error[i] = f"the latent became NaN/Inf at step {self.engine.steps[i] - 1}; the episode ends here"
            infos["error"], infos["_error"] = error, np.isin(np.arange(n), errors)
        rewards = torch.zeros(len(ended), device=self.device)
        scored = [i for i in ended if finite[i]]
        if self.reward_fn is None or not scored:
            return rewards
        frames = self.engine.decode(scored)
        values = checked_reward(self.reward_fn, frames, [self.engine.prompts[i] for i in scored])
        rewards[[ended.index(i) for i in scored]] = torch.as_tensor(values, device=self.device)
        all_frames = np.zeros((n, *frames.shape[1:]), dtype=np.uint8)
        all_frames[scored] = frames
        infos.update(frames=all_frames, _frames=np.isin(np.arange(n), scored))
        return rewards

    # --- branching ------------------------------------------------------------------
    def fork(self, src: int, dst: list[int], seeds: list[int | None] | None = None) -> list[int | None]:
        """Copy env ``src``'s whole state (latent, generator, step, grid, tokens, history) into ``dst``.

        Each child is reseeded with ``seeds[j]`` (default: fresh distinct seeds), so children
        diverge from the next step on; ``None`` keeps the parent's generator state, so that
        child reproduces the parent exactly. Returns the seeds used.
        """
        n = self.num_envs
        dst = [int(d) for d in dst]
        if not 0 <= int(src) < n or any(not 0 <= d < n for d in dst):
            raise ValueError(f"fork(src={src}, dst={dst}): indices must lie in [0, {n})")
        if int(src) in dst:
            raise ValueError(f"fork(src={src}, dst={dst}): dst must not contain src")
        if seeds is None:
            seeds = [int(s) for s in self._rng.integers(0, 2**62, size=len(dst))]
        if len(seeds) != len(dst):
            raise ValueError(f"fork: {len(seeds)} seeds for {len(dst)} children")
        if self._needs_reset[src]:
            raise ValueError(f"fork(src={src}): env {src} has no running episode to branch")
        self.engine.fork(int(src), dst, list(seeds))
        self._needs_reset[dst] = False
        return list(seeds)

    def update_weights(self, weights) -> int:
        """New transformer weights from a trainer; see :meth:`RolloutEngine.update_weights`."""
        return self.engine.update_weights(weights)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        frames = self.engine.decode(list(range(self.num_envs)), x0=True)
        return tuple(np.concatenate(list(video), axis=1) for video in frames)
