"""Guidance 1 skips the unconditional rows: half the forward, the conditional velocity, and a
replay that repeats it, also when guidance 1 and other scales alternate within an episode."""

import numpy as np
import pytest
import torch

from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv
from cosmos3_gym.rollout.transition import pack_cfg_rows, replay_log_probs, transition

STEPS = 4


def _rows_per_forward(model):
    counts, forward = [], model.forward_rows

    def counting(packed, latents, timesteps):
        counts.append(len(packed.rows))
        return forward(packed, latents, timesteps)
    return counts, counting


@pytest.fixture(scope="module")
def mixed_episode():
    """Guidance 1 at steps 0 and 2 for every env, other scales at steps 1 and 3."""
    venv = Cosmos3RolloutVectorEnv(3, num_steps=STEPS, reward="none", device="cpu")
    counts, venv.engine.model.forward_rows = _rows_per_forward(venv.engine.model)
    venv.reset(seed=2, options={"prompt": ["a red ball", "a blue square falls", "green"]})
    for k in range(STEPS):
        guidance = [1.0] * 3 if k % 2 == 0 else [3.0, 4.0, 5.0]
        _, _, _, _, info = venv.step(np.array([[g, level] for g, level in zip(guidance, (0.5, 0.6, 0.7))], np.float32))
    del venv.engine.model.forward_rows
    return venv.engine.model, list(info["trajectory"]), counts


def test_guidance_one_runs_the_conditional_rows_only(mixed_episode):
    _, trajectories, counts = mixed_episode
    assert counts == [3, 6, 3, 6]
    assert [float(g) for g in trajectories[1].guidance_scales] == [1.0, 4.0, 1.0, 4.0]


def test_replay_repeats_an_episode_that_mixes_guidance_one_and_cfg(mixed_episode):
    model, trajectories, _ = mixed_episode
    rollout = torch.stack([t.log_probs for t in trajectories])
    assert torch.equal(replay_log_probs(model, trajectories), rollout)


def test_the_conditional_velocity_is_the_guided_one_at_guidance_one(mixed_episode):
    """Second code path: the cond + uncond packing at guidance 1 gives u + (c - u), which is c up to
    float32 rounding; the conditional-only packing gives c itself."""
    model, trajectories, _ = mixed_episode
    from cosmos3_gym.rollout.transition import trajectory_row

    requests = [(t.cond_ids, t.uncond_ids, trajectory_row(model, t)) for t in trajectories]
    x = {"video": torch.stack([t.latents[0] for t in trajectories])}
    args = dict(timesteps=[float(trajectories[0].timesteps[0])] * 3, guidance=torch.ones(3),
                sigma=torch.stack([t.sigmas[0] for t in trajectories]),
                sigma_next=torch.stack([t.sigmas[1] for t in trajectories]), noise_level=torch.full((3,), 0.5),
                sigma_max=torch.stack([t.sigmas[1] for t in trajectories]), kind="sde",
                next_sample={"video": torch.stack([t.latents[1] for t in trajectories])})
    alone = transition(model, pack_cfg_rows(model, requests, unconditional=False), x, **args).velocity["video"]
    both = transition(model, pack_cfg_rows(model, requests), x, **args).velocity["video"]
    conditional = torch.stack([v["video"] for v in model.velocity(
        pack_cfg_rows(model, requests, unconditional=False), {"video": list(x["video"].unsqueeze(1))},
        args["timesteps"])])
    assert torch.equal(alone, conditional)
    assert torch.allclose(both, alone, rtol=0, atol=1e-5 * float(alone.abs().max()))
    with pytest.raises(ValueError, match="without unconditional rows serves guidance 1 only"):
        transition(model, pack_cfg_rows(model, requests, unconditional=False), x,
                   **{**args, "guidance": torch.tensor([1.0, 2.0, 1.0])})


def test_guidance_one_beside_other_scales_is_the_conditional_velocity(mixed_episode):
    """Per env: envs 0 and 2 at guidance 1 next to env 1 at 4 get c exactly from the shared forward,
    not u + (c - u), so their result does not depend on their neighbours' scales."""
    model, trajectories, _ = mixed_episode
    from cosmos3_gym.rollout.transition import trajectory_row

    requests = [(t.cond_ids, t.uncond_ids, trajectory_row(model, t)) for t in trajectories]
    x = {"video": torch.stack([t.latents[1] for t in trajectories])}
    packed = pack_cfg_rows(model, requests)
    guided = transition(model, packed, x, [float(trajectories[0].timesteps[1])] * 3, torch.tensor([1.0, 4.0, 1.0]),
                        torch.stack([t.sigmas[1] for t in trajectories]),
                        torch.stack([t.sigmas[2] for t in trajectories]), torch.full((3,), 0.5),
                        torch.stack([t.sigmas[1] for t in trajectories]), "sde",
                        next_sample={"video": torch.stack([t.latents[2] for t in trajectories])}).velocity["video"]
    rows = list(x["video"].unsqueeze(1)) * 2
    velocities = torch.stack([v["video"] for v in model.velocity(packed, {"video": rows},
                                                                 [float(trajectories[0].timesteps[1])] * 6)])
    cond, uncond = velocities[:3], velocities[3:]
    assert torch.equal(guided[0], cond[0]) and torch.equal(guided[2], cond[2])
    assert torch.equal(guided[1], uncond[1] + 4.0 * (cond[1] - uncond[1]))


def test_an_episode_with_guidance_one_beside_other_scales_replays():
    venv = Cosmos3RolloutVectorEnv(3, num_steps=3, reward="none", device="cpu")
    venv.reset(seed=4, options={"prompt": ["a red ball", "a blue square falls", "green"]})
    for _ in range(3):
        _, _, _, _, info = venv.step(np.array([[1.0, 0.5], [4.0, 0.6], [1.0, 0.7]], np.float32))
    trajectories = list(info["trajectory"])
    rollout = torch.stack([t.log_probs for t in trajectories])
    model = venv.engine.model
    assert torch.equal(replay_log_probs(model, trajectories), rollout)  # env order: the same forwards
    alone = replay_log_probs(model, trajectories, micro_batch=1)  # other packings: rounding only
    assert (torch.exp(alone - rollout) - 1).abs().max() <= 1e-6
