"""Seeds: how a reset's ``seed`` becomes one seed per env, and what is drawn when none is given.

One home for the draw, so that the in-process vector env, its Ray counterpart and the world envs
give env ``i`` the same seed and the same default prompt for the same ``reset(seed=...)``,
whatever the number of envs per worker. Used by the engine too (it only checks seeds).
"""

from __future__ import annotations

import numpy as np

SEED_RANGE = (0, 2**63 - 1)


def checked_seed(seed, name: str = "seed") -> int:
    """``seed`` (an integer, or a 0-d integer array) as an int in :data:`SEED_RANGE`, or ``ValueError``
    naming it."""
    if isinstance(seed, np.ndarray) and seed.ndim == 0:
        seed = seed.item()
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"{name}={seed!r} is not an integer; pass an int in [0, 2**63 - 1] or None")
    if not SEED_RANGE[0] <= int(seed) <= SEED_RANGE[1]:
        raise ValueError(f"{name}={seed} is out of range; seeds lie in [0, 2**63 - 1]")
    return int(seed)


def per_env_seeds(seed, num_envs: int) -> list[int] | None:
    """The seeds of ``reset(seed=...)`` for ``num_envs`` envs: one per env from a list, ``s + i``
    for an int ``s``, None for None (the caller draws); ``ValueError`` naming what is wrong."""
    if seed is None:
        return None
    if isinstance(seed, (list, tuple)) or (isinstance(seed, np.ndarray) and seed.ndim):  # a 0-d array is one seed
        if len(seed) != num_envs:
            raise ValueError(f"seed has {len(seed)} entries; expected one per env ({num_envs})")
        return [checked_seed(s, f"seed[{i}]") for i, s in enumerate(seed)]
    first = checked_seed(seed)
    if first + num_envs - 1 > SEED_RANGE[1]:
        raise ValueError(f"seed={seed} is too large for {num_envs} envs (env i gets seed + i <= 2**63 - 1)")
    return [first + i for i in range(num_envs)]


def rng_continuation(rng: np.random.Generator) -> np.random.Generator:
    """A numpy generator in ``rng``'s state: draw from it, and install it only once a call succeeds."""
    copy = np.random.default_rng()
    copy.bit_generator.state = rng.bit_generator.state
    return copy


def draw_seeds(rng: np.random.Generator, count: int) -> list[int]:
    """``count`` seeds from ``rng`` (a reset without ``seed``, a fork's children)."""
    return [int(s) for s in rng.integers(SEED_RANGE[0], SEED_RANGE[1], size=count, endpoint=True)]


def draw_prompts(rng: np.random.Generator, prompts: tuple[str, ...], count: int) -> list[str]:
    """``count`` prompts drawn from a preset's prompt set."""
    return [prompts[int(i)] for i in rng.integers(len(prompts), size=count)]


def reset_seeds(seed, num_envs: int, rng: np.random.Generator) -> tuple[list[int], np.random.Generator]:
    """Per-env seeds for ``reset(seed=...)`` and the generator the default prompts are drawn from:
    ``default_rng(seed)`` for a given seed (so a seed alone fixes the episode), else ``rng`` itself,
    after drawing the seeds from it (the caller installs ``rng`` once the reset succeeds)."""
    seeds = per_env_seeds(seed, num_envs)
    if seeds is not None:
        return seeds, np.random.default_rng(seeds[0])
    return draw_seeds(rng, num_envs), rng
