"""Trajectories: saved as safetensors + JSON, and replayed to the rollout's log-probs."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from conftest import run_episode
from cosmos3_gym.trajectory import Trajectory


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_replayed_log_probs_match_the_rollout(make_env, tmp_path, kind):
    env = make_env(num_steps=6, kind=kind)
    actions = [np.array([g, a], dtype=np.float32) for g, a in zip(np.linspace(2, 8, 6), np.linspace(0.9, 0.3, 6))]
    _, _, infos = run_episode(env, seed=21, actions=actions)
    trajectory = infos[-1]["trajectory"]
    path = tmp_path / "episode.safetensors"
    trajectory.save(path)
    loaded = Trajectory.load(path)

    rollout = torch.tensor([info["log_prob"] for info in infos])
    torch.testing.assert_close(loaded.log_probs, rollout, rtol=0, atol=0, equal_nan=True)
    finite = torch.isfinite(rollout)
    assert finite[:-1].all()  # only cps's last step (sigma_next = 0) is deterministic
    replay = env.unwrapped.engine.replay_log_probs(loaded)
    ratio = torch.exp(replay[finite] - rollout[finite])
    assert (ratio - 1).abs().max() <= 1e-6
    torch.testing.assert_close(loaded.guidance_scales, torch.tensor(np.stack(actions)[:, 0]))


def test_replay_detects_a_tampered_step(make_env):
    env = make_env(num_steps=3)
    _, _, infos = run_episode(env, seed=4)
    trajectory = infos[-1]["trajectory"]
    trajectory.latents[2] += 2.0
    replay = env.unwrapped.engine.replay_log_probs(trajectory)
    rollout = trajectory.log_probs
    assert abs(float(replay[0] - rollout[0])) < 1e-6
    assert float(replay[1]) < float(rollout[1]) - 1.0


def test_file_is_safetensors_with_json_metadata(make_env, tmp_path):
    env = make_env(num_steps=2)
    _, _, infos = run_episode(env, seed=0, options={"prompt": "a blue ball falls down"})
    path = tmp_path / "t.safetensors"
    infos[-1]["trajectory"].save(path)
    with safe_open(str(path), framework="pt") as handle:
        meta = json.loads(handle.metadata()["cosmos3_gym.trajectory"])
        assert set(handle.keys()) >= {"latents", "log_probs", "sigmas", "timesteps", "noises"}
        assert handle.get_tensor("latents").shape[0] == 3
    assert meta["prompt"] == "a blue ball falls down" and meta["seed"] == 0 and meta["weights_version"] == 0
    assert meta["cond_ids"] and meta["uncond_ids"]


def test_loading_a_foreign_file_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a cosmos3_gym trajectory"):
        Trajectory.load(tmp_path / "other.safetensors")
