"""How well the embedded model imagines the world at 64x64 (the size SB3's CnnPolicy can take) next to 32x32.

    python benchmarks/world_size64.py   # benchmarks/world_size64.txt (a 2-core CPU: ~15 min)

``ProceduralWorld-v0`` is the truth and ``Cosmos3World-v0`` imagines it: both are reset with the
same seeds (env ``i`` of the vector env draws the task that ``ProceduralWorld-v0`` draws with seed
``seed + i``) and stepped with the same action chunks for ``steps`` chunks, the imagined world
feeding its own last frame back in (closed loop, as an agent sees it). Every frame of every chunk
is read with the world's detector (:func:`~cosmos3_gym.rollout.procedural_world.detect`, the
colour-mass centroid the envs' reward reads); the error is the distance between the imagined and the
true centroid, in pixels and as a fraction of the frame's width, over the frames where both
episodes still run. A frame where the detector finds no object counts as an infinite error (the
median stays finite while fewer than half are lost). Success is each world's own: the episode
terminated (the detector puts the object within ``SUCCESS_RADIUS`` of the goal) within ``steps``
chunks.

Two kinds of chunks: ``random`` (a random heading that turns once mid-chunk, with noise: the
action world's dynamics data, :func:`~cosmos3_gym.rollout.procedural_world.action_chunks`) and
``expert`` (toward the goal from the true world's current position, with noise; the true world
succeeds almost always, so the imagined success rate says whether imagination agrees).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tqdm import tqdm

import cosmos3_gym  # noqa: F401  (registers ProceduralWorld-v0)
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.rollout.procedural_world import GOALS, MAX_SPEED, action_chunks, detect
from cosmos3_gym.train.args import parse_args, require_at_least
from cosmos3_gym.world.envs import CHUNK, Cosmos3WorldVectorEnv

POLICIES = ("random", "expert")


@dataclass
class WorldSizeArgs:
    episodes: int = 16
    steps: int = 4  # action chunks per episode (the horizon is 8)
    sizes: str = "32,64"  # comma-separated frame sizes
    num_steps: str = "4,8"  # comma-separated denoising steps per imagined chunk (8: Cosmos3World-v0's default)
    policies: str = "random,expert"  # comma-separated, of POLICIES
    seed: int = 0  # reset seeds seed .. seed + episodes - 1 (both worlds)
    action_seed: int = 1  # the random chunks and the expert's noise
    out: str = "benchmarks/world_size64.txt"  # "" prints only

    def __post_init__(self):
        require_at_least(self, episodes=1, steps=1)
        unknown = set(self.policies.split(",")) - set(POLICIES)
        if unknown:
            raise ValueError(f"--policies {self.policies}: unknown {sorted(unknown)}; choose from {list(POLICIES)}")


def random_chunks(args: WorldSizeArgs) -> np.ndarray:
    """``[steps, episodes, chunk, 2]`` random commands, the same for every size (drawn at 32x32)."""
    commands = action_chunks(np.random.default_rng(args.action_seed), args.steps * args.episodes, CHUNK)[2]
    return commands.reshape(args.steps, args.episodes, CHUNK, 2)


def expert_chunk(position: tuple[float, float], goal: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """Toward ``goal`` from ``position`` (pixels) at the speed that gets there in one chunk, with noise."""
    heading = (np.array(GOALS[goal]) * size - np.array(position)) / (MAX_SPEED * CHUNK)
    return np.clip(heading + rng.normal(0.0, 0.15, (CHUNK, 2)), -1, 1).astype(np.float32)


def centroid(frame: np.ndarray) -> np.ndarray | None:
    """The detector's object centre in pixels (x, y), or None where it finds no object."""
    found = detect(frame[None])
    return None if found.color is None else np.array(found.position) * frame.shape[1]


