"""The autoreset protocol (:mod:`cosmos3_gym.env.autoreset`), tested once on a tiny fake core
against Gymnasium's own ``SyncVectorEnv`` running the same envs: every vector env built on it
(the rollout and the world vector envs) inherits what is checked here."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_space

from cosmos3_gym.env.autoreset import AutoresetVectorEnv, PreparedStep, checked_autoreset_mode
from cosmos3_gym.env.infos import object_column


class Countdown(gym.Env):
    """Episodes of 1-4 steps (drawn at reset), truncated after 3; obs = (episode number, step)."""

    observation_space = spaces.Box(0, 10**6, (2,), np.int64)
    action_space = spaces.Discrete(3)

    def __init__(self):
        self.episode, self.t, self.length = -1, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t, self.length = self.episode + 1, 0, int(self.np_random.integers(1, 5))
        return np.array([self.episode, 0]), {"length": self.length}

    def step(self, action):
        self.t += 1
        terminated = self.t >= self.length
        truncated = self.t >= 3 and not terminated
        return np.array([self.episode, self.t]), float(action * self.t), terminated, truncated, {"t": self.t}


class FakeCore(AutoresetVectorEnv):
    """The same envs behind the prepare / commit hooks: every computation on copies, installed last."""

    def __init__(self, num_envs: int, autoreset_mode=AutoresetMode.NEXT_STEP, fail_at_step: int | None = None):
        self.num_envs, self.autoreset_mode = num_envs, checked_autoreset_mode(autoreset_mode)
        self.envs = [Countdown() for _ in range(num_envs)]
        self.single_observation_space, self.single_action_space = Countdown.observation_space, Countdown.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.obs = np.zeros((num_envs, 2), dtype=np.int64)
        self.ended = np.zeros(num_envs, dtype=bool)
        self.reset_info = [{} for _ in range(num_envs)]
        self.started, self.fail_at_step, self.steps = False, fail_at_step, 0

    def reset(self, *, seed=None, options=None):
        for i, env in enumerate(self.envs):
            self.obs[i], self.reset_info[i] = env.reset(seed=None if seed is None else seed + i)
        self.ended[:], self.started = False, True
        return self.obs.copy(), self._reset_infos(range(self.num_envs))

    @property
    def _needs_reset(self):
        return self.ended.copy()

    @property
    def _started(self):
        return self.started

    def _checked_actions(self, actions):
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions has shape {actions.shape}; expected ({self.num_envs},)")
        return actions

    def _rng_continuation(self):
        return None  # each env's copy carries its own generator

    def _prepare_resets(self, envs, rng):
        copies = {i: copy.deepcopy(self.envs[i]) for i in envs}
        return {i: (env, *env.reset()) for i, env in copies.items()}

    def _prepare_step(self, actions, envs, rng):
        self.steps += 1
        if self.steps == self.fail_at_step:
            raise RuntimeError("the core failed")
        rewards, terminated, truncated = np.zeros(self.num_envs), np.zeros(self.num_envs, bool), \
            np.zeros(self.num_envs, bool)
        pending, t = {}, np.zeros(self.num_envs, dtype=np.int64)
        for i in envs:
            env = copy.deepcopy(self.envs[i])
            obs, rewards[i], terminated[i], truncated[i], info = env.step(actions[i])
            pending[i], t[i] = (env, obs), info["t"]
        infos = {"t": t, "_t": np.isin(np.arange(self.num_envs), envs)} if envs else {}
        ended = [i for i in envs if terminated[i] or truncated[i]]
        return PreparedStep(rewards, terminated, truncated, ended, infos, pending)

    def _install(self, pending, resets, rng):
        for i, (env, obs) in (pending or {}).items():
            self.envs[i], self.obs[i] = env, obs
            self.ended[i] = env.t >= env.length or env.t >= 3
        for i, (env, obs, info) in (resets or {}).items():
            self.envs[i], self.obs[i], self.reset_info[i], self.ended[i] = env, obs, info, False

    def _observations(self):
        return self.obs.copy()

    def _reset_infos(self, envs):
        envs = list(envs)
        lengths = np.zeros(self.num_envs, dtype=np.int64)
        lengths[envs] = [self.reset_info[i]["length"] for i in envs]
        return {"length": lengths, "_length": self._mask(envs)}


def per_env(infos: dict, num_envs: int) -> list[dict]:
    """``{key: array, _key: mask}`` as one dict per env holding the keys its masks select."""
    out = [{} for _ in range(num_envs)]
    for key in (k for k in infos if not k.startswith("_") and k not in ("final_obs", "final_info")):
        for i in np.flatnonzero(infos[f"_{key}"]):
            out[i][key] = infos[key][i]
    return out


def run(vector_env, mode, actions):
    records = [vector_env.reset(seed=7)]
    for a in actions:
        records.append(vector_env.step(a))
    return records


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_the_protocol_steps_as_gymnasiums_sync_vector_env_does(mode):
    n, actions = 3, np.random.default_rng(0).integers(0, 3, size=(25, 3))
    ours = run(FakeCore(n, mode), mode, actions)
    theirs = run(SyncVectorEnv([Countdown for _ in range(n)], autoreset_mode=mode), mode, actions)
    saw_end = False
    for k, (mine, ref) in enumerate(zip(ours, theirs)):
        np.testing.assert_array_equal(mine[0], ref[0], err_msg=f"observation at call {k}")
        if k:
            for j in (1, 2, 3):
                np.testing.assert_array_equal(mine[j], ref[j], err_msg=f"result {j} at call {k}")
        assert per_env(mine[-1], n) == per_env(ref[-1], n), f"infos at call {k}"
        if "final_obs" in ref[-1]:
            saw_end = True
            done = ref[-1]["_final_obs"]
            np.testing.assert_array_equal(mine[-1]["_final_obs"], done)
            for i in np.flatnonzero(done):
                np.testing.assert_array_equal(mine[-1]["final_obs"][i], ref[-1]["final_obs"][i])
                assert per_env(mine[-1]["final_info"], n)[i] == per_env(ref[-1]["final_info"], n)[i]
        else:
            assert "final_obs" not in mine[-1]
    assert saw_end or mode == AutoresetMode.NEXT_STEP


def test_disabled_refuses_to_step_an_ended_env_and_changes_nothing():
    env = FakeCore(2, AutoresetMode.DISABLED)
    env.reset(seed=0)
    while not env.ended.any():
        env.step(np.ones(2, dtype=int))
    before = (env.obs.copy(), env.ended.copy(), [copy.deepcopy(e.__dict__) for e in env.envs])
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.ones(2, dtype=int))
    assert np.array_equal(env.obs, before[0]) and np.array_equal(env.ended, before[1])
    assert all(e.t == b["t"] and e.episode == b["episode"] for e, b in zip(env.envs, before[2]))


def test_a_step_that_raises_leaves_every_env_as_it_was():
    env = FakeCore(3, AutoresetMode.NEXT_STEP, fail_at_step=4)
    env.reset(seed=1)
    for _ in range(3):
        env.step(np.ones(3, dtype=int))
    state = (env.obs.copy(), env.ended.copy(), [(e.episode, e.t, e.np_random.bit_generator.state) for e in env.envs])
    with pytest.raises(RuntimeError, match="the core failed"):
        env.step(np.ones(3, dtype=int))
    assert np.array_equal(env.obs, state[0]) and np.array_equal(env.ended, state[1])
    assert [(e.episode, e.t, e.np_random.bit_generator.state) for e in env.envs] == state[2]
    env.step(np.ones(3, dtype=int))  # the same step, retried, goes through


def test_step_before_reset_and_bad_modes_are_clear_errors():
    with pytest.raises(RuntimeError, match="reset"):
        FakeCore(1).step(np.zeros(1, dtype=int))
    with pytest.raises(ValueError, match="autoreset_mode='sometimes'"):
        checked_autoreset_mode("sometimes")
    assert object_column([1, None]).dtype == object
