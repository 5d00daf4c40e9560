"""Trajectory: everything a GRPO/PPO trainer needs from one episode, saved without pickle.

A trajectory plus the generator that produced it is enough to recompute every step's
log-prob (:meth:`cosmos3_gym.engine.RolloutEngine.replay_log_probs`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

TENSOR_FIELDS = (
    "latents", "log_probs", "log_prob_sums", "sigmas", "timesteps", "guidance_scales", "noise_levels", "noises",
)


@dataclass
class Trajectory:
    """One episode. ``N`` steps; latent shape ``(C, T, H, W)``.

    Tensors: ``latents`` [N+1, C, T, H, W] (``latents[0]`` is the initial noise),
    ``log_probs`` / ``log_prob_sums`` [N] (mean / sum convention of :func:`~cosmos3_gym.sde.sde_step`),
    ``sigmas`` / ``timesteps`` [N+1], the actions ``guidance_scales`` / ``noise_levels`` [N],
    and ``noises`` [N, C, T, H, W], the standard-normal noise of each step.
    """

    latents: torch.Tensor
    log_probs: torch.Tensor
    log_prob_sums: torch.Tensor
    sigmas: torch.Tensor
    timesteps: torch.Tensor
    guidance_scales: torch.Tensor
    noise_levels: torch.Tensor
    noises: torch.Tensor
    seed: int | None
    prompt: str
    negative_prompt: str
    cond_ids: list[int]
    uncond_ids: list[int]
    kind: str
    num_frames: int
    height: int
    width: int
    fps: float
    weights_version: int
    extra: dict = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return self.log_probs.numel()

    def metadata(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in TENSOR_FIELDS}

    def save(self, path: str | Path) -> None:
        """One ``.safetensors`` file; the non-tensor fields go to its header as JSON."""
        tensors = {name: getattr(self, name).detach().cpu().contiguous() for name in TENSOR_FIELDS}
        save_file(tensors, str(path), metadata={"cosmos3_gym.trajectory": json.dumps(self.metadata())})

    @classmethod
    def load(cls, path: str | Path) -> "Trajectory":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
        if "cosmos3_gym.trajectory" not in header:
            raise ValueError(f"{str(path)!r} is not a cosmos3_gym trajectory file (no metadata header)")
        return cls(**load_file(str(path)), **json.loads(header["cosmos3_gym.trajectory"]))
