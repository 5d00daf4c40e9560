"""Weight updates from a trainer: checked whole, cast, all or nothing; the version lives on the model."""

import copy
from unittest import mock

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import run_episode
from cosmos3_gym.model import weights as weights_module
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.rollout.transition import replay_log_probs


def snapshot(model):
    return {k: v.clone() for k, v in model.transformer.state_dict().items()}


def unchanged(model, before):
    return all(torch.equal(before[k], v) for k, v in model.transformer.state_dict().items())


def sparse_bias():
    return torch.zeros(16).to_sparse()


@pytest.mark.parametrize("bad,match", [
    ({"layers.0.mlp.up_proj.weight_typo": torch.zeros(1)}, "unknown tensor 'layers.0.mlp.up_proj.weight_typo'"),
    ({"proj_out.weight": torch.zeros(3, 3)}, r"'proj_out.weight' has shape \(3, 3\)"),
    ({"proj_out.bias": torch.zeros(16, dtype=torch.int64)}, "'proj_out.bias' has dtype torch.int64; expected a floating"),
    ({"proj_out.bias": [0.0] * 16}, "not a torch.Tensor"),
    ({"proj_out.bias": torch.full((16,), float("nan"))}, "'proj_out.bias' holds NaN or Inf"),
    ({"proj_out.bias": torch.full((16,), 1e39, dtype=torch.float64)}, "'proj_out.bias' holds NaN or Inf"),
    ("sparse", "sparse"),
])
def test_bad_updates_change_nothing(make_env, bad, match):
    env = make_env(num_steps=2)
    model = env.unwrapped.model
    before = snapshot(model)
    bad = {"proj_out.bias": sparse_bias()} if bad == "sparse" else bad
    good = {"proj_in.bias": torch.ones_like(before["proj_in.bias"])}
    with pytest.raises(ValueError, match=match):
        env.unwrapped.update_weights({**good, **bad})  # the good tensor is not applied either
    assert unchanged(model, before) and env.unwrapped.weights_version == 0
    run_episode(env, seed=0)


def test_a_copy_that_fails_midway_restores_the_old_weights(tiny_model):
    model = copy.deepcopy(tiny_model)
    before = snapshot(model)
    staged = {"proj_in.bias": torch.ones_like(before["proj_in.bias"]),
              "proj_out.bias": torch.ones(3)}  # passes no check: copy_ fails on the second tensor
    with mock.patch.object(weights_module, "checked_updates", return_value=staged):
        with pytest.raises(RuntimeError):
            model.update_weights(staged)
    assert unchanged(model, before) and model.weights_version == 0


def test_fp32_trainer_into_a_bf16_rollout_is_cast():
    model = Cosmos3Model.embedded(device="cpu", dtype=torch.bfloat16)
    trainer = Cosmos3Model.embedded(device="cpu", dtype=torch.float32).transformer
    with torch.no_grad():
        trainer.proj_out.bias.add_(0.123)
    assert model.update_weights(trainer.named_parameters()) == 1
    rollout_bias = model.transformer.proj_out.bias
    assert rollout_bias.dtype == torch.bfloat16
    assert torch.equal(rollout_bias, trainer.proj_out.bias.detach().to(torch.bfloat16))


def test_update_from_a_trainer_changes_rollouts_and_bumps_the_version(make_env):
    env = make_env(num_steps=3, device="cpu")  # compared with an fp32 trainer on the CPU
    _, _, infos = run_episode(env, seed=4)
    trainer = Cosmos3Model.embedded(device="cpu").transformer.requires_grad_(True)
    with torch.no_grad():
        trainer.proj_out.bias.add_(0.5)  # what an optimizer step would do
    assert env.unwrapped.update_weights(trainer.named_parameters()) == 1
    _, _, infos_after = run_episode(env, seed=4)
    assert infos_after[0]["weights_version"] == 1 and infos_after[-1]["trajectory"].weights_version == 1
    assert not torch.allclose(infos[-1]["trajectory"].latents[-1], infos_after[-1]["trajectory"].latents[-1])
    torch.testing.assert_close(env.unwrapped.model.transformer.proj_out.bias, trainer.proj_out.bias.detach())


def test_a_mid_episode_update_is_recorded_per_step(make_env):
    env = make_env(num_steps=3)
    env.reset(seed=1)
    env.step(env.unwrapped.default_action)
    bias = env.unwrapped.model.transformer.proj_out.bias
    env.unwrapped.update_weights({"proj_out.bias": bias + 0.1})
    env.step(env.unwrapped.default_action)
    *_, info = env.step(env.unwrapped.default_action)
    assert info["trajectory"].weights_versions.tolist() == [0, 1, 1]


