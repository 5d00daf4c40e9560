"""GRPO on Cosmos 3's own policy mode, rewarded by the true world.

Each iteration draws ``num_groups`` push tasks of the action world; ``group_size`` envs of
``Cosmos3PolicyRollout-v0`` share each task's first frame and instruction and denoise video and
action chunk together. The action chunks are executed in the true world
(:func:`cosmos3_gym.rollout.procedural_world.push`); the reward is the progress toward the goal plus 1 on success.
The rollouts' log-probs (by default the exact log-density of the action chunk) are trained
with Flow-GRPO's clipped ratio (:mod:`cosmos3_gym.train.grpo`), optionally with a KL penalty to the
starting model (``--kl-beta``), and the new weights go back into the env. At these defaults
(64 chunks per iteration, lr 2e-4, 80 iterations) the success rate rose on each of four seeds on an
H200, from 0.08 to 0.73 on average; at lr 5e-5 it reached 0.14, and with 16 chunks per
iteration it barely moves (``benchmarks/policy_grpo.txt``, ``benchmarks/policy_grpo_sweep.py``).

    python examples/policy_grpo.py          # out/policy_grpo.png and .json
    python examples/policy_grpo.py --quick  # 20 iterations: the true-world reward's rise, not yet the success's

Times: ~12 s per iteration on an H200 shared by 12 runs; on a 2-core x86_64 CPU (torch's CPU build,
one thread, two runs side by side) ~35 s per iteration, 47 min for the 80 iterations; ``--quick``
took 14.4 min beside another run on the weights continued once (success 0.035 -> 0.086 and true-world reward
0.154 -> 0.293, first -> last fifth; seed 0). Over the first 20 iterations of the
four H200 runs at these defaults (``benchmarks/policy_grpo_sweep/2-s*``) the mean reward rose on all
four (first -> last fifth: 0.20 -> 0.38, 0.18 -> 0.28, 0.16 -> 0.24, 0.13 -> 0.21) while the success
rate mostly had not yet (0.07-0.11 -> 0.10-0.15; it climbs from iteration ~25). At 10 iterations
the reward need not rise yet.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from tqdm import tqdm

import cosmos3_gym  # noqa: F401  (registers the env ids)
from cosmos3_gym.train.args import apply_quick, parse_args, require_at_least
from cosmos3_gym.train.grpo import checked_kl_beta, group_advantages, grpo_update
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.train.plots import first_and_last, reward_curve
from cosmos3_gym.rollout.procedural_world import draw, push, sample_task, task_reward


@dataclass
class Args:
    num_groups: int = 8  # tasks per iteration (num_groups x group_size envs)
    group_size: int = 8  # envs per task; advantages are relative within a group
    num_steps: int = 4  # denoising steps
    guidance_scale: float = 1.0  # GRPO teaches the conditional model itself (no CFG forward)
    noise_level: float = 0.3  # at 0.7 the sampled noise decides most chunks' outcome and success falls
    iterations: int = 80  # rollout-then-update rounds
    epochs: int = 2  # policy-gradient passes over each batch of trajectories
    learning_rate: float = 2e-4  # Adam's step size
    clip_range: float = 0.2  # PPO's ratio clipping
    streams: str = "action"  # the log-probs trained: "action" (exact log-density of the rewarded actions)
    # or "video,action" (joint, per-element mean, as Flow-GRPO for images: the video's elements dominate)
    kl_beta: float = 0.0  # > 0: penalise the KL divergence to the starting model (a frozen copy)
    micro_batch: int = 16  # rollouts replayed per backward pass (the update's memory; not its result)
    seed: int = 0  # torch's, the tasks' and the first reset's
    device: str = "cuda" if torch.cuda.is_available() else "cpu"  # the rollouts' and the trainer's
    out: str = "out"  # the folder of policy_grpo.png and .json
    quick: bool = False  # --iterations 20 (unless given): the reward's rise, in a quarter of the time
    QUICK: ClassVar[dict] = {"iterations": 20}

    def __post_init__(self):
        if self.quick:
            apply_quick(self, self.QUICK)
        require_at_least(self, num_groups=1, group_size=2, num_steps=1, iterations=1, epochs=1, micro_batch=1)


def true_world_rewards(tasks, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Execute each action chunk from its task's start in the true world; ProceduralWorld-v0's
    reward (progress + success bonus, read from the frames) and success."""
    results = [task_reward(draw(task, task.start), np.stack([draw(task, tuple(c)) for c in push(task, task.start, chunk)]),
                           task.goal) for task, chunk in zip(tasks, actions)]
    return np.array([r for r, _ in results]), np.array([s for _, s in results])


