"""Where a world step goes: each phase of ``Cosmos3WorldVectorEnv.step`` timed with the device
synchronised around it. Default: Edge size, random weights (256x256, chunks of 16, 10 steps, CFG 6,
16 envs), the settings of ``cosmos3-gym bench --mode world --model edge``; ``--model tiny`` runs the
embedded model (32x32, chunks of 8) for a quick check on the CPU.
Usage: python benchmarks/profile_world_step.py [--steps 3] [--num-envs 16] [--model edge|tiny]"""
import argparse
import time
from collections import defaultdict

import numpy as np
import torch

from cosmos3_gym.bench import random_model
from cosmos3_gym.model import conditions
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--num-envs", type=int, default=16)
parser.add_argument("--model", choices=["edge", "tiny"], default="edge")
args = parser.parse_args()
cuda = torch.cuda.is_available()
seconds, calls, labels = defaultdict(float), defaultdict(int), []


def synchronize():
    if cuda:
        torch.cuda.synchronize()


def timed(owner, name, label):
    """Replace ``owner.name`` by itself timed, the device synchronised before and after."""
    inner = getattr(owner, name)
    labels.append(label)

    def wrapper(*a, **k):
        synchronize()
        start = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            synchronize()
            seconds[label] += time.perf_counter() - start
            calls[label] += 1
    setattr(owner, name, wrapper)


if args.model == "edge":
    model = random_model("edge", "cuda", torch.bfloat16, action_gen=True)
    settings = dict(chunk=16, size=256, num_steps=10, guidance_scale=6.0)
else:
    model = Cosmos3Model.embedded(device="cuda" if cuda else "cpu")
    settings = dict(chunk=8, size=32, num_steps=8, guidance_scale=1.0)
venv = Cosmos3WorldVectorEnv(args.num_envs, horizon=args.steps + 3, model=model, **settings)
rng = np.random.default_rng(0)
actions = rng.uniform(-1, 1, (args.steps + 1, args.num_envs, settings["chunk"], 2)).astype(np.float32)
venv.reset(seed=0)
venv.step(actions[0])  # warm-up: compiles
timed(model, "encode_action_conditions", "VAE encode of the conditioning frames")
# inside the encode (nested: not added to the phases' sum below)
timed(model, "action_canvases", "  of which: canvases of the frames (pad, to the device)")
timed(conditions.private, "encode_video", "  of which: the VAE's encoder")
timed(model, "_action_condition", "  of which: per-env condition tensors")
timed(venv.engine, "reset_slots", "engine.reset_slots (prompts, conditions, noise)")
timed(venv.engine, "step", "engine.step: forward, CFG and SDE step, every denoising step")
timed(venv.engine, "decode", "VAE decode of the chunks, uint8 to the host")
timed(model.vae, "decode", "  of which: the VAE's decoder")
timed(venv.engine, "trajectory", "engine.trajectory (latents, noises to the host)")
timed(venv, "_score_chunk", "detector and reward per env")
timed(venv, "step", "whole step")
for step_actions in actions[1:]:
    venv.step(step_actions)
device = torch.cuda.get_device_name() if cuda else "CPU"
print(f"device {device}, torch {torch.__version__}, model {args.model}, {settings}, {args.num_envs} envs, "
      f"{args.steps} steps timed")
total = seconds["whole step"]
for label in ["whole step"] + labels[:-1]:  # the phases in the order they were wrapped, nested ones under theirs
    value = seconds[label]
    print(f"{label}: {value / args.steps * 1e3:.1f} ms per step ({calls[label] // args.steps} calls), "
          f"{value / total:.1%} of the step")
accounted = sum(value for label, value in seconds.items() if label != "whole step" and not label.startswith(" "))
print(f"not in the phases above: {(total - accounted) / args.steps * 1e3:.1f} ms per step")
