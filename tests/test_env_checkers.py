"""Gymnasium's and stable-baselines3's own env checkers accept every env id and mode."""

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import cosmos3_gym


@pytest.mark.parametrize("env_id", cosmos3_gym.ENV_IDS)
@pytest.mark.parametrize("action_mode", ["control", "noise"])
def test_gymnasium_check_env(env_id, action_mode):
    env = gym.make(env_id, action_mode=action_mode, num_steps=3, render_mode="rgb_array")
    gym_check_env(env.unwrapped, skip_render_check=False)


@pytest.mark.parametrize("env_id", cosmos3_gym.ENV_IDS)
def test_sb3_check_env_control(env_id):
    env = gym.make(env_id, num_steps=3).unwrapped
    with warnings.catch_warnings():
        # SB3 recommends a symmetric [-1, 1] action box; (guidance, noise level) keeps its natural units.
        warnings.filterwarnings("ignore", message=".*symmetric and normalized.*")
        sb3_check_env(env, warn=True)


@pytest.mark.parametrize("env_id", cosmos3_gym.ENV_IDS)
def test_sb3_check_env_noise(env_id):
    # Unbounded by design, so that action_space.sample() is the stock sampler: warn=False.
    sb3_check_env(gym.make(env_id, action_mode="noise", num_steps=3).unwrapped, warn=False)