def main(args: Args) -> None:
    checked_kl_beta(args.kl_beta)  # before any rollout
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    num_envs = args.num_groups * args.group_size
    streams = tuple(name.strip() for name in args.streams.split(","))
    if not streams or not set(streams) <= {"video", "action"}:
        raise ValueError(f"--streams {args.streams!r}: choose 'video,action' or 'action'")
    venv = gym.make_vec("Cosmos3PolicyRollout-v0", num_envs=num_envs, vectorization_mode="vector_entry_point",
                        group_size=args.group_size, num_steps=args.num_steps, guidance_scale=args.guidance_scale,
                        noise_level=args.noise_level, reward="none", array_type="torch", device=args.device)
    actions = torch.tensor(venv.default_action, device=args.device).repeat(num_envs, 1)
    # the trainer's copy, fp32 on any device (bf16 weights round most of Adam's small steps away)
    policy = Cosmos3Model.embedded(device=args.device, dtype=torch.float32)
    policy.transformer.requires_grad_(True)
    optimizer = torch.optim.Adam(policy.transformer.parameters(), lr=args.learning_rate)
    reference = Cosmos3Model.embedded(device=args.device, dtype=torch.float32) if args.kl_beta > 0 else None

    rng = np.random.default_rng(args.seed)
    success_rates, mean_rewards = [], []
    for iteration in tqdm(range(args.iterations), desc="policy GRPO"):
        tasks = [sample_task(rng) for _ in range(args.num_groups)]
        venv.reset(seed=args.seed + iteration * num_envs, options={
            "image": np.stack([draw(task, task.start) for task in tasks]), "prompt": [t.prompt for t in tasks]})
        terminated = torch.zeros(num_envs, dtype=torch.bool)
        while not terminated.all():
            _, _, terminated, _, info = venv.step(actions)
        per_env = [task for task in tasks for _ in range(args.group_size)]
        rewards, successes = true_world_rewards(per_env, np.stack(list(info["actions"])))
        success_rates.append(float(successes.mean()))
        mean_rewards.append(float(rewards.mean()))
        (out / "policy_grpo.json").write_text(json.dumps(  # every iteration: a stopped run keeps its record
            {"args": asdict(args), "success_rate": success_rates, "mean_reward": mean_rewards}))
        grpo_update(policy, optimizer, list(info["trajectory"]),
                    group_advantages(torch.from_numpy(rewards), args.group_size), args.clip_range, args.epochs,
                    streams=None if set(streams) == {"video", "action"} else streams, reference=reference,
                    kl_beta=args.kl_beta, micro_batch=args.micro_batch)
        venv.update_weights(policy.transformer.state_dict())

    first, last, window = reward_curve(range(len(success_rates)), success_rates, out / "policy_grpo.png",
                                       title="policy mode in the true world, GRPO",
                                       xlabel="GRPO iteration", ylabel="success rate in the true world",
                                       points="batch", windows=5)
    print(f"success rate over the first {window} iterations: {first:.3f}; over the last {window}: {last:.3f} "
          f"({num_envs} action chunks per iteration, weights_version {venv.weights_version})")
    first_reward, last_reward, _ = first_and_last(mean_rewards, windows=5)
    print(f"mean true-world reward over the first {window} iterations: {first_reward:.3f}; over "
          f"the last {window}: {last_reward:.3f}")
    print(f"wrote {out / 'policy_grpo.png'}")


if __name__ == "__main__":
    main(parse_args(Args, description=__doc__))
