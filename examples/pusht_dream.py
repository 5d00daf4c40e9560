"""PushT imagined next to PushT itself: the same actions in gym-pusht and in Cosmos 3's dream of it.

    pip install -e '.[pusht]'
    python examples/pusht_dream.py             # out/pusht_dream.gif, out/pusht_dream.png (half a minute, 2 CPU cores)
    python examples/pusht_dream.py --seed 3 --policy "random walk"

A reference policy (:func:`cosmos3_gym.world.pusht_eval.pusht_policies`) plays gym-pusht
(``PushT-Twin-v0``) closed loop from ``reset(seed)``; its chunks of 8 target positions are then
replayed open loop in ``Cosmos3PushT-v0`` (the shipped PushT model) from the same start. The GIF puts
each real frame beside the imagined one; the plot follows the agent's and the block's imagined-vs-real
error and the goal coverage each world reports. How the policies rank in both worlds, over many
seeds, is ``cosmos3-gym world-eval --world pusht`` (BENCHMARKS.md has its table and figure). An agent
error of 136 px is the frame's diagonal: the imagined frame shows no agent (about half the steps with the
shipped model); from seed 0's start the scripted pusher moves the block out of the goal in gym-pusht too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import imageio.v2 as imageio
import matplotlib
import numpy as np
from tqdm import tqdm

import cosmos3_gym  # noqa: F401  (registers the env ids)
from cosmos3_gym.train.args import parse_args, require_at_least
from cosmos3_gym.world.pusht_coverage import frame_coverage, require_gym_pusht
from cosmos3_gym.model.model import check_checkpoint
from cosmos3_gym.world.pusht_eval import agent_error, block_mass_error, pusht_policies

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@dataclass
class Args:
    seed: int = 0  # gym-pusht's reset seed, in both worlds
    policy: str = "pusher"  # one of pusht_policies(): pusher, pusher noise 20 / 40, slow pusher, random walk, still, away
    chunks: int = 8  # chunks of 8 actions (8 chunks: 64 of gym-pusht's steps)
    num_steps: int = 8  # denoising steps per imagined chunk
    checkpoint: str = ""  # a PushT Cosmos 3 (default: the shipped one)
    device: str = "cpu"  # the world model's (cpu or cuda)
    out: str = "out"  # the folder of pusht_dream.gif and .png
    scale: int = 3  # pixel upscaling of the GIF

    def __post_init__(self):
        require_at_least(self, chunks=1, num_steps=1, scale=1)
        require_gym_pusht("examples/pusht_dream.py")
        names = list(pusht_policies())
        if self.policy not in names:
            raise ValueError(f"--policy {self.policy!r} is not one of {names}")
        if self.checkpoint:  # now, not after the real episode
            try:
                check_checkpoint(self.checkpoint)
            except (FileNotFoundError, ValueError) as error:
                raise ValueError(f"--checkpoint: {error}") from None


def main(args: Args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policy = pusht_policies()[args.policy]

    # 1. the real episode: the policy on gym-pusht's frames
    real = gym.make("PushT-Twin-v0", horizon=args.chunks)
    obs, info = real.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    actions, real_frames, real_coverage = [], [obs], [info["coverage"]]
    for _ in tqdm(range(args.chunks), desc="gym-pusht"):
        actions.append(policy(obs, info, rng))
        obs, _, terminated, _, info = real.step(actions[-1])
        real_frames += list(info["frames"])
        real_coverage += list(info["coverages"])
        if terminated:  # (truncation comes with the last chunk: the loop ends there, its bar full)
            break
    real.close()

    # 2. the same actions imagined
    dream = gym.make("Cosmos3PushT-v0", horizon=args.chunks, num_steps=args.num_steps, device=args.device,
                     **({"checkpoint": args.checkpoint} if args.checkpoint else {}))
    obs, info = dream.reset(seed=args.seed)
    assert np.array_equal(obs, real_frames[0])  # the same start, bit for bit
    dream_frames, dream_coverage = [obs], [frame_coverage(obs)]  # what the dream reads from its pixels
    for chunk in tqdm(actions, desc="imagined"):
        obs, _, terminated, _, info = dream.step(chunk)
        dream_frames += list(info["frames"])
        dream_coverage += list(info["coverages"])
        if terminated:
            break
    dream.close()

    # 3. the GIF (real | imagined) and the errors
    count = min(len(real_frames), len(dream_frames))
    gap = np.full((96, 4, 3), 255, np.uint8)
    frames = [np.concatenate([real_frames[k], gap, dream_frames[k]], axis=1) for k in range(count)]
    frames = [f.repeat(args.scale, axis=0).repeat(args.scale, axis=1) for f in frames]
    imageio.mimwrite(out / "pusht_dream.gif", frames, duration=100, loop=0)
    agent = [agent_error(dream_frames[k], real_frames[k]) for k in range(count)]
    block = [block_mass_error(dream_frames[k], real_frames[k]) for k in range(count)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
    left.plot(agent, label="agent (lost: the diagonal, 136)")
    left.plot(block, label="block")
    left.set(xlabel="gym-pusht step", ylabel="imagined vs real (px of 96)", title=f"{args.policy}, seed {args.seed}")
    left.legend()
    right.plot(real_coverage[:count], label="gym-pusht")
    right.plot(dream_coverage[:count], label="imagined (read from pixels)")
    right.set(xlabel="gym-pusht step", ylabel="goal coverage", ylim=(0, 1))
    right.legend()
    fig.tight_layout()
    fig.savefig(out / "pusht_dream.png", dpi=110)
    print(f"{args.policy}, seed {args.seed}: {count - 1} steps; mean imagined-vs-real error: block "
          f"{np.mean(block[1:]):.1f} px, agent {np.mean(agent[1:]):.1f} px; final coverage real {real_coverage[count - 1]:.3f}, "
          f"imagined {dream_coverage[count - 1]:.3f}; wrote {out / 'pusht_dream.gif'} and {out / 'pusht_dream.png'}")


if __name__ == "__main__":
    main(parse_args(Args, description=__doc__))
