"""Cosmos3RolloutEnv: one Cosmos 3 generation request as a Gymnasium episode (numpy, B = 1)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from .presets import Preset, load_preset
from .rewards import REWARDS, checked_reward
from .spaces import action_space, build_engine, checked_action, checked_options, observation_space


class Cosmos3RolloutEnv(gym.Env):
    """Denoise one Cosmos 3 video (or image), one SDE step per env step.

    ## Description

    An episode is one generation request: a prompt, a seed, ``N`` denoising steps and a
    sigma grid ``sigma_0 > ... > sigma_N = 0``. Each step runs one transformer forward
    (conditional and unconditional rows together), combines them with classifier-free
    guidance and takes one SDE step ``sigma_k -> sigma_{k+1}``
    (:func:`cosmos3_gym.sde.sde_step`), reporting the transition's log-prob. The defaults
    run the embedded tiny model (trained on :mod:`cosmos3_gym.world`) on the CPU in seconds.

    ## Action Space

    ``action_mode="control"`` (default): ``Box(float32, (2,))`` = ``(guidance_scale,
    noise_level)`` within the preset's ``guidance_bounds`` and ``noise_level_bounds``; the
    SDE noise is drawn from the episode's generator. ``env.unwrapped.default_action`` holds
    the preset's values.

    ``action_mode="noise"``: ``Box(-inf, inf, latent shape, float32)`` = the standard-normal
    noise of this step, for noise-space policies; ``action_space.sample()`` is exactly the
    stock sampler. Guidance and noise level are the preset's.

    Actions of the wrong shape or dtype, with NaN/Inf, or outside finite bounds raise
    ``ValueError`` (nothing is clipped) and leave the episode where it was.

    ## Observation Space

    ``Dict``: ``latent`` float32 ``(C, T, H, W)``, the current noisy latent; ``sigma``
    float32 ``(1,)``; ``step`` ``Discrete(N + 1)``, the number of steps taken.

    ## Rewards

    0 until the last step; then the preset's reward (``reward`` field, see
    :data:`cosmos3_gym.rewards.REWARDS`, or a ``reward_fn`` callable) on the decoded video
    (``reward="none"``: no decoding, reward 0, for trainers that score latents themselves).

    ## Starting State

    ``reset(seed=s)`` seeds the episode's ``torch.Generator`` with ``s`` (a fresh seed is drawn
    from the env's RNG when ``s`` is None) and draws ``x(sigma_0)`` from it exactly as
    ``Cosmos3OmniPipeline`` does. ``options`` may carry ``prompt`` and ``negative_prompt``;
    otherwise the prompt is drawn from the preset's ``prompts``.

    ## Episode End

    Terminated after step ``N``; never truncated. A latent that turns NaN/Inf ends the
    episode at once with ``info["error"]`` and reward 0.

    ## Info

    Every step: ``log_prob`` (mean over latent elements, Flow-GRPO convention),
    ``log_prob_sum`` (the exact log-density), ``sigma``, ``sigma_next``, ``timestep``,
    ``guidance_scale``, ``noise_level``, ``weights_version``. Last step also: ``trajectory``
    (:class:`cosmos3_gym.trajectory.Trajectory`) and, unless ``reward="none"``, ``frames``
    (uint8 ``[F, H, W, 3]``).

    ## Arguments

    ``gym.make("Cosmos3Rollout-v0", render_mode=None, device=None, dtype=None,
    reward_fn=None, generator=None, **preset_fields)``: ``generator`` shares an already loaded
    :class:`~cosmos3_gym.generator.Cosmos3Generator` (its weights too) instead of loading the
    preset's model; every field of the preset (``envs/*.toml``, e.g.
    ``num_steps``, ``action_mode``, ``kind``, ``checkpoint``, ``guidance_scale``) can be
    overridden. ``checkpoint`` points at a local diffusers-layout Cosmos 3 directory.
    ``render_mode="rgb_array"``: ``render()`` returns the decoded x0-prediction as one
    uint8 image, the frames side by side (so ``RecordVideo`` records one filmstrip per step).

    ## Version History

    * v0: initial release.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, preset: str | Preset = "Cosmos3Rollout-v0", render_mode: str | None = None,
                 device=None, dtype=None, reward_fn=None, generator=None, **overrides):
        preset = load_preset(preset) if isinstance(preset, str) else preset
        self.preset = preset.override(**overrides)
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        self.render_mode = render_mode
        self.reward_fn = reward_fn or REWARDS[self.preset.reward]
        self.engine = build_engine(self.preset, 1, device=device, dtype=dtype, generator=generator)
        self.observation_space = observation_space(self.engine.latent_shape, self.engine.num_steps)
        self.action_space = action_space(self.preset, self.engine.latent_shape)
        self.default_action = np.array([self.preset.guidance_scale, self.preset.noise_level], dtype=np.float32)
        self._episode_over = True

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    def _obs(self) -> dict:
        engine = self.engine
        k = engine.steps[0]
        return {
            "latent": engine.latents[0].detach().cpu().numpy().astype(np.float32),
            "sigma": engine.sigmas[0, k : k + 1].cpu().numpy().astype(np.float32),
            "step": k,
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        options = checked_options(options)
        super().reset(seed=seed)
        episode_seed = seed if seed is not None else int(self.np_random.integers(0, 2**63 - 1))
        prompt = options.get("prompt")
        if prompt is None:
            prompt = self.preset.prompts[int(self.np_random.integers(len(self.preset.prompts)))]
        negative = options.get("negative_prompt", self.preset.negative_prompt)
        self.engine.reset_slots([0], [episode_seed], [prompt], [negative])
        self._episode_over = False
        return self._obs(), {"prompt": prompt, "seed": episode_seed, "sigmas": self.engine.sigmas[0].cpu().numpy().copy()}

    def step(self, action):
        if self._episode_over:
            raise RuntimeError("the episode is over (or reset() was never called): call env.reset() first")
        action = checked_action(action, self.action_space, device=self.engine.device)
        if self.preset.action_mode == "noise":
            guidance, noise_level = (float(x) for x in self.default_action)
            noise = action.unsqueeze(0)
        else:
            (guidance, noise_level), noise = action.tolist(), None
        result = self.engine.step([0], torch.tensor([guidance]), torch.tensor([noise_level]), noise)
        info = {
            "log_prob": float(result.log_prob[0]),
            "log_prob_sum": float(result.log_prob_sum[0]),
            "sigma": float(result.sigma[0]),
            "sigma_next": float(result.sigma_next[0]),
            "timestep": float(result.timestep[0]),
            "guidance_scale": float(guidance),
            "noise_level": float(noise_level),
            "weights_version": self.engine.weights_version,
        }
        reward = 0.0
        terminated = bool(result.done[0])
        if not bool(result.finite[0]):
            info["error"] = f"the latent became NaN/Inf at step {self.engine.steps[0] - 1}; the episode ends here"
        elif terminated and self.reward_fn is not None:
            frames = self.engine.decode([0])
            reward = float(checked_reward(self.reward_fn, frames, [self.engine.prompts[0]])[0])
            info["frames"] = frames[0]
        if terminated:
            info["trajectory"] = self.engine.trajectory(0)
        self._episode_over = terminated
        return self._obs(), reward, terminated, False, info

    def update_weights(self, weights) -> int:
        """New transformer weights from a trainer; see :meth:`RolloutEngine.update_weights`."""
        return self.engine.update_weights(weights)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        frames = self.engine.decode([0], x0=not self._episode_over)[0]  # [F, H, W, 3]
        return np.concatenate(list(frames), axis=1)
