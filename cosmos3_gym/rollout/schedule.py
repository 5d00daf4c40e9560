"""Sigma grids: the sequence sigma_0 > sigma_1 > ... > sigma_N = 0 an episode walks down.

Three sources, each producing a :class:`SigmaGrid` snapshot stored in the episode:

* :func:`serving_grid` — exactly the grid the checkpoint's own scheduler serves (its class
  and config, with ``flow_shift``, ``use_karras_sigmas`` … and the pipeline's
  ``use_native_flow_schedule``), read off diffusers after ``set_timesteps``;
* :func:`flow_shift_grid` — a uniform grid warped once by ``flow_shift``;
* :func:`explicit_grid` — sigmas given verbatim (never shifted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NUM_TRAIN_TIMESTEPS = 1000


@dataclass(frozen=True)
class SigmaGrid:
    """``sigmas`` float32 ``[N+1]`` ending at 0; ``timesteps`` float32 ``[N+1]``, the model's
    time input at each sigma (the last one, at sigma = 0, is never fed to the model)."""

    sigmas: torch.Tensor
    timesteps: torch.Tensor

    @property
    def num_steps(self) -> int:
        return self.sigmas.numel() - 1


def _validated(sigmas, timesteps) -> SigmaGrid:
    sigmas = torch.as_tensor(np.asarray(sigmas, dtype=np.float32))
    timesteps = torch.as_tensor(np.asarray(timesteps, dtype=np.float32))
    if sigmas.ndim != 1 or sigmas.numel() < 2:
        raise ValueError(f"sigmas must hold at least 2 values (N >= 1 steps), got {sigmas.tolist()}")
    if not torch.isfinite(sigmas).all() or sigmas[0] > 1 or sigmas[-1] != 0:
        raise ValueError(f"sigmas must lie in [0, 1] and end at 0, got {sigmas.tolist()}")
    if not (sigmas[1:] < sigmas[:-1]).all():
        raise ValueError(f"sigmas must be strictly decreasing, got {sigmas.tolist()}")
    return SigmaGrid(sigmas=sigmas, timesteps=timesteps)


def serving_grid(scheduler, num_steps: int, use_native_flow_schedule: bool = False) -> SigmaGrid:
    """Snapshot the grid that ``Cosmos3OmniPipeline`` would use with this scheduler.

    ``scheduler`` is a diffusers scheduler instance (it is copied, never mutated). The
    shift configured in it is applied by diffusers, once.
    """
    import copy

    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    scheduler = copy.deepcopy(scheduler)
    if use_native_flow_schedule:
        train_steps = scheduler.config.num_train_timesteps
        native = np.linspace(1.0 - 1.0 / train_steps, 0.0, num_steps + 1)[:-1]
        scheduler.set_timesteps(num_steps, sigmas=native)
    else:
        scheduler.set_timesteps(num_steps)
    sigmas = scheduler.sigmas.float().cpu()
    # UniPC nudges sigma_0 from 1 to 1 - 1e-6 to keep its own log finite. Undo that: the SDE's
    # first step must see sigma = 1 (pure noise) and use sigmas[1] there, as Flow-GRPO does.
    if abs(float(sigmas[0]) - 1.0) <= 2e-6:
        sigmas[0] = 1.0
    timesteps = torch.cat([scheduler.timesteps.float().cpu(), torch.zeros(1)])
    return _validated(sigmas, timesteps)


def flow_shift_grid(num_steps: int, flow_shift: float = 1.0) -> SigmaGrid:
    """Uniform sigmas on [1, 0] warped by ``shift * s / (1 + (shift - 1) * s)``."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if not flow_shift > 0:
        raise ValueError(f"flow_shift must be > 0, got {flow_shift}")
    s = np.linspace(1.0, 0.0, num_steps + 1)
    sigmas = flow_shift * s / (1.0 + (flow_shift - 1.0) * s)
    return explicit_grid(sigmas)


def explicit_grid(sigmas) -> SigmaGrid:
    """Use ``sigmas`` as given (``N+1`` values ending at 0, or ``N`` values: 0 is appended)."""
    sigmas = np.asarray(sigmas, dtype=np.float64).reshape(-1)
    if sigmas.size and sigmas[-1] != 0:
        sigmas = np.append(sigmas, 0.0)
    sigmas = sigmas.astype(np.float32)
    return _validated(sigmas, sigmas * NUM_TRAIN_TIMESTEPS)
