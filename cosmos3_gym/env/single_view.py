"""The single env as a view of its vector env with one env (ManiSkill3's layout: batched first).

Every single env of the package (``Cosmos3Rollout-v0`` and the other presets, ``Cosmos3World-v0``)
is this class over its vector env, built with ``num_envs=1`` and autoreset disabled: one code
path computes every result, and the view only takes the batch dimension away (numbers become
Python scalars, masked infos become plain entries). A subclass says which vector env to build
(:meth:`SingleEnvView.__init__`'s ``vector``) and may add the reset info it reports.
"""

from __future__ import annotations

import inspect

import gymnasium as gym
import numpy as np

from ..model.interrupts import installing
from ..rollout.seeding import checked_seed
from .presets import check_keywords
from .spaces import action_hint, checked_action


def unbatched_info(infos: dict) -> dict:
    """Env 0's entries of a vector info dict (those its masks select), numbers as Python scalars."""
    info = {}
    for key, value in infos.items():
        if key.startswith("_") or not infos.get(f"_{key}", np.ones(1, dtype=bool))[0]:
            continue
        item = value[0]
        info[key] = item.item() if isinstance(item, np.generic) else item
    return info


def unbatched(obs):
    """Env 0's observation of a batched one (an array, or a dict of arrays)."""
    return {key: value[0] for key, value in obs.items()} if isinstance(obs, dict) else obs[0]


def constructor_keywords(cls, fixed: set[str]) -> list[str]:
    """The keywords ``cls(...)`` takes, but ``fixed`` (and no ``**kwargs``)."""
    return [name for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name not in fixed and parameter.kind is not inspect.Parameter.VAR_KEYWORD]


# A vector env's keywords that a single env (one env, no autoreset, numpy arrays) sets itself.
VECTOR_ONLY = ("num_envs", "group_size", "autoreset_mode", "array_type")


def vector_only_notes(env_id: str, names) -> dict[str, str]:
    """Why a single env refuses each of ``names`` (the keywords its vector env takes and it sets
    itself), and where a batch of envs comes from."""
    make_vec = f'gym.make_vec("{env_id}", num_envs=N, vectorization_mode="vector_entry_point")'
    return {name: f"a vector env's keyword; gym.make builds one env: for N envs in one batch use {make_vec}"
            for name in names}


def check_view_keywords(env_id: str, vector_cls, keywords: dict) -> None:
    """A single env's keywords, checked against what its vector env's constructor takes (all but
    :data:`VECTOR_ONLY`, which the view sets) before anything is built: a typo gets
    :func:`~cosmos3_gym.env.presets.check_keywords`' "did you mean" instead of Python's bare
    message from deep inside the constructor, and a vector env's keyword where ``gym.make_vec`` goes."""
    vector_only = [name for name in constructor_keywords(vector_cls, {"self"}) if name in VECTOR_ONLY]
    check_keywords(env_id, keywords, {"the env takes": constructor_keywords(vector_cls, {"self", *VECTOR_ONLY})},
                   {**vector_only_notes(env_id, vector_only), **getattr(vector_cls, "keyword_notes", {})})


def checked_vector_env(vector_cls, keywords: dict):
    """``vector_cls(**keywords)`` for ``gym.make_vec(..., vectorization_mode="vector_entry_point")``, its
    keywords checked first as :func:`check_view_keywords` checks a single env's (a typo gets a "did
    you mean", not Python's bare ``TypeError``)."""
    check_keywords(vector_cls.env_id, keywords, {"the vector env takes": constructor_keywords(vector_cls, {"self"})},
                   getattr(vector_cls, "keyword_notes", None))
    return vector_cls(**keywords)


class SingleEnvView(gym.Env):
    """A ``gym.Env`` over ``vector`` (a vector env with one env and autoreset disabled).

    ``reset`` and ``step`` run the vector env's and return env 0's part; each runs in an
    :func:`~cosmos3_gym.model.interrupts.installing` section, so a Ctrl-C that lands once the
    vector env has installed its result is raised only after the result is returned, with a
    message saying that the call took effect.
    """

    def __init__(self, vector, render_mode: str | None = None, bounds_hint: str | None = None):
        self.vector, self.render_mode, self._bounds_hint = vector, render_mode, bounds_hint
        self.observation_space = vector.single_observation_space
        self.action_space = vector.single_action_space

    @property
    def model(self):
        """The Cosmos 3 model (possibly shared with other envs)."""
        return self.vector.model

    def _reset_info(self, infos: dict) -> dict:
        """The info ``reset`` returns (env 0's part of the vector env's)."""
        return unbatched_info(infos)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if isinstance(options, dict) and "reset_mask" in options:
            raise ValueError("options['reset_mask'] is a vector-env option; a single env always resets its episode")
        seed = None if seed is None else checked_seed(seed)  # one env, one integer: a list is a vector env's
        with installing("reset"):
            obs, infos = self.vector.reset(seed=seed, options=options)
            super().reset(seed=seed)  # Gymnasium's np_random, once the reset stands
            return unbatched(obs), self._reset_info(infos)

    def step(self, action):
        if not self.vector._started or self.vector._needs_reset[0]:
            raise RuntimeError("the episode is over (or reset() was never called): call env.reset() first")
        hint = action_hint(self.vector.preset) if self._bounds_hint is None else self._bounds_hint
        action = checked_action(action, self.action_space, device=getattr(self.vector, "device", "cpu"),
                                bounds_hint=hint)
        batched = {k: v.unsqueeze(0) for k, v in action.items()} if isinstance(action, dict) else action.unsqueeze(0)
        with installing("step"):
            obs, rewards, terminated, truncated, infos = self.vector.step(batched)
            return unbatched(obs), float(rewards[0]), bool(terminated[0]), bool(truncated[0]), unbatched_info(infos)

    def close(self):
        self.vector.close()
        super().close()
