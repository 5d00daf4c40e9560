"""Imagined frames per second of ``Cosmos3World-v0``'s vector env on the CPU, at several env counts.

The embedded model at the env's defaults (32x32 frames, chunks of 8, 8 denoising steps, no guidance),
``reset(seed=0)``, one warm-up step, then ``--steps`` timed steps of uniform random commands (seeded).
Prints wall-clock frames/s and frames per CPU-second of this process (the steadier number on a shared
machine). Run it from two checkouts (``PYTHONPATH=<tree>``) one after the other to compare code.

Usage: OMP_NUM_THREADS=1 python benchmarks/world_step_cpu.py [--num-envs 1,4,16] [--steps 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.train.args import comma_separated
from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--num-envs", default="1,4,16", help="env counts, comma-separated")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per env count (>= 1)")
    args = parser.parse_args(argv)
    counts = comma_separated("--num-envs", args.num_envs, int, "integers")
    if args.steps < 1 or min(counts) < 1:
        parser.error(f"--steps {args.steps} --num-envs {args.num_envs}: use integers >= 1")
    model = Cosmos3Model.embedded(device="cpu")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    for n in counts:
        env = Cosmos3WorldVectorEnv(num_envs=n, model=model)
        env.reset(seed=0)
        env.action_space.seed(0)
        env.step(env.action_space.sample())  # warm-up
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            env.step(env.action_space.sample())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        frames = n * env.chunk * args.steps
        print(f"{n:3d} envs: {frames / wall:6.2f} imagined frames/s wall, {frames / cpu:6.2f} per CPU-second "
              f"({wall / args.steps:.2f} s per step)", flush=True)
        env.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