def run(model: Cosmos3Model, size: int, num_steps: int, policy: str, args: WorldSizeArgs, bar: tqdm) -> dict:
    """One configuration: per-frame errors (pixels, with the chunk index), each world's successes, seconds."""
    dream = Cosmos3WorldVectorEnv(args.episodes, size=size, num_steps=num_steps, model=model,
                                  autoreset_mode=AutoresetMode.NEXT_STEP)
    truths = [gym.make("ProceduralWorld-v0", size=size) for _ in range(args.episodes)]
    dream.reset(seed=args.seed)
    for i, truth in enumerate(truths):
        truth.reset(seed=args.seed + i)
    chunks = random_chunks(args)
    rng = np.random.default_rng(args.action_seed)
    truth_alive = np.ones(args.episodes, dtype=bool)
    dream_alive = np.ones(args.episodes, dtype=bool)
    truth_success = np.zeros(args.episodes, dtype=bool)
    dream_success = np.zeros(args.episodes, dtype=bool)
    errors, lost, seconds = [], 0, 0.0
    for step in range(args.steps):
        if policy == "random":
            actions = chunks[step]
        else:
            actions = np.stack([expert_chunk(t.unwrapped.position, t.unwrapped.task.goal, size, rng) if alive
                                else np.zeros((CHUNK, 2), np.float32) for t, alive in zip(truths, truth_alive)])
        start = time.perf_counter()
        _, _, terminated, truncated, infos = dream.step(actions)
        seconds += time.perf_counter() - start
        true_frames = [None] * args.episodes
        for i, truth in enumerate(truths):
            if truth_alive[i]:
                _, _, done, cut, info = truth.step(actions[i])
                true_frames[i] = info["frames"]
                truth_success[i] |= done
                truth_alive[i] = not (done or cut)
        for i in range(args.episodes):
            if not dream_alive[i]:
                continue
            if true_frames[i] is not None:  # both episodes ran this chunk
                for imagined, real in zip(infos["frames"][i], true_frames[i]):
                    at, real_at = centroid(imagined), centroid(real)
                    lost += at is None
                    errors.append((step, np.inf if at is None else float(np.hypot(*(at - real_at)))))
            dream_success[i] |= terminated[i]
            dream_alive[i] = not (terminated[i] or truncated[i])
        bar.update(1)
    return {"errors": errors, "lost": lost, "truth_success": truth_success, "dream_success": dream_success,
            "seconds": seconds}


def report(size: int, num_steps: int, policy: str, result: dict, args: WorldSizeArgs) -> list[str]:
    errors = np.array([e for _, e in result["errors"]])
    per_step = [np.median([e for s, e in result["errors"] if s == step]) if any(s == step for s, _ in result["errors"])
                else float("nan") for step in range(args.steps)]
    truth, dream = result["truth_success"], result["dream_success"]
    median = float(np.median(errors))
    return [f"{size:>4} {num_steps:>9} {policy:>7} {median:>9.2f} px {median / size:>8.3f} "
            f"{100 * result['lost'] / len(errors):>5.1f}% {len(errors):>6}   "
            + " ".join(f"{e:5.2f}" for e in per_step)
            + f"   {truth.mean():>5.2f} {dream.mean():>5.2f}   {int((truth & dream).sum()):>2} / "
              f"{int((dream & ~truth).sum()):>2} / {int((truth & ~dream).sum()):>2}   {result['seconds']:>5.0f}"]


def main(argv=None) -> int:
    args = parse_args(WorldSizeArgs, argv, __doc__)
    sizes = [int(s) for s in args.sizes.split(",")]
    num_steps = [int(n) for n in args.num_steps.split(",")]
    policies = args.policies.split(",")
    model = Cosmos3Model.embedded(device="cpu")
    configs = [(s, n, p) for p in policies for s in sizes for n in num_steps]
    lines = [f"# python benchmarks/world_size64.py --episodes {args.episodes} --steps {args.steps} "
             f"--sizes {args.sizes} --num-steps {args.num_steps} --policies {args.policies} --seed {args.seed} "
             f"--action-seed {args.action_seed}",
             f"# the embedded model on a {os.cpu_count()}-core CPU (torch {torch.__version__}, "
             f"{torch.get_num_threads()} thread); Cosmos3World-v0 (guidance 4, noise level 0.7) against "
             "ProceduralWorld-v0, same seeds, same chunks, closed loop",
             "# error: imagined vs true detector centroid over every frame of every chunk while both episodes run "
             "(median; 'lost': frames where the detector finds no object in the imagined frame, counted as infinite)",
             "# per chunk: the median error of chunk 1, 2, ... (drift); success: each world's own, within the "
             "chunks; both / imagined only / true only: episodes",
             "size num_steps commands  median error  /width  lost frames   per chunk"
             + " " * max(0, 6 * args.steps - 9) + "  true  imag   both / imag only / true only   s imagining"]
    with tqdm(total=len(configs) * args.steps, desc="chunks") as bar:
        for size, n, policy in configs:
            bar.set_postfix(size=size, num_steps=n, policy=policy)
            lines += report(size, n, policy, run(model, size, n, policy, args, bar), args)
            tqdm.write(lines[-1])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines.append(f"# 's imagining': wall seconds of Cosmos3World-v0's steps (all envs, all chunks) on a shared "
                 f"machine: load average at the end (1, 5, 15 min) {load} on {os.cpu_count()} cores")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
