"""Train the embedded tiny Cosmos 3 on the procedural world (cosmos3_gym.world).

    python -m cosmos3_gym.train_world_model --device cuda            # the shipped weights (H200, minutes)
    python -m cosmos3_gym.train_world_model --device cpu --vae-steps 100 --steps 200 --out /tmp/tiny

Stage 1 fits the tiny ``AutoencoderKLWan`` (reconstruction + a small KL term) and sets its
``latents_mean``/``latents_std`` from the data. Stage 2 fits the tiny
``Cosmos3OmniTransformer`` with the flow-matching objective in exactly the convention
``Cosmos3OmniPipeline`` samples with: ``x_sigma = (1 - sigma) x0 + sigma noise``, target
velocity ``noise - x0``, model time ``1000 sigma``, prompts through the pipeline's own
templates, and the unconditional prompt in place of the caption with ``uncond_prob`` (for
classifier-free guidance). Writes the checkpoint, ``training.json`` (command, seeds,
losses) and ``training_curve.png``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .args import parse_args
from .model import Cosmos3Model
from .packing import RowSpec
from .tiny_model import TINY_CHECKPOINT, build_tiny_components, save_checkpoint
from .world import dataset

NUM_FRAMES, SIZE, FPS = 9, 32, 24.0


@dataclass
class TrainArgs:
    out: str = str(TINY_CHECKPOINT)
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    data_seed: int = 0  # the world's videos come from np.random.default_rng(data_seed)
    init_seed: int = 0  # the untrained weights (tiny_model.build_tiny_components)
    vae_steps: int = 3000
    vae_batch: int = 32
    vae_lr: float = 1e-3
    kl_weight: float = 1e-6
    steps: int = 8000
    batch: int = 64
    lr: float = 5e-4
    uncond_prob: float = 0.1
    log_every: int = 50
    max_minutes: float = 0.0  # > 0: end the transformer stage early once the whole run has taken this long


def _videos(rng_seed: int, count: int, device) -> tuple[torch.Tensor, list[str]]:
    frames, scenes = dataset(rng_seed, count, NUM_FRAMES, SIZE)
    video = torch.from_numpy(frames).to(device).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0  # [B, 3, F, H, W]
    return video, [scene.caption for scene in scenes]


def _lr(step: int, total: int, peak: float, warmup: int = 200) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _update(optimizer, loss, parameters, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, 1.0)
    optimizer.step()


def train_vae(vae, args: TrainArgs, log: list) -> None:
    from tqdm import tqdm

    vae.train().requires_grad_(True)
    optimizer = torch.optim.AdamW(vae.parameters(), lr=args.vae_lr, weight_decay=0.0)
    for step in tqdm(range(args.vae_steps), desc="vae"):
        video, _ = _videos(args.data_seed * 1_000_003 + step, args.vae_batch, args.device)
        posterior = vae.encode(video).latent_dist
        recon = vae.decode(posterior.sample()).sample
        mse = torch.nn.functional.mse_loss(recon, video)
        loss = mse + args.kl_weight * posterior.kl().mean()
        _update(optimizer, loss, vae.parameters(), _lr(step, args.vae_steps, args.vae_lr))
        if step % args.log_every == 0 or step == args.vae_steps - 1:
            log.append({"stage": "vae", "step": step, "mse": mse.item()})
    vae.eval().requires_grad_(False)
    with torch.no_grad():  # latent statistics, so that the transformer sees unit-scale latents
        video, _ = _videos(args.data_seed * 1_000_003 + 10**6, 512, args.device)
        mu = vae.encode(video).latent_dist.mode()
        mean, std = mu.mean(dim=(0, 2, 3, 4)), mu.std(dim=(0, 2, 3, 4))
    vae.register_to_config(latents_mean=mean.tolist(), latents_std=std.tolist())


def train_transformer(model: Cosmos3Model, args: TrainArgs, log: list, deadline: float) -> None:
    from tqdm import tqdm

    transformer, vae = model.transformer, model.vae
    transformer.train().requires_grad_(True)
    optimizer = torch.optim.AdamW(transformer.parameters(), lr=args.lr, weight_decay=0.01)
    mean = torch.tensor(vae.config.latents_mean, device=args.device).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, device=args.device).view(1, -1, 1, 1, 1)
    tokens: dict[str, tuple[list[int], list[int]]] = {}
    rng = np.random.default_rng(args.data_seed)
    latent_grid = model.latent_shape(NUM_FRAMES, SIZE, SIZE)[1:]
    for step in tqdm(range(args.steps), desc="transformer"):
        video, captions = _videos(args.data_seed * 1_000_003 + 2 * 10**6 + step, args.batch, args.device)
        with torch.no_grad():
            x0 = (vae.encode(video).latent_dist.mode() - mean) / std  # the pipeline's normalisation
        rows = []
        for caption in captions:
            if caption not in tokens:
                tokens[caption] = model.tokenize(caption, "", NUM_FRAMES, SIZE, SIZE, FPS)
            cond, uncond = tokens[caption]
            rows.append(RowSpec(tuple(uncond if rng.random() < args.uncond_prob else cond), *latent_grid, FPS))
        # sigma from a logit-normal, which weights the middle of the trajectory like SD3 / Cosmos training
        sigma = torch.sigmoid(torch.from_numpy(rng.normal(0.0, 1.0, args.batch)).float()).to(args.device)
        noise = torch.randn_like(x0)
        s = sigma.view(-1, 1, 1, 1, 1)
        x_sigma = (1 - s) * x0 + s * noise
        velocity = model.forward_rows(model.pack(rows), {"video": [x.unsqueeze(0) for x in x_sigma]},
                                      (sigma * 1000).tolist())
        loss = torch.nn.functional.mse_loss(torch.stack([v["video"] for v in velocity]), noise - x0)
        _update(optimizer, loss, transformer.parameters(), _lr(step, args.steps, args.lr))
        out_of_time = time.time() > deadline
        if step % args.log_every == 0 or step == args.steps - 1 or out_of_time:
            log.append({"stage": "transformer", "step": step, "loss": loss.item()})
        if out_of_time:
            break
    transformer.eval().requires_grad_(False)


def plot_curve(log: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, stage, key, title in ((axes[0], "vae", "mse", "VAE reconstruction MSE"),
                                  (axes[1], "transformer", "loss", "flow-matching loss")):
        points = [(r["step"], r[key]) for r in log if r["stage"] == stage]
        if points:
            ax.plot(*zip(*points))
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(TrainArgs, argv, __doc__)
    torch.backends.cuda.matmul.allow_tf32 = True
    start = time.time()
    components = build_tiny_components(args.init_seed)
    log: list = []
    components["vae"].to(args.device)
    train_vae(components["vae"], args, log)
    model = Cosmos3Model.from_components(components["transformer"], components["vae"],
                                                 components["text_tokenizer"], components["scheduler"],
                                                 device=args.device, dtype=torch.float32, attention="sdpa",
                                                 compile=False)
    deadline = start + 60 * args.max_minutes if args.max_minutes > 0 else float("inf")
    train_transformer(model, args, log, deadline)
    out = Path(args.out)
    for name in ("transformer", "vae"):
        components[name].to("cpu")
    save_checkpoint(out, components)
    record = {"command": "python -m cosmos3_gym.train_world_model " + " ".join(argv or sys.argv[1:]),
              "args": dataclasses.asdict(args), "seconds": round(time.time() - start, 1),
              "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
              "torch": torch.__version__, "log": log}
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    plot_curve(log, out / "training_curve.png")
    print(f"wrote {out} in {record['seconds']} s; last losses: "
          f"{[r for r in log if r['stage'] == 'vae'][-1]}, {[r for r in log if r['stage'] == 'transformer'][-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
