"""How much of a gym-pusht frame survives a PushT VAE alone (no transformer): frames of 24 clips
(random walks, scripted pushes, noisy experts, standing still) encoded and decoded along the env's
path, the agent and the block read from both by pusht_eval's colour masses.

    python benchmarks/pusht_vae_reconstruction.py > benchmarks/pusht_vae_reconstruction.txt   # 2-core CPU, ~1 min
    python benchmarks/pusht_vae_reconstruction.py --checkpoint out/pusht_decoder --picture ""

``--seed``: the clips' data seed; the shipped model was trained on seed 0's clips, so the default
(1) shows it episodes it has not seen.
"""

import argparse

import imageio.v3 as iio
import numpy as np
import torch

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.world.pusht import PUSHT_CHECKPOINT
from cosmos3_gym.world.pusht_data import generate
from cosmos3_gym.world.pusht_eval import agent_position, block_mass_error
from cosmos3_gym.train_pusht import ENV_PRESET

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--checkpoint", default=str(PUSHT_CHECKPOINT), help="a PushT checkpoint (default: the shipped one)")
parser.add_argument("--seed", type=int, default=1, help="the clips' data seed (0: the shipped model's training clips)")
parser.add_argument("--picture", default="docs/pusht_vae_reconstruction.png", help='where the picture goes ("": none)')
args = parser.parse_args()
torch.set_num_threads(1)
model = Cosmos3Model.from_pretrained(args.checkpoint, device="cpu")
clips = generate(24, seed=args.seed, progress=False).frames  # [24, 9, 96, 96, 3]
shown = "the shipped PushT model" if args.checkpoint == str(PUSHT_CHECKPOINT) else args.checkpoint
print(f"checkpoint: {shown}; clips of data seed {args.seed}")
with torch.no_grad():
    latents = model.encode_action_clips(list(clips), ENV_PRESET.resolution_tier, clips.shape[1])
    decoded = model.decode(latents)
print(f"clips {clips.shape}, latents {tuple(latents.shape)} (channels, latent frames, height, width)")
frames = [(c, f) for c in range(len(clips)) for f in range(clips.shape[1])]
seen = [(agent_position(clips[c, f]), agent_position(decoded[c, f])) for c, f in frames]
print(f"agent found: {sum(a is not None for a, _ in seen)} / {len(frames)} original frames, "
      f"{sum(b is not None for _, b in seen)} / {len(frames)} reconstructions")
errors = [np.linalg.norm(a - b) for a, b in seen if a is not None and b is not None]
print(f"agent position error where both show it: median {np.median(errors):.1f}, max {np.max(errors):.1f} "
      f"(gym-pusht canvas units, 512 across)")
print(f"block position error (colour masses, px of the 96x96 frame): median "
      f"{np.median([block_mass_error(decoded[c, f], clips[c, f]) for c, f in frames]):.2f}")
if args.picture:
    rows = [np.concatenate(list(clips[:6, 0]), 1), np.concatenate(list(decoded[:6, 0]), 1)]
    iio.imwrite(args.picture, np.concatenate(rows, 0))
    print(f"wrote {args.picture} (top: gym-pusht frames; bottom: the VAE's reconstructions)")
