"""The SB3 adapter: a real VecEnv (same-step autoreset, terminal observations); PPO runs in test_examples."""

import numpy as np
import pytest
from stable_baselines3.common.vec_env import VecMonitor

from cosmos3_gym.env.sb3 import Cosmos3SB3VecEnv


def test_same_step_autoreset_with_terminal_observation():
    env = Cosmos3SB3VecEnv.make("Cosmos3Rollout-v0", num_envs=3, num_steps=2)
    env.seed(5)
    obs = env.reset()
    assert obs["latent"].shape == (3, 4, 3, 8, 8) and isinstance(obs["latent"], np.ndarray)
    assert env.get_attr("seed") == [5, 6, 7]
    actions = np.tile(env.get_attr("default_action")[0], (3, 1))
    obs, rewards, dones, infos = env.step(actions)
    assert not dones.any() and "log_prob" in infos[0]
    obs, rewards, dones, infos = env.step(actions)
    assert dones.all() and rewards.dtype == np.float32 and (rewards > 0).all()
    assert (obs["step"] == 0).all()  # already reset
    assert all(info["terminal_observation"]["step"] == [2] for info in infos)
    np.testing.assert_array_equal(infos[1]["terminal_observation"]["latent"], infos[1]["trajectory"].latents[-1])
    # the ended episodes' last step infos (from final_info), the per-stream split included
    trajectory = infos[1]["trajectory"]
    assert infos[1]["log_prob_sum_video"] == pytest.approx(float(trajectory.log_prob_sums[-1]))
    assert infos[1]["log_prob"] == pytest.approx(float(trajectory.log_probs[-1]))
    engine = env.venv.engine
    assert env.get_attr("prompt", indices=[0, 2]) == [engine.episode(0).prompt, engine.episode(2).prompt]
    assert env.env_is_wrapped(VecMonitor) == [False] * 3


def test_adapter_refuses_next_step_autoreset():
    from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv

    with pytest.raises(ValueError, match=r"SAME_STEP.*Cosmos3SB3VecEnv\.make\('Cosmos3Rollout-v0', num_envs=2, "):
        Cosmos3SB3VecEnv(Cosmos3RolloutVectorEnv(2, num_steps=2))


def test_adapter_refuses_a_plain_gymnasium_vector_env_and_the_keywords_it_sets():
    """A twin's SyncVectorEnv has no trajectory at its episode ends (a KeyError at the first one once): it is
    sent to SB3's own make_vec_env; the autoreset mode, vectorization and array type are the adapter's."""
    import gymnasium as gym

    plain = gym.make_vec("ProceduralWorld-v0", num_envs=2, vectorization_mode="sync")
    with pytest.raises(ValueError, match=r"not a SyncVectorEnv; for a plain Gymnasium env such as ProceduralWorld-v0 "
                                         r"use SB3's make_vec_env\('ProceduralWorld-v0', n_envs=2\)"):
        Cosmos3SB3VecEnv(plain)
    for env_id in ("Cosmos3Rollout-v0", "Cosmos3World-v0"):
        for keyword, value in (("autoreset_mode", "next_step"), ("vectorization_mode", "sync"), ("array_type", "torch")):
            with pytest.raises(ValueError, match=rf"{keyword}='{value}': the SB3 adapter sets it"):
                Cosmos3SB3VecEnv.make(env_id, num_envs=2, **{keyword: value})


@pytest.mark.parametrize("env_id", ["Cosmos3World-v0", "Cosmos3PushT-v0"])
def test_make_builds_the_imagined_worlds_as_their_own_vector_envs_do(env_id, stand_in_model):
    """Cosmos3SB3VecEnv.make(world id) is the adapter over the world's own vector env with same-step
    autoreset: the same first frames and the same imagined steps, bit for bit; its keywords are
    checked as gym.make_vec's, and Ray workers (rollout presets only) are refused."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    if env_id == "Cosmos3PushT-v0":
        pytest.importorskip("gym_pusht")
    made = Cosmos3SB3VecEnv.make(env_id, num_envs=2, num_steps=1, model=stand_in_model)
    by_hand = Cosmos3SB3VecEnv(gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", num_steps=1,
                                            model=stand_in_model, autoreset_mode=AutoresetMode.SAME_STEP))
    assert made.venv.env_id == env_id and made.venv.autoreset_mode == AutoresetMode.SAME_STEP
    assert made.observation_space == by_hand.observation_space and made.action_space == by_hand.action_space
    actions = np.stack([made.action_space.sample() for _ in range(2)])
    for env in (made, by_hand):
        env.seed(3)
    np.testing.assert_array_equal(made.reset(), by_hand.reset())
    np.testing.assert_array_equal(made.step(actions)[0], by_hand.step(actions)[0])
    with pytest.raises(TypeError, match="did you mean 'num_steps'"):
        Cosmos3SB3VecEnv.make(env_id, num_envs=2, num_step=1, model=stand_in_model)
    with pytest.raises(ValueError, match=rf"num_workers=2: {env_id} runs in this process only"):
        Cosmos3SB3VecEnv.make(env_id, num_envs=2, num_workers=2)


def test_per_env_options_and_indices():
    env = Cosmos3SB3VecEnv.make("Cosmos3Rollout-v0", num_envs=2, num_steps=2, reward="none")
    env.set_options([{"prompt": "a red ball"}, {"prompt": "a blue square"}])
    env.reset()
    assert env.get_attr("prompt") == ["a red ball", "a blue square"]
    assert env.get_attr("prompt", indices=np.int64(1)) == ["a blue square"]
    with pytest.raises(ValueError, match=r"indices=\[5\]"):
        env.get_attr("prompt", indices=[5])
    env.set_options([{"prompt": "a red ball"}, {}])
    with pytest.raises(ValueError, match="given for some envs only"):
        env.reset()


def test_make_names_the_imagined_worlds_beside_the_presets_for_an_unknown_id():
    with pytest.raises(ValueError, match=r"unknown preset 'Cosmos3World-v1'; known env ids: \[.*'Cosmos3Rollout-v0'.*\]; "
                                         r"Cosmos3SB3VecEnv.make also takes the imagined worlds \['Cosmos3World-v0', "
                                         r"'Cosmos3PushT-v0'\]"):
        Cosmos3SB3VecEnv.make("Cosmos3World-v1", num_envs=2)


def test_a_world_envs_step_infos_reach_sb3_as_the_vector_env_gives_them(tiny_model):
    """Callbacks read the imagined world's per-step infos (success, frames; PushT's coverage) through the
    adapter: the same values a plain vector env gives for the same seeds and actions."""
    import gymnasium as gym

    actions = np.tile(np.linspace(-1, 1, 8, dtype=np.float32)[:, None], (2, 1, 2))
    plain = gym.make_vec("Cosmos3World-v0", num_envs=2, vectorization_mode="vector_entry_point", num_steps=1,
                         model=tiny_model, autoreset_mode="SameStep")
    plain.reset(seed=0)
    _, _, _, _, expected = plain.step(actions)
    env = Cosmos3SB3VecEnv.make("Cosmos3World-v0", num_envs=2, num_steps=1, model=tiny_model)
    env.seed(0)
    env.reset()
    *_, infos = env.step(actions)
    for i, info in enumerate(infos):
        assert info["success"] is bool(expected["success"][i])
        np.testing.assert_array_equal(info["frames"], expected["frames"][i])
        assert info["log_prob_sum"] == expected["log_prob_sum"][i]
