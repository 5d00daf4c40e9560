"""Weight updates from a trainer: checked whole before anything changes; then versioned."""

import numpy as np
import pytest
import torch

from conftest import run_episode
from cosmos3_gym.engine import RolloutEngine
from cosmos3_gym.generator import Cosmos3Generator


def snapshot(env):
    return {k: v.clone() for k, v in env.unwrapped.engine.generator.transformer.state_dict().items()}


@pytest.mark.parametrize("bad,match", [
    ({"layers.0.mlp.up_proj.weight_typo": torch.zeros(1)}, "unknown tensor 'layers.0.mlp.up_proj.weight_typo'"),
    ({"proj_out.weight": torch.zeros(3, 3)}, r"'proj_out.weight' has shape \(3, 3\)"),
    ({"proj_out.bias": torch.zeros(16, dtype=torch.float64)}, "'proj_out.bias' has dtype torch.float64"),
    ({"proj_out.bias": [0.0] * 16}, "not a torch.Tensor"),
])
def test_bad_updates_change_nothing(make_env, bad, match):
    env = make_env(num_steps=2)
    before = snapshot(env)
    good = {"proj_in.bias": torch.ones_like(before["proj_in.bias"])}
    with pytest.raises(ValueError, match=match):
        env.unwrapped.update_weights({**good, **bad})  # the good tensor is not applied either
    after = snapshot(env)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert env.unwrapped.weights_version == 0
    run_episode(env, seed=0)


def test_update_from_a_trainer_changes_rollouts_and_bumps_the_version(make_env):
    env = make_env(num_steps=3)
    _, _, infos = run_episode(env, seed=4)
    trainer = Cosmos3Generator.embedded(device="cpu").transformer.requires_grad_(True)
    with torch.no_grad():
        trainer.proj_out.bias.add_(0.5)  # what an optimizer step would do
    assert env.unwrapped.update_weights(trainer.named_parameters()) == 1
    _, _, infos_after = run_episode(env, seed=4)
    assert infos_after[0]["weights_version"] == 1 and infos_after[-1]["trajectory"].weights_version == 1
    assert not torch.allclose(infos[-1]["trajectory"].latents[-1], infos_after[-1]["trajectory"].latents[-1])
    torch.testing.assert_close(env.unwrapped.engine.generator.transformer.proj_out.bias, trainer.proj_out.bias.detach())


def test_vector_env_update_weights():
    import gymnasium as gym

    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", num_steps=2)
    venv.reset(seed=0)
    state = venv.unwrapped.engine.generator.transformer.state_dict()
    assert venv.update_weights({"proj_out.bias": state["proj_out.bias"] + 1}) == 1
    _, _, _, _, info = venv.step(torch.tensor(venv.default_action).repeat(2, 1))
    assert info["weights_version"].tolist() == [1, 1]


def test_a_trainer_engine_differentiates_replayed_log_probs(make_env):
    env = make_env(num_steps=3)
    _, _, infos = run_episode(env, seed=2)
    trajectory = infos[-1]["trajectory"]
    policy = Cosmos3Generator.embedded(device="cpu")
    policy.transformer.requires_grad_(True)
    engine = env.unwrapped.engine
    trainer = RolloutEngine(policy, 1, num_frames=9, height=32, width=32, fps=24.0, grid=engine.grid)
    with torch.enable_grad():
        log_probs = trainer.replay_log_probs([trajectory])
        log_probs.sum().backward()
    np.testing.assert_allclose(log_probs.detach()[0].numpy(), trajectory.log_probs.numpy(), atol=1e-5)
    assert policy.transformer.proj_out.weight.grad.abs().sum() > 0
