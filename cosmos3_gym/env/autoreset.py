"""One autoreset protocol (Gymnasium's ``NEXT_STEP``, ``SAME_STEP`` and ``DISABLED``) over a
prepare / commit core, shared by the package's in-process vector envs (rollout, world, PushT; the
Ray vector env's workers run the rollout one).

A vector env here computes a step without changing anything (``_prepare_step``), computes the
episodes that begin in it (``_prepare_resets``), and installs both at once (``_install``) in a
section a Ctrl-C cannot split; a call that raises leaves every env as it was. What happens
around an episode's end is the same for every such env, so it is written once, here:

* ``NEXT_STEP`` (Gymnasium's default): the step after an episode ended resets that env and
  ignores its action; the env reports the new episode's reset info.
* ``SAME_STEP``: an ended env is reset at once; ``infos["final_obs"]`` holds the batched
  observation before the reset and ``infos["final_info"]`` the ended envs' step infos (both
  masked by ``_final_obs`` / ``_final_info``), as in Gymnasium's ``SyncVectorEnv``.
* ``DISABLED``: stepping an ended env is an error; call ``reset``.

A new vector env subclasses :class:`AutoresetVectorEnv` and fills the hooks below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from ..model.interrupts import deferred_interrupts, installing
from .infos import split_final_info


def checked_autoreset_mode(mode) -> AutoresetMode:
    """``mode`` (a member or its value) as an :class:`~gymnasium.vector.AutoresetMode`, else ``ValueError``."""
    if mode not in list(AutoresetMode) + [m.value for m in AutoresetMode]:
        raise ValueError(f"autoreset_mode={mode!r} is not supported; use AutoresetMode.NEXT_STEP, SAME_STEP or "
                         f"DISABLED (from gymnasium.vector), or their values {[m.value for m in AutoresetMode]}")
    return AutoresetMode(mode)


@dataclass
class PreparedStep:
    """A computed, not yet installed step of the envs ``stepping``: per-env ``rewards``,
    ``terminated`` and ``truncated`` (arrays over all envs, in the env's array type), the step
    ``infos``, the indices of the envs whose episodes ``ended`` and the subclass's ``pending``
    state, which :meth:`AutoresetVectorEnv._install` installs."""

    rewards: Any
    terminated: Any
    truncated: Any
    ended: list[int]
    infos: dict = field(default_factory=dict)
    pending: Any = None


class AutoresetVectorEnv(VectorEnv):
    """A vector env whose ``step`` is the autoreset protocol over these hooks:

    * ``_needs_reset`` (property): bool ``[num_envs]``, envs without a running episode;
    * ``_started`` (property): whether ``reset`` has run;
    * ``_checked_actions(actions)``: the validated batch of actions (raise on bad input);
    * ``_rng_continuation()``: the env's random state to draw from, installed only on success;
    * ``_prepare_resets(envs, rng)``: the new episodes of ``envs``, not installed;
    * ``_prepare_step(actions, envs, rng)``: a :class:`PreparedStep` of ``envs``;
    * ``_install(step_pending, resets, rng)``: install a step's pending state and/or resets
      (called inside a section a Ctrl-C cannot split, so it must only assign and must not fail);
    * ``_observations()``: the batched observation of the installed state;
    * ``_reset_infos(envs)``: the infos of episodes that ``envs`` have just begun;
    * ``_ended_infos(envs)``: infos read after install for the envs whose episodes ended
      (e.g. their trajectories); empty by default.
    """

    autoreset_mode: AutoresetMode

    def _ended_infos(self, envs: list[int]) -> dict:
        return {}

    def _mask(self, envs) -> np.ndarray:
        return np.isin(np.arange(self.num_envs), list(envs))

    def step(self, actions):
        if not self._started:
            raise RuntimeError("call reset() before step()")
        # A Ctrl-C before the install below changes nothing; one during it or after it is raised once the
        # result is returned, saying that the step took effect (cosmos3_gym.model.interrupts.installing).
        with installing("step"), torch.no_grad():
            # 1. Check the actions and whether the ended envs may be reset here.
            actions = self._checked_actions(actions)
            resetting = np.flatnonzero(self._needs_reset).tolist()
            if resetting and self.autoreset_mode != AutoresetMode.NEXT_STEP:
                raise RuntimeError(f"envs {resetting} have ended their episodes: call reset() "
                                   f"(autoreset_mode={self.autoreset_mode.value})")
            # 2. Compute, changing nothing: NEXT_STEP's resets, the step, SAME_STEP's resets.
            rng = self._rng_continuation()
            resets = self._prepare_resets(resetting, rng) if resetting else None
            stepping = [i for i in range(self.num_envs) if i not in resetting]
            step = self._prepare_step(actions, stepping, rng)
            ended = list(step.ended)
            same_step = self._prepare_resets(ended, rng) if ended and self.autoreset_mode == AutoresetMode.SAME_STEP \
                else None
            # 3. Install everything in one section a Ctrl-C cannot split, and build the return value in it.
            with deferred_interrupts():
                self._install(step.pending, resets, rng)
                infos = step.infos
                infos.update(self._ended_infos(ended) if ended else {})
                if resetting:
                    infos.update(self._reset_infos(resetting))
                obs = self._observations()
                if same_step is not None:
                    done = self._mask(ended)
                    final_obs, final_info = obs, split_final_info(infos, done)
                    self._install(None, same_step, rng)
                    obs = self._observations()
                    infos.update(self._reset_infos(ended))
                    infos.update(final_obs=final_obs, _final_obs=done, final_info=final_info,
                                 _final_info=done.copy())
                return obs, step.rewards, step.terminated, step.truncated, infos
