"""Same seed and actions reproduce a trajectory exactly; state snapshots restore it."""

import numpy as np
import pytest
import torch

from conftest import run_episode


def test_same_seed_same_trajectory(make_env):
    env = make_env(num_steps=4)
    _, reward_a, infos_a = run_episode(env, seed=11)
    _, reward_b, infos_b = run_episode(env, seed=11)
    a, b = infos_a[-1]["trajectory"], infos_b[-1]["trajectory"]
    assert torch.equal(a.latents, b.latents) and torch.equal(a.log_probs, b.log_probs)
    assert reward_a == reward_b and a.prompt == b.prompt
    assert np.array_equal(infos_a[-1]["frames"], infos_b[-1]["frames"])


def test_different_seed_different_trajectory(make_env):
    env = make_env(num_steps=4)
    opts = {"prompt": "a red ball"}
    _, _, infos_a = run_episode(env, seed=1, options=opts)
    _, _, infos_b = run_episode(env, seed=2, options=opts)
    a, b = infos_a[-1]["trajectory"], infos_b[-1]["trajectory"]
    assert (a.latents[0] - b.latents[0]).abs().max() > 0.5
    assert (a.latents[-1] - b.latents[-1]).abs().max() > 0.1


def test_noise_actions_replace_the_generator(make_env):
    env = make_env(num_steps=3, action_mode="noise")
    shape = env.observation_space["latent"].shape
    noises = [np.random.default_rng(k).standard_normal(shape).astype(np.float32) for k in range(3)]
    _, _, infos_a = run_episode(env, seed=5, actions=noises)
    _, _, infos_b = run_episode(env, seed=5, actions=noises)
    trajectory = infos_a[-1]["trajectory"]
    assert torch.equal(trajectory.latents, infos_b[-1]["trajectory"].latents)
    np.testing.assert_array_equal(trajectory.noises.numpy(), np.stack(noises))


def test_noise_modes_default_action_is_a_zero_noise_the_steps_mean(make_env):
    """``env.step(env.unwrapped.default_action)`` runs in noise mode as in control mode: the default is a zero
    noise, which lands on the step's mean, halfway between the steps of noise +e and -e (x' = mean + std e), at
    the preset's guidance and noise level."""
    env = make_env(num_steps=3, action_mode="noise")
    preset, default = env.unwrapped.preset, env.unwrapped.default_action
    assert env.action_space.contains(default) and not default.any()
    env.reset(seed=2)
    state = env.unwrapped.get_state()
    e = np.random.default_rng(0).standard_normal(env.action_space.shape).astype(np.float32)
    after = {}
    for name, noise in (("zero", default), ("plus", e), ("minus", -e)):
        env.unwrapped.set_state(state)
        obs, _, _, _, info = env.step(noise)
        after[name] = obs["latent"].astype(np.float64)
        assert (info["guidance_scale"], info["noise_level"]) == pytest.approx((preset.guidance_scale, preset.noise_level))
    assert np.abs(after["plus"] - after["minus"]).max() > 1e-2  # the noise moves the step
    np.testing.assert_allclose(after["zero"], (after["plus"] + after["minus"]) / 2, atol=1e-5)


def test_get_state_set_state_restores_the_episode(make_env):
    env = make_env(num_steps=5)
    env.reset(seed=3)
    env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    rest = [env.step(env.unwrapped.default_action) for _ in range(4)]
    assert rest[-1][2]  # terminated: the episode is over ...
    env.unwrapped.set_state(state)  # ... and restoring the mid-episode state makes it steppable again
    again = [env.step(env.unwrapped.default_action) for _ in range(4)]
    assert [r[4]["log_prob"] for r in rest] == [a[4]["log_prob"] for a in again]
    np.testing.assert_array_equal(rest[-1][0]["latent"], again[-1][0]["latent"])
