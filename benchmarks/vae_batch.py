"""The trainer's VAE stage at a larger batch and fewer steps: time against held-out reconstruction.

    python benchmarks/vae_batch.py --device cuda               # benchmarks/vae_batch.txt

The stage is bound by kernel launches (Wan's VAE walks the frames in Python), so a larger batch
costs little more per step; this measures whether the same samples in fewer, larger steps
reconstruct as well. Each configuration trains the untrained VAE of ``build_tiny_components(0)``
and is scored by the MSE of encode-then-decode (the posterior's mode) on 256 held-out videos.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import torch
from diffusers import AutoencoderKLWan

from cosmos3_gym.train.args import parse_args
from cosmos3_gym.bench import sync_device
from cosmos3_gym.model.tiny_model import TINY_CHECKPOINT, build_tiny_components
from cosmos3_gym.train.world_model import NUM_FRAMES, SIZE, TrainArgs, _pixels, train_vae
from cosmos3_gym.rollout.procedural_world import dataset


@dataclass
class VaeArgs:
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    configs: str = "128:500:2e-3,64:1000:1.5e-3"  # batch:steps:lr, separated by commas
    data_workers: int = 6

    def __post_init__(self):
        for config in self.configs.split(","):
            parts = config.split(":")
            if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit() and _is_float(parts[2])):
                raise ValueError(f"--configs {self.configs!r}: {config!r} is not batch:steps:lr, e.g. 128:500:2e-3")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def held_out_mse(vae, videos: torch.Tensor) -> float:
    with torch.no_grad():
        return torch.nn.functional.mse_loss(vae.decode(vae.encode(videos).latent_dist.mode()).sample, videos).item()


def main(argv=None) -> int:
    args = parse_args(VaeArgs, argv, __doc__)
    held = _pixels(dataset(12345, 256, NUM_FRAMES, SIZE)[0], args.device)
    shipped = AutoencoderKLWan.from_pretrained(TINY_CHECKPOINT, subfolder="vae").to(args.device)
    print(f"shipped VAE held-out mse {held_out_mse(shipped, held):.4f}", flush=True)
    for config in args.configs.split(","):
        batch, steps, lr = config.split(":")
        vae = build_tiny_components(0)["vae"].to(args.device)
        run = TrainArgs(device=args.device, vae_steps=int(steps), vae_batch=int(batch), vae_lr=float(lr),
                        data_workers=args.data_workers, log_every=100)
        log: list = []
        sync_device(args.device)
        start = time.perf_counter()
        train_vae(vae, run, log)
        sync_device(args.device)
        print(f"batch {batch} steps {steps} lr {lr}: {time.perf_counter() - start:.1f} s, "
              f"last train mse {log[-1]['mse']:.4f}, held-out mse {held_out_mse(vae, held):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
