"""Flow-GRPO's update, shared by the examples: group-relative advantages and clipped-ratio
policy-gradient passes over stored trajectories (the trainer's side of the rollout)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..model.model import Cosmos3Model
from ..rollout.streams import LOG_PROB_SUMS
from ..rollout.trajectory import Trajectory
from ..rollout.transition import replay_log_probs


def group_advantages(rewards, group_size: int) -> torch.Tensor:
    """``[B, 1]`` advantages: each reward standardised within its group of ``group_size``
    consecutive envs (the envs that shared a prompt and a conditioning). ``rewards``: ``B`` numbers, a
    tensor or the vector env's numpy rewards."""
    rewards = torch.as_tensor(rewards)
    if group_size < 2 or rewards.numel() % group_size:
        raise ValueError(f"group_size={group_size} with {rewards.numel()} rewards: a group needs 2 or more members "
                         "(advantages are relative within it) and the rewards must split into whole groups")
    groups = rewards.float().view(-1, group_size)
    return ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)).view(-1, 1)


def checked_kl_beta(kl_beta) -> float:
    """``kl_beta`` as a float: a finite number >= 0 (0: no KL penalty); anything else raises."""
    if isinstance(kl_beta, bool) or not isinstance(kl_beta, (int, float)) or not math.isfinite(kl_beta) \
            or kl_beta < 0:
        raise ValueError(f"kl_beta={kl_beta!r} is invalid; use a finite number >= 0 (0: no KL penalty)")
    return float(kl_beta)


def grpo_update(policy: Cosmos3Model, optimizer: torch.optim.Optimizer, trajectories: Sequence[Trajectory],
                advantages: torch.Tensor, clip_range: float = 0.2, epochs: int = 2,
                streams: Sequence[str] | None = None, reference: Cosmos3Model | None = None,
                kl_beta: float = 0.0, micro_batch: int | None = None) -> float:
    """``epochs`` clipped-ratio policy-gradient steps of ``policy`` on ``trajectories``; the first
    ratio is exactly 1 (the replay repeats the rollout). ``streams``: score only these, by their
    exact log-density (the stored per-stream sums; e.g. the 16 action elements of a policy
    rewarded on its actions); default: every stream, by the per-element mean log-prob as
    Flow-GRPO does for images. ``kl_beta`` > 0 adds ``kl_beta`` times GRPO's k3 penalty
    ``exp(d) - d - 1``, ``d = log p_ref - log p_policy``, on the stored transitions, toward
    ``reference`` (a frozen copy of the starting model): non-negative, zero where the policy
    agrees with the reference, and in expectation the KL divergence for transitions the
    current policy sampled (the first epoch's; with the default per-element mean log-probs, a
    scaled one). ``micro_batch``: replay and backpropagate that many trajectories at a time and
    sum their gradients into each step (the same step up to rounding, the first ratio 1 up to
    rounding; autograd then holds one micro-batch's activations, not the whole batch's).
    Returns the last epoch's loss."""
    checked_kl_beta(kl_beta)
    if (kl_beta > 0) != (reference is not None):
        raise ValueError(f"kl_beta={kl_beta!r} with reference={'a model' if reference else None}: give both "
                         "(kl_beta > 0 and the frozen reference model) or neither")
    if reference is policy:
        raise ValueError("reference is the policy itself, so the penalty would always be 0; pass a frozen copy "
                         "(e.g. Cosmos3Model.embedded() or copy.deepcopy(policy) before training)")
    if micro_batch is not None and (isinstance(micro_batch, bool) or not isinstance(micro_batch, int)
                                    or micro_batch < 1):
        raise ValueError(f"micro_batch={micro_batch!r} is invalid; use an int >= 1 (trajectories per replay) "
                         "or None (all at once)")
    trajectories = list(trajectories)
    if streams is None:
        old_log_probs, reduction = torch.stack([t.log_probs for t in trajectories]), "mean"  # [B, N]
    else:
        old_log_probs = torch.stack([sum(getattr(t, LOG_PROB_SUMS[name]) for name in streams) for t in trajectories])
        reduction = "sum"
    advantages = torch.as_tensor(advantages, dtype=torch.float32)
    if tuple(advantages.shape) not in ((len(trajectories),), (len(trajectories), 1)):
        raise ValueError(f"advantages has shape {tuple(advantages.shape)} for {len(trajectories)} trajectories; pass "
                         f"one per trajectory, [{len(trajectories)}] or [{len(trajectories)}, 1] as group_advantages "
                         "gives")
    advantages = advantages.reshape(-1, 1).to(old_log_probs.device)
    if reference is not None:
        with torch.no_grad():
            reference_log_probs = replay_log_probs(reference, trajectories, reduction=reduction, streams=streams,
                                                   micro_batch=micro_batch).cpu()
    size = micro_batch or len(trajectories)
    parts = [slice(start, start + size) for start in range(0, len(trajectories), size)]
    for _ in range(epochs):
        optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        for part in parts:  # each part's share of the mean over every trajectory and step
            with torch.enable_grad():
                new_log_probs = replay_log_probs(policy, trajectories[part], reduction=reduction,
                                                 streams=streams).cpu()
                ratio = torch.exp(new_log_probs - old_log_probs[part])
                clipped = ratio.clamp(1 - clip_range, 1 + clip_range)
                part_loss = -torch.minimum(ratio * advantages[part], clipped * advantages[part]).sum()
                if reference is not None:
                    d = reference_log_probs[part] - new_log_probs
                    part_loss = part_loss + kl_beta * (torch.exp(d) - d - 1).sum()
                part_loss = part_loss / old_log_probs.numel()
            part_loss.backward()
            loss += part_loss.item()
        torch.nn.utils.clip_grad_norm_(policy.transformer.parameters(), 1.0)
        optimizer.step()
    return loss
