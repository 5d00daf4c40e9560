"""Flow-GRPO's update (cosmos3_gym.train.grpo): group advantages, the clipped loss, the KL to a reference."""

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from cosmos3_gym.train.grpo import group_advantages, grpo_update
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.rollout.transition import replay_log_probs
from cosmos3_gym.rollout.procedural_world import draw, sample_task


@pytest.fixture(scope="module")
def rollouts(tiny_model):
    """Four policy-mode trajectories (two tasks, two envs each) sampled by the embedded model."""
    venv = gym.make_vec("Cosmos3PolicyRollout-v0", num_envs=4, vectorization_mode="vector_entry_point", group_size=2,
                        num_steps=2, guidance_scale=1.0, reward="none", array_type="torch", model=tiny_model)
    tasks = [sample_task(np.random.default_rng(s)) for s in (1, 2)]
    venv.reset(seed=0, options={"image": np.stack([draw(t, t.start) for t in tasks]),
                                "prompt": [t.prompt for t in tasks]})
    terminated = torch.zeros(4, dtype=torch.bool)
    while not terminated.all():
        _, _, terminated, _, info = venv.step(torch.tensor(venv.default_action).repeat(4, 1))
    return list(info["trajectory"])


def perturbed(scale: float) -> Cosmos3Model:
    model = Cosmos3Model.embedded(device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.transformer.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    model.transformer.requires_grad_(True)
    return model


def test_group_advantages_are_standardised_within_each_group():
    advantages = group_advantages(torch.tensor([1.0, 3.0, 2.0, 2.0]), group_size=2)
    expected = [-1 / (np.sqrt(2) + 1e-4), 1 / (np.sqrt(2) + 1e-4), 0.0, 0.0]  # unbiased std of (1, 3): sqrt(2)
    np.testing.assert_allclose(advantages.flatten().numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("count, group_size", [(4, 1), (5, 2)])
def test_group_advantages_need_whole_groups_of_two_or_more(count, group_size):
    """A one-member group has no spread to standardise by (its std is NaN): refused, not NaN weights."""
    with pytest.raises(ValueError, match=rf"group_size={group_size} with {count} rewards: a group needs 2 or more"):
        group_advantages(torch.arange(count, dtype=torch.float32), group_size=group_size)


def test_the_kl_term_is_the_k3_estimate_against_the_rolled_out_log_probs(rollouts, tiny_model):
    """The reference is the model that sampled the rollouts, so its log-probs are the ones the
    rollout stored (a second code path: the engine's step); the policy is a perturbed copy."""
    policy = perturbed(1e-3)
    advantages = torch.tensor([[1.0], [-1.0], [0.5], [-0.5]])
    optimizer = torch.optim.SGD(policy.transformer.parameters(), lr=0.0)
    plain = grpo_update(policy, optimizer, rollouts, advantages, epochs=1)
    with_kl = grpo_update(policy, optimizer, rollouts, advantages, epochs=1, reference=tiny_model, kl_beta=0.5)
    with torch.no_grad():
        new = replay_log_probs(policy, rollouts)
    d = torch.stack([t.log_probs for t in rollouts]) - new
    assert (d.abs() > 0).any()  # the perturbation shows in the log-probs
    assert with_kl - plain == pytest.approx(0.5 * float((torch.exp(d) - d - 1).mean()), rel=1e-4, abs=1e-9)
    assert with_kl > plain
    copy = perturbed(0.0)  # the reference's weights, trainable
    optimizer = torch.optim.SGD(copy.transformer.parameters(), lr=0.0)
    same = grpo_update(copy, optimizer, rollouts, advantages, epochs=1, reference=tiny_model, kl_beta=0.5)
    assert same == grpo_update(copy, optimizer, rollouts, advantages, epochs=1)  # the estimate is 0 at d = 0


def test_with_no_advantage_the_kl_term_pulls_the_policy_back_to_the_reference(rollouts, tiny_model):
    policy = perturbed(2e-3)
    reference = torch.stack([t.log_probs for t in rollouts])  # the sampling model's log-probs

    def kl_estimate():
        with torch.no_grad():
            d = reference - replay_log_probs(policy, rollouts)
        return float((torch.exp(d) - d - 1).mean())

    before = kl_estimate()
    optimizer = torch.optim.SGD(policy.transformer.parameters(), lr=1.0)
    grpo_update(policy, optimizer, rollouts, torch.zeros(4, 1), epochs=3, reference=tiny_model, kl_beta=1.0)
    assert before > 0 and kl_estimate() < 0.5 * before


def test_kl_needs_both_a_beta_and_a_reference(rollouts, tiny_model):
    policy = perturbed(0.0)
    optimizer = torch.optim.SGD(policy.transformer.parameters(), lr=0.0)
    for kwargs in ({"kl_beta": 0.1}, {"reference": tiny_model}):
        with pytest.raises(ValueError, match="kl_beta=.*give both"):
            grpo_update(policy, optimizer, rollouts, torch.zeros(4, 1), epochs=1, **kwargs)
    for beta in (-1.0, float("nan"), float("inf"), "0.1", None, True):
        with pytest.raises(ValueError, match=r"kl_beta=.* is invalid; use a finite number >= 0"):
            grpo_update(policy, optimizer, rollouts, torch.zeros(4, 1), epochs=1, reference=tiny_model, kl_beta=beta)
    with pytest.raises(ValueError, match="reference is the policy itself"):
        grpo_update(policy, optimizer, rollouts, torch.zeros(4, 1), epochs=1, reference=policy, kl_beta=0.1)


@pytest.mark.parametrize("streams", [None, ("action",)])
def test_a_micro_batched_update_takes_the_whole_batch_step(rollouts, tiny_model, streams):
    """Micro-batches of 3 and 1 of the 4 rollouts, gradients summed: the gradient, the step and the
    loss of the one whole-batch pass (a second code path), up to the replay's float rounding."""
    advantages = torch.tensor([[1.0], [-1.0], [0.5], [-0.5]])
    results = []
    for micro_batch in (None, 3):
        policy = perturbed(1e-3)
        optimizer = torch.optim.SGD(policy.transformer.parameters(), lr=1e-3)
        loss = grpo_update(policy, optimizer, rollouts, advantages, epochs=1, streams=streams, reference=tiny_model,
                           kl_beta=0.5, micro_batch=micro_batch)
        trained = [p for p in policy.transformer.parameters() if p.grad is not None]  # the rest are unused here
        results.append((loss, [p.grad.clone() for p in trained], [p.detach().clone() for p in trained]))
    (whole_loss, whole_grads, whole_weights), (parts_loss, parts_grads, parts_weights) = results
    assert parts_loss == pytest.approx(whole_loss, abs=1e-6)  # ratios ~1 times advantages ~1: 1e-6 is rounding
    assert len(parts_grads) == len(whole_grads) and sum(float(g.abs().sum()) for g in whole_grads) > 0
    for whole, parts in zip(whole_grads, parts_grads):
        torch.testing.assert_close(parts, whole, rtol=1e-4, atol=1e-7)
    for whole, parts in zip(whole_weights, parts_weights):
        torch.testing.assert_close(parts, whole, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("micro_batch", [0, -2, 1.5, "4", True])
def test_a_bad_micro_batch_is_refused_before_any_step(rollouts, micro_batch):
    policy = perturbed(1e-3)
    before = [p.detach().clone() for p in policy.transformer.parameters()]
    optimizer = torch.optim.SGD(policy.transformer.parameters(), lr=1.0)
    with pytest.raises(ValueError, match=rf"micro_batch={micro_batch!r} is invalid; use an int >= 1"):
        grpo_update(policy, optimizer, rollouts, torch.ones(4, 1), epochs=1, micro_batch=micro_batch)
    assert all(torch.equal(b, p) for b, p in zip(before, policy.transformer.parameters()))


def test_group_advantages_take_the_vector_envs_numpy_rewards():
    rewards = np.array([1.0, 3.0, 2.0, 2.0])
    torch.testing.assert_close(group_advantages(rewards, group_size=2),
                               group_advantages(torch.tensor(rewards), group_size=2))


def test_advantages_are_one_per_trajectory_in_either_shape(rollouts):
    """[B] and [B, 1] take the same step (a [B] vector used to broadcast against the steps instead); another
    count is refused before any step."""
    weights = []
    for advantages in (torch.tensor([[1.0], [-1.0], [0.5], [-0.5]]), np.array([1.0, -1.0, 0.5, -0.5])):
        policy = perturbed(1e-3)
        optimizer = torch.optim.SGD(policy.transformer.parameters(), lr=1e-2)
        grpo_update(policy, optimizer, rollouts, advantages, epochs=1)
        weights.append([p.detach().clone() for p in policy.transformer.parameters()])
    assert any(not torch.equal(a, b) for a, b in zip(weights[0], perturbed(1e-3).transformer.parameters()))
    for a, b in zip(*weights):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    policy = perturbed(1e-3)
    before = [p.detach().clone() for p in policy.transformer.parameters()]
    optimizer = torch.optim.SGD(policy.transformer.parameters(), lr=1.0)
    for advantages in (torch.ones(3, 1), torch.ones(4, 2), torch.ones(1, 1, 4), torch.ones(1, 4), torch.ones(2, 2)):
        with pytest.raises(ValueError, match=re.escape(f"advantages has shape {tuple(advantages.shape)} for 4 "
                                                       "trajectories; pass one per trajectory, [4] or [4, 1]")):
            grpo_update(policy, optimizer, rollouts, advantages, epochs=1)
    assert all(torch.equal(b, p) for b, p in zip(before, policy.transformer.parameters()))
