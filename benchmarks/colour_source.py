"""Where a checkpoint's forward dynamics takes the object's colour from: the given frame or the prompt.

    python benchmarks/colour_source.py --checkpoints cosmos3_gym/assets/cosmos3-tiny,/tmp/ckpt

Forward dynamics is given the first frame, the commands and a prompt that names the object
("move the big red ball to the top left"). Each task is generated under three prompts: the true
one, the same with the colour replaced by the next colour of the world, and the empty prompt (the
deterministic sampler, so the three differ only in the prompt). Each imagined chunk's colour (the
most frequent over its 8 frames, read with the world's detector) is counted as the frame's, the
swapped prompt's or another. A model that copies the frame scores "frame" under every prompt; one
that follows the words moves to "prompt" when they are swapped; one that maps each colour to
another shows the same "other" counts under every prompt.

Copying is itself learned: the VAE is causal, so latent frame 0 encodes the given frame alone and
each later latent frame four frames. The script also prints how far apart the codes of one
picture are when it is held still for a whole clip (latent frame 0 against 1, and 1 against 2).

The transformer can only draw colours its VAE draws. The action tasks encode their clips as a
32x32 corner of the resolution tier's 256x256 canvas (as ``Cosmos3OmniPipeline`` pads them), a VAE
trained on plain scenes alone may redraw them in another colour, and forward dynamics, trained to
match those latents, then draws that colour too. So the script first scores the VAE alone: the
tasks' clips encoded through the canvas and plain, decoded, and the later frames' colour read.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from cosmos3_gym.train.args import parse_args, require_at_least
from cosmos3_gym.evaluate import generations
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.env.presets import load_preset
from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv
from cosmos3_gym.rollout.procedural_world import COLORS, action_chunks, detect

PROMPTS = ("true", "swapped", "empty")


@dataclass
class ColourArgs:
    checkpoints: str = "cosmos3_gym/assets/cosmos3-tiny"  # comma-separated checkpoint folders
    samples: int = 32
    batch: int = 16
    seed: int = 2024  # the action world's tasks (cosmos3-gym evaluate's seed)

    def __post_init__(self):
        require_at_least(self, samples=1, batch=1)


def next_colour(colour: str) -> str:
    names = list(COLORS)
    return names[(names.index(colour) + 1) % len(names)]


def colour_sources(model: Cosmos3Model, args: ColourArgs) -> dict[str, Counter]:
    """Per prompt of :data:`PROMPTS`: how many chunks came out in the frame's colour, the swapped
    prompt's colour (counted under every prompt, so the three are comparable) or another one."""
    venv = Cosmos3RolloutVectorEnv(args.batch, "Cosmos3ForwardDynamicsRollout-v0", model=model,
                                   noise_level=0.0, guidance_scale=1.0)
    tasks, frames, commands = action_chunks(np.random.default_rng(args.seed), args.samples, venv.preset.num_frames - 1)
    prompts = {"true": [t.prompt for t in tasks],
               "swapped": [t.prompt.replace(f" {t.color} ", f" {next_colour(t.color)} ") for t in tasks],
               "empty": [""] * len(tasks)}
    result = {}
    for name in PROMPTS:
        counts = Counter()

        def options(idx: list[int], texts: list[str] = prompts[name]) -> dict:
            return {"prompt": [texts[i] for i in idx], "image": frames[idx, 0], "actions": commands[idx]}

        for idx, info, _ in generations(venv, args.samples, args.seed, options, f"{name} prompt"):
            for j, i in enumerate(idx):
                seen = Counter(detect(frame[None]).color for frame in info["frames"][j][1:]).most_common(1)[0][0]
                counts["frame" if seen == tasks[i].color else "prompt" if seen == next_colour(tasks[i].color)
                       else "other"] += 1
        result[name] = counts
    return result


@torch.no_grad()
def still_clip_codes(model: Cosmos3Model, args: ColourArgs) -> tuple[float, float]:
    """Relative distances between the latent frames of the tasks' first frames each held for a
    whole clip, encoded as forward dynamics encodes its clips: frame 0 against 1, 1 against 2."""
    preset = load_preset("Cosmos3ForwardDynamicsRollout-v0")
    frames = action_chunks(np.random.default_rng(args.seed), args.samples, preset.num_frames - 1)[1]
    still = np.repeat(frames[:, :1], preset.num_frames, axis=1)
    codes = model.encode_action_clips(still, preset.resolution_tier, preset.num_frames)  # [N, C, T, h, w]

    def distance(a: int, b: int) -> float:
        return float((codes[:, :, a] - codes[:, :, b]).norm() / codes[:, :, b].norm())

    return distance(0, 1), distance(1, 2)


@torch.no_grad()
def vae_colours(model: Cosmos3Model, args: ColourArgs) -> dict[str, int]:
    """How many of the tasks' played-out clips the VAE alone redraws in the object's colour (the
    frames after the first), encoded through the action canvas and plain."""
    preset = load_preset("Cosmos3ForwardDynamicsRollout-v0")
    tasks, frames, _ = action_chunks(np.random.default_rng(args.seed), args.samples, preset.num_frames - 1)
    codes = {"canvas": model.encode_action_clips(frames, preset.resolution_tier, preset.num_frames),
             "plain": model.pipeline._encode_video(torch.from_numpy(frames).permute(0, 4, 1, 2, 3) / 127.5 - 1.0)}
    return {name: sum(detect(clip[1:]).color == task.color for task, clip in zip(tasks, model.decode(code)))
            for name, code in codes.items()}


def main(argv=None) -> int:
    args = parse_args(ColourArgs, argv, __doc__)
    print(f"# forward dynamics, {args.samples} tasks of the action world (seed {args.seed}), deterministic sampler: "
          "chunks in the frame's colour / the swapped prompt's colour / another colour")
    for checkpoint in args.checkpoints.split(","):
        model = Cosmos3Model.from_pretrained(checkpoint, device="cpu")
        vae = vae_colours(model, args)
        counts = colour_sources(model, args)
        print(f"{checkpoint}\n  the VAE alone keeps the colour of {vae['canvas']} clips through the action canvas, "
              f"{vae['plain']} plain")
        print("  a still clip's latent frames, relative distance: 0 to 1 %.3f, 1 to 2 %.3f" % still_clip_codes(model, args))
        for name in PROMPTS:
            print(f"  {name:8s} prompt: " + " / ".join(f"{counts[name][k]}" for k in ("frame", "prompt", "other")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
