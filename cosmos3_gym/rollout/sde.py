"""One denoising transition of a flow-matching sampler and its log-probability.

Pure functions in float32, whatever dtype the model runs in: the rollout and a trainer
that replays a stored step call the same :func:`sde_step`, so their log-probs agree to
the last digit.

Convention (Flow-GRPO, SGLang): the flow runs from noise at ``sigma = 1`` to data at
``sigma = 0`` with ``x_sigma = (1 - sigma) * x0 + sigma * noise`` and velocity
``v = noise - x0``; a step goes from ``sigma`` to ``sigma_next < sigma``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KINDS = ("sde", "cps", "ode")
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass
class SDEStep:
    """Result of :func:`sde_step`. All tensors are float32.

    ``next_sample = mean + scale * noise`` holds elementwise. ``log_prob`` is the Gaussian
    log-density of ``next_sample`` under ``N(mean, scale^2 I)`` *averaged* over all
    non-batch elements, constants included (the Flow-GRPO / SGLang convention);
    ``log_prob_sum`` is the exact log-density (the sum). Both have shape ``[B]``.

    A deterministic transition (``kind="ode"``, or ``noise_level == 0``: ``scale == 0``) is
    a point mass: its log-prob is reported as 0 (probability 1 of the only outcome) and
    ``deterministic`` is True, so the importance ratio of such a step is exactly 1 and it
    carries no policy gradient. Elements with ``scale == 0`` contribute 0 likewise.
    """

    next_sample: torch.Tensor
    mean: torch.Tensor
    scale: torch.Tensor
    log_prob: torch.Tensor
    log_prob_sum: torch.Tensor
    deterministic: torch.Tensor
    num_scored: torch.Tensor  # [B] how many elements the log-prob covers (the noisy ones)


def _per_batch(value, batch: int, ndim: int, device) -> torch.Tensor:
    """A float or a ``[B]`` tensor as a float32 tensor broadcastable against ``[B, ...]``."""
    tensor = torch.as_tensor(value, dtype=torch.float32, device=device)
    if tensor.ndim == 0:
        tensor = tensor.expand(batch)
    if tensor.shape != (batch,):
        raise ValueError(f"expected a float or a tensor of shape ({batch},), got shape {tuple(tensor.shape)}")
    return tensor.reshape(batch, *([1] * (ndim - 1)))


def _mean_and_scale(kind, x, v, sigma, sigma_next, noise_level, sigma_max):
    dt = sigma_next - sigma
    if kind == "ode":
        return x + v * dt, torch.zeros_like(sigma)
    if kind == "sde":
        # sigma == 1 would divide by zero: use the grid's next sigma there, as Flow-GRPO does.
        sigma_safe = torch.where(sigma == 1.0, sigma_max, sigma)
        std = noise_level * torch.sqrt(sigma / (1.0 - sigma_safe))
        mean = x * (1.0 + std**2 * dt / (2.0 * sigma)) + v * (1.0 + std**2 * (1.0 - sigma) / (2.0 * sigma)) * dt
        return mean, std * torch.sqrt(-dt)
    # cps: coefficients-preserving sampling.
    x0_hat = x - sigma * v
    x1_hat = x + (1.0 - sigma) * v
    s = sigma_next * torch.sin(noise_level * math.pi / 2.0)
    mean = (1.0 - sigma_next) * x0_hat + torch.sqrt(sigma_next**2 - s**2) * x1_hat
    return mean, s


def sde_step(
    velocity: torch.Tensor,
    sample: torch.Tensor,
    sigma,
    sigma_next,
    *,
    kind: str = "sde",
    noise_level=0.7,
    sigma_max=None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    next_sample: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> SDEStep:
    """Advance ``sample`` from ``sigma`` to ``sigma_next`` and score the transition.

    Args:
        velocity, sample: ``[B, ...]``; dim 0 is the batch. Cast to float32.
        sigma, sigma_next, noise_level: floats or ``[B]`` tensors.
        kind: ``"sde"`` (Flow-GRPO), ``"cps"`` (coefficients-preserving) or ``"ode"`` (Euler).
        sigma_max: the grid's first sigma after 1 (``sigmas[1]``), used by ``"sde"`` where
            ``sigma == 1``; required only if some ``sigma`` equals 1.
        noise: standard-normal ``[B, ...]`` to use; otherwise drawn from ``generator``.
        next_sample: if given, no noise is drawn and this sample's log-prob is evaluated
            (replay of a stored transition).
        mask: optional boolean tensor broadcastable to ``sample``, True where an element is
            noisy (generated). Elements outside it are clean conditioning: a sampled step
            copies them unchanged (``x' = where(mask, mean + scale * noise, x)``) and the
            log-prob sums over the noisy elements only; ``log_prob`` divides by their number.

    Returns:
        :class:`SDEStep`; see its docstring for the log-prob convention.
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not supported; choose one of {KINDS}")
    x = sample.float()
    v = velocity.float()
    if v.shape != x.shape:
        raise ValueError(f"velocity shape {tuple(v.shape)} differs from sample shape {tuple(x.shape)}")
    batch, ndim, device = x.shape[0], x.ndim, x.device
    sigma_t = _per_batch(sigma, batch, ndim, device)
    sigma_next_t = _per_batch(sigma_next, batch, ndim, device)
    level_t = _per_batch(noise_level, batch, ndim, device)
    if kind == "sde" and bool((sigma_t == 1.0).any()):
        if sigma_max is None:
            raise ValueError("sigma == 1 with kind='sde' needs sigma_max (the grid's sigmas[1])")
        sigma_max_t = _per_batch(sigma_max, batch, ndim, device)
    else:
        sigma_max_t = sigma_t
    mean, scale = _mean_and_scale(kind, x, v, sigma_t, sigma_next_t, level_t, sigma_max_t)
    scale = scale.expand_as(mean)

    if next_sample is None:
        if noise is None:
            noise = torch.randn(x.shape, generator=generator, device=device, dtype=torch.float32)
        elif noise.shape != x.shape:
            raise ValueError(f"noise shape {tuple(noise.shape)} differs from sample shape {tuple(x.shape)}")
        next_sample = mean + scale * noise.float()
        if mask is not None:
            next_sample = torch.where(mask.to(device=device, dtype=torch.bool), next_sample, x)
    else:
        next_sample = next_sample.float()

    dims = tuple(range(1, ndim))
    weight = torch.ones_like(mean) if mask is None else mask.to(device=device, dtype=torch.float32).expand_as(mean)
    stochastic = (weight > 0) & (scale > 0)
    safe_scale = torch.where(stochastic, scale, torch.ones_like(scale))
    log_density = -((next_sample - mean) ** 2) / (2.0 * safe_scale**2) - torch.log(safe_scale) - _LOG_SQRT_2PI
    log_density = torch.where(stochastic, log_density, torch.zeros_like(log_density))
    log_prob_sum = log_density.sum(dim=dims)
    num_scored = weight.sum(dim=dims)
    deterministic = ~stochastic.flatten(1).any(dim=1)
    return SDEStep(next_sample=next_sample, mean=mean, scale=scale, log_prob=log_prob_sum / num_scored,
                   log_prob_sum=log_prob_sum, deterministic=deterministic, num_scored=num_scored)
