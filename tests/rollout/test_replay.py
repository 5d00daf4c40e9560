"""The trainer's side: replay_log_probs needs only a model and trajectories, and repeats the rollout."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from cosmos3_gym.rollout.transition import replay_log_probs

STEPS = 4


@pytest.fixture(scope="module")
def episode():
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=3, vectorization_mode="vector_entry_point", num_steps=STEPS,
                        reward="none", device="cpu")
    venv.reset(seed=5, options={"prompt": ["a red ball", "a blue square falls", "green"]})
    for k in range(STEPS):
        actions = np.array([[2.0 + i + k, 0.4 + 0.1 * i] for i in range(3)], dtype=np.float32)
        _, _, _, _, info = venv.step(actions)
    return venv.unwrapped.model, list(info["trajectory"])


def test_replay_in_env_order_is_bit_exact(episode):
    model, trajectories = episode
    rollout = torch.stack([t.log_probs for t in trajectories])
    assert torch.equal(replay_log_probs(model, trajectories), rollout)
    sums = torch.stack([t.log_prob_sums for t in trajectories])
    assert torch.equal(replay_log_probs(model, trajectories, reduction="sum"), sums)


def test_a_subset_of_steps_is_bit_exact_too(episode):
    """Flow-GRPO trains on a fraction of the timesteps: steps [1, 3] replay without step 0."""
    model, trajectories = episode
    rollout = torch.stack([t.log_probs for t in trajectories])
    assert torch.equal(replay_log_probs(model, trajectories, steps=[1, 3]), rollout[:, [1, 3]])


def test_micro_batches_agree_to_float_rounding(episode):
    model, trajectories = episode
    rollout = torch.stack([t.log_probs for t in trajectories])
    replayed = replay_log_probs(model, trajectories, micro_batch=2)
    assert replayed.shape == rollout.shape
    assert (torch.exp(replayed - rollout) - 1).abs().max() <= 1e-6
    alone = replay_log_probs(model, trajectories[0])  # one trajectory: [N]
    assert alone.shape == (STEPS,) and (torch.exp(alone - rollout[0]) - 1).abs().max() <= 1e-6


@pytest.mark.parametrize("kwargs,match", [
    ({"steps": [4]}, r"steps=\[4\] must be step indices \(ints\) in \[0, 4\)"),
    ({"steps": [0.9]}, r"steps=\[0.9\]"),
    ({"steps": "01"}, "steps='01'"),
    ({"steps": [True]}, r"steps=\[True\]"),
    ({"micro_batch": 2.5}, "micro_batch=2.5"),
    ({"micro_batch": 0}, "micro_batch=0"),
    ({"reduction": "max"}, "reduction='max'"),
])
def test_bad_arguments(episode, kwargs, match):
    model, trajectories = episode
    with pytest.raises(ValueError, match=match):
        replay_log_probs(model, trajectories, **kwargs)


def test_mixed_trajectories_are_refused(episode):
    model, trajectories = episode
    other = gym.make("Cosmos3Rollout-v0", num_steps=2, reward="none", model=model)
    other.reset(seed=0)
    for _ in range(2):
        *_, info = other.step(other.unwrapped.default_action)
    with pytest.raises(ValueError, match="differ in steps"):
        replay_log_probs(model, [trajectories[0], info["trajectory"]])


def test_a_model_or_trajectory_of_another_type_is_named(episode):
    """The easy mistakes: the env for its model; an info, None (a step before the last), a path, or a vector
    env's infos['trajectory'] before every env has ended, for trajectories."""
    model, trajectories = episode
    env = gym.make("Cosmos3Rollout-v0", num_steps=STEPS, reward="none", model=model)
    with pytest.raises(TypeError, match=r"model is a OrderEnforcing; give a Cosmos3Model \(the env's, "
                                        r"env.unwrapped.model, or a trainer's copy\)"):
        replay_log_probs(env, trajectories)
    for wrong, name in (({"trajectory": trajectories[0]}, "a dict"), (None, "None"), ("out/run.pt", "a str")):
        with pytest.raises(TypeError, match=rf"trajectories is {name}; give info\['trajectory'\] \(an episode's last "
                                            r"step has it\), a list of them, or Trajectory.load\(path\)"):
            replay_log_probs(model, wrong)
    with pytest.raises(TypeError, match=r"trajectories\[1\] is a dict, not a Trajectory; give the episode's "
                                        r"info\['trajectory'\]"):
        replay_log_probs(model, [trajectories[0], {"trajectory": trajectories[1]}])
    with pytest.raises(TypeError, match=r"trajectories\[0\] is None: an env whose episode had not ended; .*"
                                        r"infos\['trajectory'\]\[infos\['_trajectory'\]\]"):
        replay_log_probs(model, np.array([None, trajectories[1]], dtype=object))
