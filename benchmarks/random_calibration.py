"""Is the random policy's imagined success within 0.05 of its true success? The harness's 12-36
episodes cannot say: its random policy succeeds by chance in about one episode in eight, so one
episode more or less moves the rate by 0.03-0.08. This runs that one policy (`scripted_policies`'
``random``: uniform commands, the same generator in both worlds) over many reset seeds, in
``Cosmos3World-v0`` at each success margin and in ``ProceduralWorld-v0``, with the exploit replay.

The difference column is paired (the same seeds and commands in both worlds): imagined minus true
success, with a bootstrap interval over the seeds.

Usage: python benchmarks/random_calibration.py --episodes 200 --margins 0,2.5 [--device cpu] [--threads 1]
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import cosmos3_gym  # noqa: F401  (registers the envs)
from cosmos3_gym.rollout.procedural_world import checked_success_margin
from cosmos3_gym.train.args import comma_separated, parse_args, require_at_least


@dataclass
class CalibrationArgs:
    episodes: int = 200  # reset seeds seed .. seed + episodes - 1
    margins: str = "0,2.5"  # Cosmos3World-v0's success_margin values (pixels), comma-separated
    num_steps: int = 8  # denoising steps per imagined chunk (the env's default)
    seed: int = 0  # the first reset seed; also the policy's generators and the bootstrap
    checkpoint: str = ""  # the world model's weights ("": the embedded model)
    device: str = "cpu"  # where the world model runs
    threads: int = 1  # torch threads

    def __post_init__(self):
        require_at_least(self, episodes=2, num_steps=1, threads=1)
        self.margin_list = comma_separated("--margins", self.margins, float, "pixel margins")
        for margin in self.margin_list:  # refused here, before the model loads
            checked_success_margin(margin, name="--margins")


def rate(summary: dict) -> str:
    """A harness summary's success rate with its bootstrap interval."""
    low, high = summary["success_ci"]
    return f"{summary['success']:.3f} [{low:.2f}, {high:.2f}]"


def main(argv=None) -> None:
    args = parse_args(CalibrationArgs, argv, __doc__)
    import torch

    from cosmos3_gym.model.model import Cosmos3Model
    from cosmos3_gym.world.harness import bootstrap_ci, evaluate_policies, scripted_policies

    torch.set_num_threads(args.threads)
    model = (Cosmos3Model.from_pretrained(args.checkpoint, device=args.device) if args.checkpoint
             else Cosmos3Model.embedded(device=args.device))
    truth = gym.make("ProceduralWorld-v0")
    policy = {"random": scripted_policies(chunk=truth.action_space.shape[0])["random"]}
    seeds = list(range(args.seed, args.seed + args.episodes))
    started = time.perf_counter()
    rows = []
    for margin in args.margin_list:
        dream = gym.make("Cosmos3World-v0", num_steps=args.num_steps, model=model, success_margin=margin)
        row = evaluate_policies(dream, truth, policy, seeds, seed=args.seed)["policies"][0]
        true = np.array(row["true"]["successes"], float)
        imagined = np.array(row["imagined"]["successes"], float)
        low, high = bootstrap_ci(imagined - true, seed=args.seed)
        rows.append(f"| {margin:g} | {rate(row['true'])} | {rate(row['imagined'])} "
                    f"| {imagined.mean() - true.mean():+.3f} [{low:+.2f}, {high:+.2f}] "
                    f"| {int(true.sum())} / {int(imagined.sum())} / {int((true * imagined).sum())} "
                    f"| {row['exploits']} / {row['imagined_successes']} |")
        print(rows[-1], flush=True)
    checkpoint = f" --checkpoint {args.checkpoint}" if args.checkpoint else ""
    print(f"\n# python benchmarks/random_calibration.py --episodes {args.episodes} --margins {args.margins} "
          f"--num-steps {args.num_steps} --seed {args.seed}{checkpoint} --device {args.device} --threads {args.threads}; "
          f"{platform.machine()}, torch {torch.__version__}; {time.perf_counter() - started:.0f} s\n")
    print("| margin (px) | true success [95 % CI] | imagined success [95 % CI] | imagined - true, paired [95 % CI] "
          "| successes: true / imagined / both | exploits / imagined successes |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
