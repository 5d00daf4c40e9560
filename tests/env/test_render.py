"""render(): the decoded x0-prediction as one filmstrip image, recordable with RecordVideo."""

import importlib.util
import warnings

import gymnasium as gym
import imageio.v2 as imageio
import numpy as np
import pytest

import cosmos3_gym

from conftest import run_episode


def test_render_is_the_filmstrip_of_the_decoded_prediction(make_env):
    env = make_env(num_steps=3, render_mode="rgb_array")
    env.reset(seed=0)
    first = env.render()
    assert first.shape == (32, 9 * 32, 3) and first.dtype == np.uint8
    _, _, infos = run_episode(env, seed=0)
    final = env.render()
    np.testing.assert_array_equal(final, np.concatenate(list(infos[-1]["frames"]), axis=1))
    assert not np.array_equal(first, final)


def test_record_video_wrapper(tmp_path):
    env = gym.wrappers.RecordVideo(gym.make("Cosmos3Rollout-v0", num_steps=3, render_mode="rgb_array"),
                                   str(tmp_path / "videos"), episode_trigger=lambda episode: True, disable_logger=True)
    run_episode(env, seed=0)
    env.close()
    (video,) = (tmp_path / "videos").glob("*.mp4")
    frames = imageio.mimread(video)
    assert len(frames) == 4 and frames[0].shape == (32, 288, 3)  # reset + 3 steps


@pytest.mark.parametrize("env_id", [*cosmos3_gym.ENV_IDS[:1], *cosmos3_gym.WORLD_ENV_IDS,
                                    *(cosmos3_gym.PUSHT_ENV_IDS if importlib.util.find_spec("gym_pusht") else [])])
def test_render_without_a_render_mode_says_how_to_get_frames(env_id):
    """None, as Gymnasium's envs return, with the warning Gymnasium's (disabled) env checker would give."""
    env = gym.make(env_id)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match=f'gym.make\\("{env_id}", render_mode="rgb_array"\\)'):
        assert env.render() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env.render() is None  # once per env
    env.close()


def test_a_vector_env_without_a_render_mode_says_make_vec():
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", num_steps=2)
    venv.reset(seed=0)
    with pytest.warns(UserWarning, match=r'gym.make_vec\("Cosmos3Rollout-v0", render_mode="rgb_array"\)'):
        assert venv.render() is None
    venv.close()
