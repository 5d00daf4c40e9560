"""Gymnasium's NumpyToTorch, single-env and vector, over the envs: numbers become tensors equal to the
plain env's arrays, and the trajectory (a Trajectory object, not an array) comes through as it is."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import NumpyToTorch
from gymnasium.wrappers.vector import NumpyToTorch as VectorNumpyToTorch

from cosmos3_gym.rollout.trajectory import Trajectory

KWARGS = {"Cosmos3Rollout-v0": {"num_steps": 2}, "Cosmos3World-v0": {"num_steps": 2, "horizon": 2}}


def assert_same_trajectory(got, want):
    """Same class, and every field equal: tensors elementwise (bit for bit), the rest by ==."""
    assert type(got) is Trajectory and type(want) is Trajectory
    for field in dataclasses.fields(Trajectory):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if isinstance(b, torch.Tensor):
            assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), field.name
        elif isinstance(b, list) and any(isinstance(x, torch.Tensor) for x in b):
            assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)), field.name
        else:
            assert a == b, field.name


def assert_converted(got, want):
    """``got`` is NumpyToTorch's output for the plain env's ``want``: tensors equal to the arrays and
    numbers, objects (strings, trajectories) unchanged; recursively through dicts."""
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            assert_converted(got[key], want[key])
    elif isinstance(want, Trajectory):
        assert_same_trajectory(got, want)
    elif isinstance(want, str):
        assert got == want
    elif isinstance(want, np.ndarray) and want.dtype == object:
        assert type(got) is np.ndarray and got.shape == want.shape
        for a, b in zip(got, want):
            if b is None:  # an env that did not report this key
                assert a is None
            else:
                assert_converted(a, b)
    else:  # numpy arrays and Python numbers
        assert isinstance(got, torch.Tensor)
        np.testing.assert_array_equal(got.numpy(), np.asarray(want))


def action_for(env_id, env):
    """The rollout's default (guidance, noise level), or a push to the left and down for the world."""
    if env_id == "Cosmos3Rollout-v0":
        return np.asarray(env.unwrapped.default_action, dtype=np.float32)
    return np.tile(np.array([[-1.0, 0.5]], dtype=np.float32), (8, 1))


@pytest.mark.parametrize("env_id", ["Cosmos3Rollout-v0", "Cosmos3World-v0"])
def test_single_env_numpy_to_torch_runs_an_episode_and_keeps_the_trajectory(env_id, tiny_model):
    plain = gym.make(env_id, model=tiny_model, **KWARGS[env_id])
    converted = NumpyToTorch(gym.make(env_id, model=tiny_model, **KWARGS[env_id]))
    obs, info = plain.reset(seed=5)
    got_obs, got_info = converted.reset(seed=5)
    assert_converted(got_obs, obs)
    assert_converted(got_info, info)
    action = action_for(env_id, plain)
    done = False
    while not done:
        want = plain.step(action)
        got = converted.step(torch.as_tensor(action))
        assert_converted(got[0], want[0])  # the observation: tensors equal to the numpy arrays
        assert got[1:4] == want[1:4]  # reward, terminated, truncated stay Python numbers
        assert_converted(got[4], want[4])
        done = want[2] or want[3]
    assert isinstance(got[4]["trajectory"], Trajectory)  # the last step's, equal to the plain env's
    assert got[4]["trajectory"].log_probs.shape[0] == plain.unwrapped.vector.engine.num_steps


@pytest.mark.parametrize("env_id", ["Cosmos3Rollout-v0", "Cosmos3World-v0"])
def test_vector_numpy_to_torch_runs_an_episode_and_keeps_the_trajectories(env_id, tiny_model):
    def make():
        return gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", model=tiny_model,
                            **KWARGS[env_id])

    plain, converted = make(), VectorNumpyToTorch(make())
    for got, want in zip(converted.reset(seed=5), plain.reset(seed=5)):
        assert_converted(got, want)
    actions = np.stack([action_for(env_id, plain)] * 2)
    for _ in range(2):  # both presets end their episodes at the second step
        want = plain.step(actions)
        got = converted.step(torch.as_tensor(actions))
        for g, w in zip(got, want):
            assert_converted(g, w)
    assert want[2].any() or want[3].any()
    ended = want[4]["_trajectory"]
    assert ended.any() and all(isinstance(t, Trajectory) for t in got[4]["trajectory"][ended])
