"""Gymnasium's vector-env conventions: batched spaces, seeding, autoreset, numpy + torch."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv


def make_vec(num_envs=3, **kwargs):
    return gym.make_vec("Cosmos3Rollout-v0", num_envs=num_envs, vectorization_mode="vector_entry_point",
                        num_steps=kwargs.pop("num_steps", 2), **kwargs)


def default_actions(venv):
    return torch.tensor(venv.default_action).repeat(venv.num_envs, 1)


def test_make_vec_returns_the_batched_env_with_batched_spaces():
    venv = make_vec(4)
    assert isinstance(venv, Cosmos3RolloutVectorEnv)
    single = gym.make("Cosmos3Rollout-v0", num_steps=2)
    assert venv.single_observation_space == single.observation_space
    assert venv.observation_space == batch_space(single.observation_space, 4)
    assert venv.action_space == batch_space(single.action_space, 4)
    assert venv.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, info = venv.reset(seed=7)
    assert obs["latent"].shape == (4, *single.observation_space["latent"].shape)
    assert isinstance(obs["latent"], np.ndarray) and obs["step"].tolist() == [[0]] * 4
    assert info["seed"].tolist() == [7, 8, 9, 10]
    assert venv.observation_space.contains(obs)
    obs, *_ = venv.step(default_actions(venv))
    assert venv.observation_space.contains(obs)


def test_torch_arrays_on_request():
    venv = make_vec(2, array_type="torch")
    numpy_venv = make_vec(2)
    obs, _ = venv.reset(seed=3)
    numpy_obs, _ = numpy_venv.reset(seed=3)
    assert isinstance(obs["latent"], torch.Tensor) and obs["latent"].device == venv.unwrapped.device
    obs, rewards, terminated, _, info = venv.step(default_actions(venv))
    numpy_obs, numpy_rewards, _, _, numpy_info = numpy_venv.step(default_actions(venv))
    assert isinstance(rewards, torch.Tensor) and isinstance(info["log_prob"], torch.Tensor)
    np.testing.assert_array_equal(obs["latent"].cpu().numpy(), numpy_obs["latent"])
    np.testing.assert_array_equal(info["log_prob"].cpu().numpy(), numpy_info["log_prob"])
    assert venv.observation_space.contains(venv.numpy_obs(obs))


def test_env_i_is_seeded_with_seed_plus_i():
    venv = make_vec(3)
    obs, _ = venv.reset(seed=40, options={"prompt": "a red ball"})
    single = gym.make("Cosmos3Rollout-v0", num_steps=2)
    for i in range(3):
        single_obs, _ = single.reset(seed=40 + i, options={"prompt": "a red ball"})
        np.testing.assert_array_equal(obs["latent"][i], single_obs["latent"])


def test_next_step_autoreset():
    venv = make_vec(2)
    venv.reset(seed=0)
    for _ in range(2):
        obs, rewards, terminated, truncated, info = venv.step(default_actions(venv))
    assert terminated.all() and not truncated.any() and (rewards > 0).all()
    assert obs["step"].tolist() == [[2], [2]]
    assert info["_trajectory"].all() and info["trajectory"][1].num_steps == 2
    assert info["frames"].shape == (2, 9, 32, 32, 3)
    # Next step: the envs reset, ignore the action, report no reward.
    obs, rewards, terminated, _, info = venv.step(default_actions(venv))
    assert obs["step"].tolist() == [[0], [0]] and (rewards == 0).all() and not terminated.any()
    assert "log_prob" not in info
    assert info["_seed"].all() and info["seed"].tolist() == [e.seed for e in venv.unwrapped.engine.episodes]
    assert info["_prompt"].all() and info["prompt"].tolist() == [e.prompt for e in venv.unwrapped.engine.episodes]
    obs, _, _, _, info = venv.step(default_actions(venv))
    assert obs["step"].tolist() == [[1], [1]] and np.isfinite(info["log_prob"]).all()


def test_same_step_autoreset_reports_the_final_observation():
    venv = make_vec(2, autoreset_mode="SameStep")
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    venv.reset(seed=0)
    venv.step(default_actions(venv))
    obs, rewards, terminated, _, info = venv.step(default_actions(venv))
    assert terminated.all() and obs["step"].tolist() == [[0], [0]]
    assert info["final_obs"]["step"].tolist() == [[2], [2]]
    # Gymnasium's SAME_STEP layout: the ended episodes' step infos in final_info, the new
    # episodes' reset infos at the top level
    final = info["final_info"]
    assert final["_trajectory"].all() and final["_log_prob"].all() and np.isfinite(final["log_prob"]).all()
    np.testing.assert_array_equal(info["final_obs"]["latent"][0], final["trajectory"][0].latents[-1].numpy())
    assert not info["_trajectory"].any() and not info["_log_prob"].any()
    assert info["_seed"].all() and info["seed"].tolist() == [t.seed for t in venv.unwrapped.engine.episodes]
    assert set(info["seed"].tolist()).isdisjoint({0, 1})  # fresh seeds, not the first episodes'


def test_disabled_autoreset_needs_reset_and_supports_reset_mask():
    venv = make_vec(3, autoreset_mode=AutoresetMode.DISABLED)
    venv.reset(seed=0)
    for _ in range(2):
        venv.step(default_actions(venv))
    with pytest.raises(RuntimeError, match="call reset"):
        venv.step(default_actions(venv))
    before = venv.unwrapped.engine.episode(1).latent.clone()
    obs, _ = venv.reset(seed=5, options={"reset_mask": np.array([True, False, True])})
    assert obs["step"].tolist() == [[0], [2], [0]]
    np.testing.assert_array_equal(obs["latent"][1], before.cpu().numpy())


def test_grpo_groups_share_prompts_and_differ_in_seeds():
    venv = make_vec(6, group_size=3)
    obs, info = venv.reset(seed=1)
    prompts = info["prompt"].tolist()
    assert prompts[0] == prompts[1] == prompts[2] and prompts[3] == prompts[4] == prompts[5]
    assert len(set(info["seed"].tolist())) == 6
    assert np.abs(obs["latent"][0] - obs["latent"][1]).max() > 0.5
    obs, info = venv.reset(seed=1, options={"prompt": ["a red ball", "a blue ball"]})
    assert info["prompt"].tolist() == ["a red ball"] * 3 + ["a blue ball"] * 3
    # After an episode, autoreset keeps groups coherent.
    for _ in range(3):
        venv.step(default_actions(venv))
    prompts = [venv.unwrapped.engine.episode(i).prompt for i in range(6)]
    assert prompts[0] == prompts[1] == prompts[2] and prompts[3] == prompts[4] == prompts[5]


def test_fork_children_reproduce_or_diverge_after_the_fork_step():
    venv = make_vec(4, num_steps=4)
    venv.reset(seed=3, options={"prompt": "a red ball"})
    venv.step(default_actions(venv))
    before = venv.unwrapped.engine.get_state()
    used = venv.fork(0, [1, 2, 3], seeds=[None, 11, 12])
    assert used == [None, 11, 12]
    engine = venv.unwrapped.engine
    for i in (1, 2, 3):
        assert torch.equal(engine.episode(i).latent, engine.episode(0).latent)
    trajectories = None
    for _ in range(3):
        obs, _, terminated, _, info = venv.step(default_actions(venv))
    trajectories = info["trajectory"]
    parent, same, child_a, child_b = (t.latents for t in trajectories)
    # Shared history up to and including the fork step.
    for child in (same, child_a, child_b):
        assert torch.equal(child[:2], parent[:2])
    assert torch.equal(same, parent)  # kept the parent's generator: reproduces it
    assert (child_a[2] - parent[2]).abs().max() > 1e-2 and (child_a[2] - child_b[2]).abs().max() > 1e-2
    # Restoring the pre-fork state brings back the un-forked envs.
    engine.set_state(before)
    assert not torch.equal(engine.episode(1).latent, engine.episode(0).latent)


def test_vector_errors_keep_the_env_usable():
    venv = make_vec(3)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(2, 2\); expected \(3, 2\)"):
        venv.step(torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"options\['prompt'\] has 2 entries; expected a str or a list of 3"):
        venv.reset(seed=0, options={"prompt": ["a", "b"]})
    with pytest.raises(ValueError, match=r"fork\(dst=\[5\]\): dst must be a non-empty list of env indices in \[0, 3\)"):
        venv.fork(0, [5])
    with pytest.raises(ValueError, match="seed has 2 entries"):
        venv.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="group_size=2 must be a positive divisor of num_envs=3"):
        make_vec(3, group_size=2)
    obs, _, _, _, info = venv.step(default_actions(venv))
    assert obs["step"].tolist() == [[1], [1], [1]] and np.isfinite(info["log_prob"]).all()
