"""Env i's result depends only on its own seed and actions, not on B or its neighbours."""

import gymnasium as gym
import numpy as np
import pytest
import torch

PROMPTS = ["a red ball", "a green square slides to the left and then stops near the wall", "x",
           "a blue ball falls down from the top of the frame", "yellow"]
STEPS = 4


def actions_for(env_index: int, step: int) -> list[float]:
    return [2.0 + env_index + 0.5 * step, 0.3 + 0.1 * env_index]


def single_rollout(env_index: int, seed: int, prompt: str):
    env = gym.make("Cosmos3Rollout-v0", num_steps=STEPS)
    env.reset(seed=seed, options={"prompt": prompt})
    log_probs = []
    for k in range(STEPS):
        obs, _, _, _, info = env.step(np.array(actions_for(env_index, k), dtype=np.float32))
        log_probs.append(info["log_prob"])
    return obs["latent"], np.array(log_probs)


def vector_rollout(num_envs: int, prompts: list[str], seeds: list[int], env_indices: list[int]):
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=num_envs, vectorization_mode="vector_entry_point",
                        num_steps=STEPS)
    venv.reset(seed=seeds, options={"prompt": prompts})
    log_probs = []
    for k in range(STEPS):
        actions = torch.tensor([actions_for(i, k) for i in env_indices])
        obs, _, _, _, info = venv.step(actions)
        log_probs.append(info["log_prob"])
    return obs["latent"], np.stack(log_probs, axis=1)


@pytest.fixture(scope="module")
def singles():
    return [single_rollout(i, 100 + i, PROMPTS[i]) for i in range(5)]


def test_five_envs_equal_five_single_envs(singles):
    latents, log_probs = vector_rollout(5, PROMPTS, [100 + i for i in range(5)], list(range(5)))
    for i, (single_latent, single_log_probs) in enumerate(singles):
        np.testing.assert_allclose(latents[i], single_latent, rtol=0, atol=1e-5)
        np.testing.assert_allclose(log_probs[i], single_log_probs, rtol=0, atol=1e-6)
    # The envs really differ from one another (isolation is not trivially satisfied).
    assert np.abs(latents[0] - latents[1]).max() > 0.1


def test_result_does_not_depend_on_neighbours_or_batch_size(singles):
    order = [3, 0, 4]  # a different B, different neighbours, different positions
    latents, log_probs = vector_rollout(3, [PROMPTS[i] for i in order], [100 + i for i in order], order)
    for j, i in enumerate(order):
        np.testing.assert_allclose(latents[j], singles[i][0], rtol=0, atol=1e-5)
        np.testing.assert_allclose(log_probs[j], singles[i][1], rtol=0, atol=1e-6)


def test_replaying_a_vector_episode_in_env_order_repeats_the_rollout_exactly():
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=3, vectorization_mode="vector_entry_point", num_steps=STEPS)
    venv.reset(seed=9, options={"prompt": PROMPTS[:3]})
    for k in range(STEPS):
        _, _, _, _, info = venv.step(torch.tensor([actions_for(i, k) for i in range(3)]))
    trajectories = list(info["trajectory"])
    engine = venv.unwrapped.engine
    rollout = torch.stack([t.log_probs for t in trajectories])
    assert torch.equal(engine.replay_log_probs(trajectories).cpu(), rollout)
    alone = engine.replay_log_probs(trajectories[1]).cpu()  # another grouping: equal up to float rounding
    assert (torch.exp(alone - rollout[1]) - 1).abs().max() <= 1e-6
