"""How precise must imagination be for the exploit-rate target? The harness of `cosmos3-gym world-eval`
run against stand-in imagined worlds whose error is known:

* ``noisy twin s``: the true physics, but each chunk's end position is off by Gaussian noise of
  standard deviation ``s`` px per axis (growing linearly over the chunk), and the next chunk starts
  from the noisy position, as an imagination that conditions on its own frames does; the policies
  read the noisy frames.
* ``VAE round trip``: the true physics, each chunk's frames (with the frame before them) encoded and
  decoded by the embedded model's VAE: an estimate of what any transformer over this VAE shows at
  best (its errors do not accumulate here). The clip is encoded as it is, not padded into the 256
  canvas the world env encodes in (that costs 64 times the pixels; the content is the same).

The error column: each chunk's end, the stand-in against the truth, over every chunk the harness runs
(its sensitivity runs under true, shuffled and zero actions too): for a noisy twin the moved centre's
distance from the true one (after the walls), for the VAE the detected centres' (chunks where either
frame shows no object left out).

Usage: python benchmarks/world_eval_error_bound.py [--episodes 48] [--out benchmarks/world_eval_error_bound.txt]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

import cosmos3_gym  # noqa: F401  (registers the envs)
from cosmos3_gym.rollout.procedural_world import SIZES, locate
from cosmos3_gym.world.envs import ProceduralWorldEnv
from cosmos3_gym.world.harness import evaluate_world, key_numbers, scripted_policies


class NoisyTwin(ProceduralWorldEnv):
    """The twin whose every chunk ends ``sigma`` px (per axis, Gaussian) off the truth, and goes on from there."""

    def __init__(self, sigma: float, **kwargs):
        super().__init__(**kwargs)
        self.sigma, self.errors = sigma, []

    def _centres(self, action):
        centres = super()._centres(action)
        offset = self.np_random.normal(0.0, self.sigma, 2)
        half = SIZES[self.task.size]  # the walls stop the object where push stops it
        moved = np.clip(centres + offset * (np.arange(1, len(centres) + 1) / len(centres))[:, None],
                        half + 0.5, self.size - half - 0.5)
        self.errors.append(float(np.hypot(*(moved[-1] - centres[-1]))))
        return moved


class VaeRoundTrip(ProceduralWorldEnv):
    """The twin seen through the VAE: each chunk (after the true frame before it) encoded and decoded."""

    def __init__(self, vae, **kwargs):
        super().__init__(**kwargs)
        self.vae, self.true_frame, self.errors = vae, None, []

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        self.true_frame = obs
        return obs, info

    def _frames(self, centres):
        true = super()._frames(centres)
        clip = np.concatenate([self.true_frame[None], true])
        pixels = torch.from_numpy(clip[None]).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0  # [1, 3, F, H, W]
        with torch.no_grad():
            decoded = self.vae.decode(self.vae.encode(pixels).latent_dist.mode()).sample
        seen = ((decoded.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 4, 1).numpy()[0, 1:]
        a, b = locate(true[-1]), locate(seen[-1])  # the chunk's end, as the noisy twins' errors
        if a is not None and b is not None:
            self.errors.append(float(np.hypot(a[0] - b[0], a[1] - b[1]) * self.size))
        self.true_frame = true[-1]
        return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--sigmas", default="0,0.25,0.5,0.75,1,1.5,2")
    parser.add_argument("--out", default="benchmarks/world_eval_error_bound.txt")
    args = parser.parse_args()
    from diffusers import AutoencoderKLWan

    from cosmos3_gym.model.tiny_model import TINY_CHECKPOINT

    torch.set_num_threads(1)
    truth = gym.make("ProceduralWorld-v0")
    policies = scripted_policies()
    worlds = {f"noisy twin {s}": NoisyTwin(float(s)) for s in args.sigmas.split(",")}
    worlds["VAE round trip"] = VaeRoundTrip(AutoencoderKLWan.from_pretrained(TINY_CHECKPOINT, subfolder="vae").eval())
    lines = [f"# python benchmarks/world_eval_error_bound.py --episodes {args.episodes} --sigmas {args.sigmas}: "
             f"the harness (12 scripted policies x {args.episodes} seeds) against stand-in imagined worlds; "
             f"torch {torch.__version__}, one thread", "",
             "| imagined world | its error per chunk (px, median / 90th pct.) | exploit rate | imagined successes "
             "| sensitivity ratio | Spearman rho (success) | seconds |", "|---|---|---|---|---|---|---|"]
    for name, world in worlds.items():
        started = time.perf_counter()
        record = evaluate_world(world, truth, policies, episodes=args.episodes, progress=False)
        numbers = key_numbers(record)
        errors = np.array(world.errors)
        lines.append(f"| {name} | {np.median(errors):.2f} / {np.percentile(errors, 90):.2f} | "
                     f"{record['exploit']['rate']:.1%} ({record['exploit']['exploits']} / "
                     f"{record['exploit']['imagined_successes']}) | {record['exploit']['imagined_successes']} | "
                     f"{numbers['ratio']:.2f} | {numbers['success']['spearman'] or float('nan'):.2f} | "
                     f"{time.perf_counter() - started:.0f} |")
        print(lines[-1], flush=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
