"""Quickstart: one Cosmos 3 episode, its video and its per-step log-probs.

    python examples/quickstart.py                # out/quickstart.gif, out/quickstart_log_probs.png
    python examples/quickstart.py --gallery 8    # also out/rollouts.gif: one vector-env episode, 8 prompts
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import imageio.v2 as imageio
import matplotlib
import numpy as np
from tqdm import tqdm

import cosmos3_gym  # noqa: F401  (registers the env ids)
from cosmos3_gym.train.args import parse_args, require_at_least

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@dataclass
class Args:
    env_id: str = "Cosmos3Rollout-v0"  # a rollout preset (cosmos3-gym rollout --help lists them)
    prompt: str = "a big red ball slides to the right"  # the episode's (a reset option)
    seed: int = 0  # the reset's: the initial noise and the SDE's
    out: str = "out"  # the folder of the GIFs and the log-prob plot
    gallery: int = 0  # > 0: also render one vector-env episode over this many preset prompts
    scale: int = 6  # pixel upscaling of the written GIFs
    FLAG_ALIASES: ClassVar[dict] = {"env_id": ("--env",)}  # the command line's name for it also works

    def __post_init__(self):
        require_at_least(self, gallery=0, scale=1)


def upscale(frames: np.ndarray, scale: int) -> np.ndarray:
    return frames.repeat(scale, axis=-3).repeat(scale, axis=-2)


def main(args: Args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    env = gym.make(args.env_id)
    obs, info = env.reset(seed=args.seed, options={"prompt": args.prompt})
    steps, terminated = [], False
    for _ in tqdm(range(env.unwrapped.engine.num_steps), desc="denoising"):
        obs, reward, terminated, truncated, step_info = env.step(env.unwrapped.default_action)
        steps.append(step_info)
    assert terminated
    print(f"prompt {args.prompt!r}: reward {reward:.3f}")
    for k, s in enumerate(steps):
        print(f"step {k}: sigma {s['sigma']:.3f} -> {s['sigma_next']:.3f}   log_prob {s['log_prob']:+.4f}")
    imageio.mimwrite(out / "quickstart.gif", list(upscale(step_info["frames"], args.scale)), duration=125, loop=0)

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([s["sigma"] for s in steps], [s["log_prob"] for s in steps], "o-")
    ax.set_xlabel("sigma (noise level at the step's start)")
    ax.set_ylabel("log-prob (mean per element)")
    ax.invert_xaxis()
    ax.set_title(args.prompt, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "quickstart_log_probs.png", dpi=110)

    if args.gallery:
        venv = gym.make_vec(args.env_id, num_envs=args.gallery, vectorization_mode="vector_entry_point")
        prompts = [venv.preset.prompts[i % len(venv.preset.prompts)] for i in range(args.gallery)]
        venv.reset(seed=args.seed, options={"prompt": prompts})
        terminated = np.zeros(args.gallery, dtype=bool)
        while not terminated.all():
            _, rewards, terminated, _, info = venv.step(np.tile(venv.default_action, (args.gallery, 1)))
        videos = upscale(info["frames"], args.scale)  # [B, F, H, W, 3]
        columns = min(4, args.gallery)
        rows = [np.concatenate(list(videos[r:r + columns]), axis=2) for r in range(0, args.gallery, columns)]
        grid = np.concatenate(rows, axis=1)  # [F, rows * H, columns * W, 3]
        imageio.mimwrite(out / "rollouts.gif", list(grid), duration=125, loop=0)
        for prompt, r in zip(prompts, rewards.tolist()):
            print(f"gallery: {prompt!r} reward {r:.3f}")
    written = ["quickstart.gif", "quickstart_log_probs.png"] + (["rollouts.gif"] * bool(args.gallery))
    print("wrote " + ", ".join(str(out / name) for name in written))


if __name__ == "__main__":
    main(parse_args(Args, description=__doc__))
