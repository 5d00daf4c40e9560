"""The one transition function of rollout and replay, and the trainer's replay of stored log-probs.

:func:`transition` computes a step's guided velocity (conditional and unconditional rows
of every request in one forward) and its :func:`~cosmos3_gym.sde.sde_step`: with
``noise=`` it samples (the rollout), with ``next_sample=`` it scores a stored step (the
trainer). Both sides call it, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .model import Cosmos3Model
from .packing import PackedRows, RowSpec
from .sde import SDEStep, sde_step
from .trajectory import Trajectory


def pack_cfg_rows(model: Cosmos3Model, requests: Sequence[tuple], latent_shape: Sequence[int]) -> PackedRows:
    """Pack ``(cond_ids, uncond_ids, fps, clean_frames)`` requests as rows: per request the
    conditional row, then the unconditional one (the order :func:`transition` reads them back)."""
    grid = tuple(latent_shape)[1:]
    return model.pack([RowSpec(tuple(ids), *grid, fps, tuple(clean)) for cond, uncond, fps, clean in requests
                       for ids in (cond, uncond)])


def noisy_mask(packed: PackedRows, latent_shape: Sequence[int]) -> torch.Tensor | None:
    """``[b, 1, T, 1, 1]`` bool, True on the latent frames each request generates (None: all of them)."""
    frames = latent_shape[1]
    noisy = packed.noisy_frames[0::2]
    if all(len(n) == frames for n in noisy):
        return None
    mask = torch.zeros((len(noisy), frames), dtype=torch.bool, device=noisy[0].device)
    for j, indexes in enumerate(noisy):
        mask[j, indexes] = True
    return mask.view(len(noisy), 1, frames, 1, 1)


def transition(model: Cosmos3Model, packed: PackedRows, latents: torch.Tensor, timesteps: Sequence[float],
               guidance: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: torch.Tensor,
               sigma_max: torch.Tensor, kind: str, *, noise: torch.Tensor | None = None,
               next_sample: torch.Tensor | None = None) -> tuple[SDEStep, torch.Tensor]:
    """One denoising transition of ``latents[j]`` (request ``j`` of ``packed``).

    The velocity is ``u + g (c - u)`` (classifier-free guidance) in fp32, zero on clean
    conditioning frames (the transformer predicts only the noisy ones, as in
    ``Cosmos3OmniPipeline``); the SDE step copies clean frames unchanged and scores the noisy
    elements only. Returns the :class:`~cosmos3_gym.sde.SDEStep` and the velocity. Autograd is
    as the caller set it.
    """
    rows_latents = [latent.unsqueeze(0) for latent in latents for _ in range(2)]
    rows_timesteps = [float(t) for t in timesteps for _ in range(2)]
    velocities = model.forward_rows(packed, rows_latents, rows_timesteps)
    cond, uncond = torch.stack(velocities[0::2]), torch.stack(velocities[1::2])
    g = guidance.float().to(cond.device).view(-1, *([1] * (cond.ndim - 1)))
    velocity = uncond + g * (cond - uncond)
    step = sde_step(velocity, latents, sigma, sigma_next, kind=kind, noise_level=noise_level, sigma_max=sigma_max,
                    noise=noise, next_sample=next_sample, mask=noisy_mask(packed, latents.shape[1:]))
    return step, velocity


def replay_log_probs(model: Cosmos3Model, trajectories: Trajectory | Sequence[Trajectory],
                     steps: Sequence[int] | None = None, micro_batch: int | None = None,
                     reduction: str = "mean") -> torch.Tensor:
    """Recompute stored steps' log-probs with ``model``'s current weights (the trainer's side).

    No rollout engine is needed. For each requested step ``k`` (default: all; Flow-GRPO
    trains on a subset) the guided velocity is recomputed from the stored latent, the
    stored ``timesteps[k]`` (the scheduler's timestep, *not* ``1000 * sigma``), guidance and
    tokens, and the stored next latent is scored by :func:`transition`, the function the
    rollout sampled with. ``micro_batch`` trajectories share one forward per step (default:
    all). Passing one vector-env episode's trajectories in env order with the default
    grouping repeats the rollout's computation exactly, bit for bit (bf16 included); other
    groupings agree up to the model dtype's rounding.

    Autograd is as the caller set it: under ``torch.enable_grad()`` the result is
    differentiable in the model's trainable parameters. Gradients flow through both the
    conditional and the unconditional row, because the sampled policy is the *guided*
    velocity ``u + g (c - u)`` and its log-prob depends on both (with ``g = 1`` the
    unconditional row drops out exactly). With autograd on, the text tokens are recomputed
    at every step rather than cached, so the text pathway gets its gradient from every step.

    Returns ``[len(steps)]`` for one trajectory, ``[B, len(steps)]`` for a list;
    ``reduction="sum"`` gives the exact log-density (``log_prob_sums``) instead of the
    per-element mean.
    """
    single = isinstance(trajectories, Trajectory)
    batch = [trajectories] if single else list(trajectories)
    if not batch:
        raise ValueError("replay_log_probs got no trajectories")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r} is not supported; choose 'mean' or 'sum'")
    n = batch[0].num_steps
    for name, values in (("steps", [t.num_steps for t in batch]), ("kind", [t.kind for t in batch]),
                         ("latent shape", [tuple(t.latents.shape[1:]) for t in batch])):
        if len(set(values)) != 1:
            raise ValueError(f"trajectories differ in {name} ({values}); replay them in groups that agree")
    steps = list(range(n)) if steps is None else steps
    if isinstance(steps, (str, bytes)) or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                                                  and 0 <= k < n for k in steps):
        raise ValueError(f"steps={steps!r} must be step indices (ints) in [0, {n}) for trajectories of {n} steps")
    steps = [int(k) for k in steps]
    size = len(batch) if micro_batch is None else micro_batch
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"micro_batch={micro_batch!r} must be a positive integer or None")
    vocab = model.transformer.config.vocab_size
    for t in batch:
        want = model.latent_shape(t.num_frames, t.height, t.width)
        if tuple(t.latents.shape[1:]) != want:
            raise ValueError(f"a trajectory of {t.num_frames}x{t.height}x{t.width} has latents "
                             f"{tuple(t.latents.shape[1:])}; this model makes {want}: it comes from another setup")
        if not all(0 <= i < vocab for i in (*t.cond_ids, *t.uncond_ids)):
            raise ValueError(f"a trajectory has token ids outside this model's vocabulary [0, {vocab})")
    out = []
    for start in range(0, len(batch), size):
        chunk = batch[start:start + size]
        packed = pack_cfg_rows(model, [(t.cond_ids, t.uncond_ids, t.fps, t.clean_frames) for t in chunk],
                               chunk[0].latents.shape[1:])
        latents = torch.stack([t.latents for t in chunk]).to(model.device)
        sigmas = torch.stack([t.sigmas for t in chunk]).to(model.device)
        timesteps = torch.stack([t.timesteps for t in chunk])
        rows = []
        for k in steps:
            step, _ = transition(
                model, packed, latents[:, k], timesteps[:, k].tolist(),
                torch.stack([t.guidance_scales[k] for t in chunk]), sigmas[:, k], sigmas[:, k + 1],
                torch.stack([t.noise_levels[k] for t in chunk]).to(model.device), sigmas[:, 1], chunk[0].kind,
                next_sample=latents[:, k + 1])
            rows.append(step.log_prob if reduction == "mean" else step.log_prob_sum)
        out.append(torch.stack(rows, dim=1))
    result = torch.cat(out)
    return result[0] if single else result
