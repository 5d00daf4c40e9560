"""Cosmos3RolloutEnv: one Cosmos 3 generation request as a Gymnasium episode (numpy, B = 1).

The single env is a view of :class:`~cosmos3_gym.env.vector_env.Cosmos3RolloutVectorEnv` with one
env: construction, checks, seeding, prompts, stepping, rewards and weights live there once.
"""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode

from ..model.interrupts import installing
from .presets import Preset, as_preset
from .rendering import can_render
from .single_view import VECTOR_ONLY, SingleEnvView, vector_only_notes
from .vector_env import ENV_ARGUMENTS, Cosmos3RolloutVectorEnv


class Cosmos3RolloutEnv(SingleEnvView):
    """Denoise one Cosmos 3 video (or image), one SDE step per env step.

    ## Description

    An episode is one generation request: a prompt, a seed, ``N`` denoising steps and a
    sigma grid ``sigma_0 > ... > sigma_N = 0``. Each step runs one transformer forward
    (conditional and unconditional rows together), combines them with classifier-free
    guidance and takes one SDE step ``sigma_k -> sigma_{k+1}``
    (:func:`cosmos3_gym.rollout.sde.sde_step`), reporting the transition's log-prob. The defaults
    run the embedded tiny model (trained on :mod:`cosmos3_gym.rollout.procedural_world`) on the CPU in seconds.

    ## Action Space

    ``action_mode="control"`` (default): ``Box(float32, (2,))`` = ``(guidance_scale,
    noise_level)`` within the preset's ``guidance_bounds`` and ``noise_level_bounds``; the
    SDE noise is drawn from the episode's generator. ``env.unwrapped.default_action`` holds
    the preset's values (in noise mode: a zero noise, the step's mean).

    ``action_mode="noise"``: ``Box(-inf, inf, latent shape, float32)`` = the standard-normal
    noise of this step, for noise-space policies (with a sound or action stream, a ``Dict`` of
    such Boxes under the observation's keys); ``action_space.sample()`` is exactly the
    stock sampler. Guidance and noise level are the preset's. This mode is for custom
    trainers: SB3's algorithms expect bounded action spaces.

    Actions of the wrong shape or dtype, with NaN/Inf, or outside finite bounds raise
    ``ValueError`` (nothing is clipped) and leave the episode where it was.

    ## Observation Space

    ``Dict``: ``latent`` float32 ``(C, T, H, W)``, the current noisy latent; ``sigma``
    float32 ``(1,)``; ``step`` int64 ``Box(0, N, (1,))``, the number of steps taken (a Box, so
    that SB3's ``VecNormalize`` and ``VecFrameStack`` take the observation as it is). Action
    rollouts add ``action_latent`` float32 ``(chunk, action_dim)``; ``Cosmos3RolloutAV-v0`` adds
    ``sound_latent`` float32 ``(C, T)``.

    ## Rewards

    0 until the last step; then the preset's reward (``reward`` field, see
    :data:`cosmos3_gym.env.rewards.REWARDS`, or a ``reward_fn`` callable) on the decoded video
    (``reward="none"``: no decoding, reward 0, for trainers that score latents themselves).

    ## Starting State

    ``reset(seed=s)`` seeds the episode's ``torch.Generator`` with ``s``, an int in
    ``[0, 2**63 - 1]`` (a fresh seed is drawn from the env's RNG when ``s`` is None) and draws ``x(sigma_0)`` from it exactly as
    ``Cosmos3OmniPipeline`` does. ``options`` may carry ``prompt`` and ``negative_prompt``;
    otherwise the prompt is drawn from the preset's ``prompts``. Conditioned presets
    (``conditioning="image"``: ``Cosmos3RolloutI2V-v0``; ``"video"``: ``Cosmos3RolloutV2V-v0``)
    take ``options["image"]`` (uint8 ``[H, W, 3]``) or ``options["video"]`` (uint8
    ``[F, H, W, 3]``, ``F = 1 + 4k``); its latent frames stay clean (``x = m x0 + (1 - m) noise``
    at the start, timestep 0, zero velocity, copied unchanged by every step) and the log-prob
    covers the generated elements only. Without the option a scene of :mod:`cosmos3_gym.rollout.procedural_world`
    is drawn and its caption is the default prompt.

    Action rollouts (``Cosmos3OmniPipeline``'s ``CosmosActionCondition``; ``chunk = num_frames - 1``):
    ``Cosmos3PolicyRollout-v0`` takes ``image`` (and ``prompt``) and denoises the future frames
    with the action chunk; ``Cosmos3ForwardDynamicsRollout-v0`` takes ``image`` and ``actions``
    (float32 ``[chunk, raw_dim]``; drawn uniform in [-1, 1] when omitted), kept clean, and denoises
    the frames; ``Cosmos3InverseDynamicsRollout-v0`` takes ``video`` (uint8 ``[chunk + 1, H, W,
    3]``), kept clean, and denoises the actions. ``domain`` (preset field or option, per env)
    names the embodiment; action channels above its raw dimension stay zero and are not scored.
    The frames are padded into ``resolution_tier``'s canvas for conditioning, as the pipeline
    does. ``Cosmos3RolloutAV-v0`` denoises a sound latent with the video.

    ## Episode End

    Terminated after step ``N``; never truncated. A latent that turns NaN/Inf ends the
    episode at once with ``info["error"]`` and reward 0.

    ## Info

    Every step: ``log_prob`` (mean over latent elements, Flow-GRPO convention),
    ``log_prob_sum`` (the exact log-density), ``deterministic`` (True for ``kind="ode"`` or
    ``noise_level=0``: a point mass, reported with log-prob 0), ``sigma``, ``sigma_next``,
    ``timestep``, ``guidance_scale``, ``noise_level``, ``weights_version`` (the model's; envs
    sharing a model agree), and per stream ``log_prob_sum_video`` (and ``log_prob_sum_action``
    / ``log_prob_sum_sound``), which add up to ``log_prob_sum``. Last step also: ``trajectory``
    (:class:`cosmos3_gym.rollout.trajectory.Trajectory`), unless ``reward="none"`` ``frames``
    (uint8 ``[F, H, W, 3]``), for action rollouts ``actions`` (float32 ``[chunk, raw_dim]``, the
    embodiment's units) and with sound ``waveform`` (float32 ``[channels, samples]``).

    ## Arguments

    ``gym.make("Cosmos3Rollout-v0", render_mode=None, device=None, dtype=None,
    reward_fn=None, model=None, **preset_fields)``: ``model`` shares an already loaded
    :class:`~cosmos3_gym.model.model.Cosmos3Model` (its weights and ``weights_version`` too) instead
    of loading the preset's model (one thread at a time may use a model; not with ``checkpoint``);
    every field of the preset (``envs/*.toml``, e.g. ``num_steps``, ``action_mode``, ``kind``,
    ``checkpoint``, ``guidance_scale``) can be overridden. ``checkpoint`` points at a local
    diffusers-layout Cosmos 3 directory.
    ``render_mode="rgb_array"``: ``render()`` returns the decoded x0-prediction as one
    uint8 image, the frames side by side (so ``RecordVideo`` records one filmstrip per step).

    ## Errors

    Every call validates first and changes the env last: a call that raises (bad input, a
    reward function or a forward that throws, Ctrl-C) leaves the episode exactly where it
    was, and the same step can be retried. Once a step is computed it is installed in one
    section that a Ctrl-C cannot split, which lasts until the call returns: a Ctrl-C arriving
    between the install and the return is raised right after the section, and its message says
    that the call took effect ("it is installed": do not repeat it). :meth:`get_state` / :meth:`set_state`
    snapshot and restore a whole episode (mid-episode too).

    ## Version History

    * v0: initial release (text-to-video, text-to-image, image- and video-to-video presets;
      policy, forward- and inverse-dynamics rollouts; text-to-video with sound).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, preset: str | Preset = "Cosmos3Rollout-v0", render_mode: str | None = None, **kwargs):
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r} is not supported; use None or 'rgb_array'")
        preset = as_preset(preset)
        ray = f'Ray workers, a vector env\'s keyword: gym.make_vec("{preset.id}", num_envs=N, num_workers=W)'
        preset.check_keywords(kwargs, [name for name in ENV_ARGUMENTS if name not in VECTOR_ONLY],
                              {**vector_only_notes(preset.id, VECTOR_ONLY), "num_workers": ray})
        super().__init__(Cosmos3RolloutVectorEnv(1, preset, autoreset_mode=AutoresetMode.DISABLED,
                                                 render_mode=render_mode, array_type="numpy", **kwargs), render_mode)
        self.preset, self.engine = self.vector.preset, self.vector.engine
        self.default_action = self.vector.default_action

    @property
    def weights_version(self) -> int:
        return self.vector.weights_version

    def _reset_info(self, infos: dict) -> dict:
        episode = self.engine.episode(0)
        return {"prompt": episode.prompt, "seed": episode.seed, "sigmas": episode.sigmas.cpu().numpy().copy()}

    def get_state(self) -> dict:
        return self.vector.get_state()

    def set_state(self, state: dict) -> None:
        self.vector.set_state(state)

    def update_weights(self, weights) -> int:
        """New transformer weights from a trainer; see :meth:`Cosmos3Model.update_weights`."""
        with installing("update_weights"):  # held from the model's copy to this return
            return self.vector.update_weights(weights)

    def render(self):
        if not can_render(self):
            return None
        frames = self.engine.decode([0], x0=not self.vector._needs_reset[0])[0]  # [F, H, W, 3]
        return np.concatenate(list(frames), axis=1)