def test_envs_sharing_a_model_agree_on_its_version():
    model = Cosmos3Model.embedded(device="cpu")
    single = gym.make("Cosmos3Rollout-v0", num_steps=2, model=model)
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", num_steps=2,
                        model=model)
    bias = model.transformer.proj_out.bias
    assert single.unwrapped.update_weights({"proj_out.bias": bias + 1}) == 1
    assert venv.weights_version == 1 and model.weights_version == 1
    venv.reset(seed=0)
    _, _, _, _, info = venv.step(np.tile(venv.default_action, (2, 1)))
    assert info["weights_version"].tolist() == [1, 1]


def test_cached_text_keys_are_not_reused_after_an_update(make_env):
    """The text K/V cache is tagged with the weights version: an update mid-episode must be
    seen by the text pathway too (the next step equals a fresh forward with the new weights)."""
    env = make_env(num_steps=3)
    env.reset(seed=2, options={"prompt": "a red ball"})
    env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    k_proj = "layers.0.self_attn.to_k.weight"
    weight = env.unwrapped.model.transformer.state_dict()[k_proj]
    env.unwrapped.update_weights({k_proj: weight * 1.5})
    cached = env.step(env.unwrapped.default_action)[0]["latent"]
    fresh_model = copy.deepcopy(env.unwrapped.model)
    fresh = gym.make("Cosmos3Rollout-v0", num_steps=3, model=fresh_model)
    fresh.reset(seed=0)
    fresh.unwrapped.set_state(state)  # nothing cached in this env: the text stream is recomputed
    np.testing.assert_array_equal(fresh.step(env.unwrapped.default_action)[0]["latent"], cached)


@pytest.mark.parametrize("variant", ["lora", "merged", "dora", "trained_bias"])
def test_peft_adapters_are_merged_as_the_trainer_evaluates_them(tiny_model, variant):
    """The rollout's layer computes what the trainer's peft layer computes, whatever the variant."""
    from peft import LoraConfig, get_peft_model

    model = copy.deepcopy(tiny_model)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["to_q", "add_q_proj", "proj_in"], init_lora_weights=False,
                        use_dora=variant == "dora", bias="lora_only" if variant == "trained_bias" else "none")
    trainer = get_peft_model(copy.deepcopy(tiny_model.transformer), config)
    name = "proj_in" if variant == "trained_bias" else "layers.0.self_attn.add_q_proj"  # proj_in has a bias
    layer = trainer.base_model.model.get_submodule(name)
    if variant == "trained_bias":
        with torch.no_grad():
            layer.base_layer.bias.add_(0.25)
    x = torch.randn(5, layer.in_features)
    with torch.no_grad():
        expected = layer(x)  # the trainer's adapted layer
    if variant == "merged":
        trainer.merge_adapter()
    assert model.update_weights(trainer) == 1
    with torch.no_grad():
        got = model.transformer.get_submodule(name)(x)
        before = tiny_model.transformer.get_submodule(name)(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert not torch.allclose(got, before)


def test_a_bare_injected_adapter_is_refused_with_the_fix(tiny_model):
    from peft import LoraConfig, inject_adapter_in_model

    model = copy.deepcopy(tiny_model)
    trainer = inject_adapter_in_model(LoraConfig(r=4, target_modules=["to_q"]), copy.deepcopy(tiny_model.transformer))
    trainer.peft_config = {}
    with pytest.raises(ValueError, match="peft.get_peft_model"):
        model.update_weights(trainer)
    assert model.weights_version == 0


def test_a_trainer_differentiates_replayed_log_probs_without_an_engine(make_env):
    env = make_env(num_steps=3, device="cpu")  # rolled out in fp32 like the trainer's copy
    _, _, infos = run_episode(env, seed=2)
    trajectory = infos[-1]["trajectory"]
    policy = Cosmos3Model.embedded(device="cpu")
    policy.transformer.requires_grad_(True)
    with torch.enable_grad():
        log_probs = replay_log_probs(policy, [trajectory])
        log_probs.sum().backward()
    np.testing.assert_allclose(log_probs.detach()[0].numpy(), trajectory.log_probs.numpy(), atol=1e-5)
    assert policy.transformer.proj_out.weight.grad.abs().sum() > 0
    # The text pathway gets gradient too (recomputed at every step under autograd).
    assert policy.transformer.layers[0].self_attn.to_k.weight.grad.abs().sum() > 0
