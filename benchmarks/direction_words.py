"""How much a checkpoint's text-to-video prediction rests on the caption's motion words.

    python benchmarks/direction_words.py --checkpoints cosmos3_gym/assets/cosmos3-tiny,/tmp/ckpt

For one batch of the world's videos, the flow-matching loss at fixed noise levels under three
captions: the true one, the same caption with the opposite direction ("to the left" for "to the
right", "falls" for "rises", "down" for "up") and the empty caption. A model that reads the motion
words predicts worse under the opposite caption; a model that ignores them scores the two alike.
It is a seconds-long check that needs no sampling, where ``cosmos3-gym evaluate`` needs minutes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cosmos3_gym.train.args import parse_args
from cosmos3_gym.model.tiny_model import build_tiny_components
from cosmos3_gym.train.world_model import (SceneBatches, TrainArgs, _load_weights, _pixels, flow_matching_loss,
                                          trainable_model, training_batch)

OPPOSITES = (("to the right", "to the left"), ("rises", "falls"), (" up", " down"))
SIGMAS = (0.3, 0.5, 0.7, 0.85, 0.95)


@dataclass
class DirectionArgs:
    checkpoints: str = "cosmos3_gym/assets/cosmos3-tiny"  # comma-separated checkpoint folders
    samples: int = 64
    data_seed: int = 12345  # the world's videos (not a training seed of the shipped runs)


def opposite(caption: str) -> str:
    for one, other in OPPOSITES:
        if one in caption:
            return caption.replace(one, other)
        if other in caption:
            return caption.replace(other, one)
    raise ValueError(f"caption {caption!r} names no direction of {OPPOSITES}")


@torch.no_grad()
def losses(checkpoint: Path, args: DirectionArgs) -> dict[str, list[float]]:
    components = build_tiny_components(0)
    _load_weights(components, checkpoint)
    model = trainable_model(components, "cpu")
    frames, captions, image_captions = SceneBatches([args.data_seed], args.samples)[0]
    clean = model.pipeline._encode_video(_pixels(frames, "cpu"))  # in caption order
    noise = torch.randn(clean.shape, generator=torch.Generator().manual_seed(1))
    result = {}
    for name, prompts in (("true", captions), ("opposite", [opposite(c) for c in captions]),
                          ("empty", [""] * len(captions))):
        rows, x0, generated = training_batch(model, "t2v", TrainArgs(device="cpu", batch=args.samples,
                                                                     uncond_prob=0.0),
                                             (frames, prompts, image_captions), np.random.default_rng(0), {}, {})
        # the batch's rows are sorted by text length: each video keeps its own noise under every caption
        order = [next(i for i in range(len(clean)) if torch.equal(row, clean[i])) for row in x0["video"]]
        row_noise = {"video": noise[order]}
        result[name] = [float(flow_matching_loss(model, rows, x0, generated, row_noise,
                                                 torch.full((len(rows),), sigma))) for sigma in SIGMAS]
    return result


def main(argv=None) -> int:
    args = parse_args(DirectionArgs, argv, __doc__)
    print(f"# text-to-video loss per noise level, {args.samples} videos of the world (seed {args.data_seed})")
    for checkpoint in args.checkpoints.split(","):
        print(f"{checkpoint}\n  sigma     " + "  ".join(f"{s:6.2f}" for s in SIGMAS))
        for name, values in losses(Path(checkpoint), args).items():
            print(f"  {name:9s} " + "  ".join(f"{v:6.3f}" for v in values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
