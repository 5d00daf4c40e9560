"""The GPU bench's measurements, run on the embedded model on the CPU so that they cannot rot."""

import gymnasium as gym
import numpy as np
import pytest

from cosmos3_gym.bench import measure_env, measure_forward, measure_replay


def test_measurements_on_the_tiny_model():
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", num_steps=2,
                        reward="none", device="cpu", array_type="torch")
    rate, step_times, trajectories = measure_env(venv, episodes=1)
    assert rate > 0 and len(step_times) == 2 and len(trajectories) == 1 and len(trajectories[0]) == 2
    forward, transition, packed = measure_forward(venv, 6.0)
    assert list(forward) == ["eager"] and 0 < forward["eager"] and 0 < transition and len(packed.rows) == 4
    errors = measure_replay(venv.unwrapped.model, trajectories)
    assert all(np.all(e == 0) for e in errors.values())  # fp32 on the CPU: the replay repeats the rollout


def test_measurements_in_an_action_mode(tiny_model):
    """The policy-mode bench: per-env frames re-encoded at every reset; forward over both streams."""
    from cosmos3_gym.bench import mode_inputs

    options = mode_inputs("forward_dynamics", 2, 9, 32, 32)
    assert options["image"].shape == (2, 32, 32, 3) and options["actions"].shape == (2, 8, 2)
    venv = gym.make_vec("Cosmos3ForwardDynamicsRollout-v0", num_envs=2, vectorization_mode="vector_entry_point",
                        num_steps=2, reward="none", model=tiny_model, array_type="torch")
    rate, step_times, trajectories = measure_env(venv, episodes=1, options=options)
    assert rate > 0 and all(t.action_mode == "forward_dynamics" for t in trajectories[0])
    np.testing.assert_array_equal(trajectories[0][1].action_latents[-1][:, :2].numpy(), options["actions"][1])
    forward, transition, packed = measure_forward(venv, 6.0, options)
    assert 0 < forward["eager"] and packed.has_action and packed.gen_lengths[0] == 3 * 4 * 4 + 8
    errors = measure_replay(tiny_model, trajectories)
    assert all(np.all(e == 0) for e in errors.values())


def test_the_cli_offers_every_bench_mode():
    from cosmos3_gym import bench, cli

    assert cli.BENCH_MODES == tuple(bench.BENCH_MODES)


def test_the_world_bench_on_the_tiny_model(capsys):
    import re

    from cosmos3_gym.bench import bench_world

    bench_world("tiny", num_envs=2, size=32, chunk=8, num_steps=2, guidance=4.0, pipeline_samples=1, steps=2,
                device="cpu")
    out = capsys.readouterr().out
    pipe = float(re.search(r"diffusers_pipeline: ([\d.]+) imagined frames/s \(([\d.]+) ms", out).group(2))
    frames, chunks, step_ms = re.search(r"world_env: ([\d.]+) imagined frames/s \((\d+) chunks in 2 steps, "
                                        r"([\d.]+) ms", out).groups()
    assert 2 <= int(chunks) <= 4  # 2 envs x 2 steps, less any episode that ended in its goal
    assert float(frames) == pytest.approx(int(chunks) * 8 / (2 * float(step_ms) / 1e3), rel=0.02)
    speedup = float(re.search(r"speedup_vs_diffusers: ([\d.]+)", out).group(1))
    assert speedup == pytest.approx(float(frames) / (8 / (pipe / 1e3)), rel=0.05)
