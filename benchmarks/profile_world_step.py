"""Where a 16-env world step goes at Edge size (256x256, chunks of 16, 10 steps, CFG 6): each phase of
``Cosmos3WorldVectorEnv.step`` timed with the device synchronised around it (NVIDIA H100 run:
profile_world_step.txt). Usage: python benchmarks/profile_world_step.py [--steps 3]"""
import argparse
import time
from collections import defaultdict

import numpy as np
import torch

from cosmos3_gym.bench import random_model
from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--num-envs", type=int, default=16)
args = parser.parse_args()

seconds, calls = defaultdict(float), defaultdict(int)


def timed(owner, name, label):
    """Replace ``owner.name`` by itself timed, the device synchronised before and after."""
    inner = getattr(owner, name)

    def wrapper(*a, **k):
        torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            torch.cuda.synchronize()
            seconds[label] += time.perf_counter() - start
            calls[label] += 1
    setattr(owner, name, wrapper)


model = random_model("edge", "cuda", torch.bfloat16, action_gen=True)
venv = Cosmos3WorldVectorEnv(args.num_envs, chunk=16, size=256, horizon=args.steps + 3, num_steps=10,
                             guidance_scale=6.0, model=model)
rng = np.random.default_rng(0)
actions = rng.uniform(-1, 1, (args.steps + 1, args.num_envs, 16, 2)).astype(np.float32)
venv.reset(seed=0)
venv.step(actions[0])  # warm-up: compiles
timed(model, "encode_action_conditions", "VAE encode of the conditioning frames")
timed(venv.engine, "reset_slots", "engine.reset_slots (prompts, conditions, noise)")
timed(venv.engine, "step", "engine.step: forward, CFG and SDE step, every denoising step")
timed(venv.engine, "decode", "VAE decode of the chunks, uint8 to the host")
timed(venv.engine, "trajectory", "engine.trajectory (latents, noises to the host)")
timed(venv, "_score_chunk", "detector and reward per env")
timed(venv, "step", "whole step")
for step_actions in actions[1:]:
    venv.step(step_actions)
print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.num_envs} envs, {args.steps} steps timed")
total = seconds["whole step"]
for label, value in sorted(seconds.items(), key=lambda item: -item[1]):
    print(f"{label}: {value / args.steps * 1e3:.1f} ms per step ({calls[label] // args.steps} calls), "
          f"{value / total:.1%} of the step")
