"""The GPU bench's measurements, run on the embedded model on the CPU so that they cannot rot."""

import gymnasium as gym
import numpy as np

from cosmos3_gym.bench import measure_env, measure_forward, measure_replay


def test_measurements_on_the_tiny_model():
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", num_steps=2,
                        reward="none", device="cpu", array_type="torch")
    rate, step_times, trajectories = measure_env(venv, episodes=1)
    assert rate > 0 and len(step_times) == 2 and len(trajectories) == 1 and len(trajectories[0]) == 2
    forward, transition, packed = measure_forward(venv.unwrapped.engine, 6.0)
    assert 0 < forward and 0 < transition and len(packed.rows) == 4
    errors = measure_replay(venv.unwrapped.model, trajectories)
    assert all(np.all(e == 0) for e in errors.values())  # fp32 on the CPU: the replay repeats the rollout
