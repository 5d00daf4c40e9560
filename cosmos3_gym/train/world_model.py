"""Train the embedded tiny Cosmos 3 on the procedural world (cosmos3_gym.rollout.procedural_world).

    python -m cosmos3_gym.train.world_model --device cuda --out out/tiny     # from scratch (a GPU, minutes)
    python -m cosmos3_gym.train.world_model --device cpu --vae-steps 100 --steps 200 --out /tmp/tiny
    python -m cosmos3_gym.train.world_model --init-from cosmos3_gym/assets/cosmos3-tiny --vae-steps 0 ...

(the README gives the shipped weights' commands; ``--out`` holding a checkpoint needs ``--overwrite``)

Stage 1 fits the tiny ``AutoencoderKLWan`` (reconstruction + a small KL term) on the world's
scenes and on action clips encoded as the action tasks encode them (a corner of the tier's padded
canvas), and sets its ``latents_mean``/``latents_std`` from the data. Stage 2 fits the tiny
``Cosmos3OmniTransformer`` with the flow-matching objective in exactly the convention
``Cosmos3OmniPipeline`` samples with: ``x_sigma = (1 - sigma) x0 + sigma noise``, target
velocity ``noise - x0``, model time ``1000 sigma``, prompts through the pipeline's own
templates, and the unconditional prompt in place of the caption with ``uncond_prob`` (for
classifier-free guidance). Each batch is one task of ``task_weights``, after the phases of
``curriculum`` (each its own steps and weights: a curriculum within the one run): text-to-video and
text-to-image on the world's scenes, and forward dynamics, inverse dynamics and policy on the
action world (:func:`cosmos3_gym.rollout.procedural_world.push`), packed as ``CosmosActionCondition`` runs are
(the clean frames encoded in the resolution tier's canvas, given elements at timestep 0, the
loss over the generated elements only). In closed loop the world env conditions each chunk after
the first on a frame the model imagined: ``--imagined-conditions`` trains on such conditions too
(:func:`imagined_pool`; ``--imagined-replay`` takes the targets from where that frame shows the object;
``--condition-noise`` is the cheaper stand-in, noise on the true one).
Writes the checkpoint, ``training.json`` (command, seeds, losses) and ``training_curve.png``, and
with ``--checkpoint-steps`` the weights after those transformer steps in ``checkpoint-<step>/``
beside them (to see when a skill came or went).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .args import check_trainer_command, check_trainer_flags, parse_args, require_at_least, require_finite_non_negative
from ..model.model import Cosmos3Model, checked_device, load_component
from ..model.diffusers_private import crop_action_latent, encode_video
from ..model.packing import RowSpec, to_device
from ..model.tasks import ROBOT_TASKS, Task, checked_domain
from ..model.tasks import TASKS as TASK_TABLE
from ..model.tiny_model import TRANSFORMER_CONFIG, VAE_CONFIG, build_tiny_components, save_checkpoint
from ..rollout.procedural_world import ACTION_KINDS, action_chunks, dataset, object_pixels, replay_from

NUM_FRAMES, SIZE, FPS = 9, 32, 24.0
POOL_BATCH = 32  # action-pool chunks played, imagined and encoded together
CONDITION_NOISE_MEANING = ("the largest standard deviation of the noise added to forward dynamics' condition latent; "
                           "0: clean conditions")
TASKS = (Task.T2V, Task.T2I, Task.FORWARD_DYNAMICS, Task.INVERSE_DYNAMICS, Task.POLICY)  # what it trains


@dataclass
class TrainArgs:
    out: str = "out/cosmos3-tiny"  # the checkpoint folder written (diffusers layout, with training.json and its curve)
    overwrite: bool = False  # replace a checkpoint already in --out (the shipped one: cosmos3_gym/assets/cosmos3-tiny)
    device: str = "cuda" if torch.cuda.is_available() else "cpu"  # where it trains (default: cuda if torch sees one)
    data_seed: int = 0  # the world's videos come from np.random.default_rng(data_seed)
    init_seed: int = 0  # the untrained weights (tiny_model.build_tiny_components)
    vae_steps: int = 3000  # VAE steps first (0 with --init-from: keep its VAE; 1-15 s each on 2 CPU cores)
    vae_batch: int = 32  # clips per VAE step
    vae_lr: float = 1e-3  # the VAE's peak learning rate (warm-up, then cosine decay)
    kl_weight: float = 1e-6  # the VAE's KL term
    steps: int = 8000  # transformer steps (fewer if --max-minutes ends the run first)
    batch: int = 64  # rows per transformer step
    lr: float = 5e-4  # the transformer's peak learning rate (warm-up, then cosine decay)
    uncond_prob: float = 0.1  # share of text rows trained without their prompt (for classifier-free guidance)
    # (in closed loop the env conditions the model on its own imagined frames, never on clean ones)
    condition_noise: float = 0.0  # forward dynamics' condition latent + N(0, s^2), s ~ U(0, this) per clip
    # (the object is a few percent of a frame, and where it ends up is what the world's success reads)
    latent_foreground_weight: float = 0.0  # dynamics loss weight 1 + this where a latent element sees the object
    # this share of forward dynamics' batches conditioned on the frame the model itself imagines where the chunk
    # starts (the chunk before it imagined from the true frame under its commands), as Cosmos3World-v0 conditions
    # every chunk after the first; the targets stay the true frames (0: clean conditions only)
    imagined_conditions: float = 0.0  # share of forward dynamics' batches conditioned on the model's own imaginings
    imagined_pool: int = 2048  # chunks of the action mix conditioned so, for those batches
    imagined_steps: int = 8  # the denoising steps of those imaginings (Cosmos3World-v0's default, world-eval's)
    imagined_every: int = 0  # > 0: imagine them again with the weights of every this many steps (0: once, at the start)
    # the true chunk is where the true world has the object, which the imagined frame may not show: a model that
    # learns to reach it learns to correct its own error toward a truth it cannot see (continuation J: it overshot)
    imagined_replay: bool = False  # targets: the chunk's commands replayed from where the imagined frame shows the object
    log_every: int = 50  # steps between the losses kept in <out>/training.json and its curve (the bars show progress)
    max_minutes: float = 0.0  # > 0: end the transformer stage once the whole run has taken this long
    init_from: str = ""  # a checkpoint to continue from (its transformer and VAE; with --vae-steps 0 the VAE is kept)
    task_weights: str = "t2v=1"  # e.g. t2v=3,t2i=1,forward_dynamics=2,inverse_dynamics=1,policy=1
    # phases before task_weights, "steps:weights" joined by "/": e.g. 1500:t2v=4,forward_dynamics=6/600:t2v=1
    # (forward dynamics beside text-to-video first, then text-to-video alone for the motion words)
    curriculum: str = ""  # phases before --task-weights: steps:weights joined by / (see above)
    domain: str = "pusht"  # the Cosmos 3 embodiment of the action tasks
    resolution_tier: int = 256  # the canvas the action tasks' frames are padded into (the envs' tier)
    view_point: str = "ego_view"  # the camera named in the action caption (the presets' default)
    action_pool: int = 16384  # chunks for the dynamics tasks (of --action-mix); half as many expert ones (policy)
    # the dynamics chunks' kinds and weights (procedural_world.ACTION_KINDS): diverse commands, so that the model
    # learns what each command causes (turn=1 alone gave the weights before: imagined success while standing still)
    action_mix: str = "turn=3,uniform=2,zero=1,expert=1,greedy=1,away=1,scaled=1,stop=1"
    data_workers: int = 2  # processes that render the world's videos ahead of the steps (0: in the training loop)
    # action clips per VAE step encoded in the tier's canvas, as the action tasks encode them (0: plain scenes only),
    # on every vae_canvas_every-th step: a canvas clip has 64 times a scene's pixels, and on the H200 the term at
    # every step took the VAE stage from 258 s to about 470 s
    vae_canvas_batch: int = 4  # canvas clips per such step (0: plain scenes only)
    vae_canvas_every: int = 4  # add them on every this-many-th VAE step
    # e.g. 2000,2700: also save the weights after these transformer steps, in <out>/checkpoint-<step>
    # (steps the time budget does not reach are not saved)
    checkpoint_steps: str = ""  # comma-separated transformer steps after which to also save the weights (see above)

    def __post_init__(self):  # before anything loads: a typo fails in a second, not after the VAE stage
        require_at_least(self, data_workers=0, vae_canvas_batch=0, vae_canvas_every=1, imagined_pool=1)
        checked_device(self.device, name="--device", cpu_hint="--device cpu")
        check_trainer_flags(self)
        require_finite_non_negative(self, condition_noise=CONDITION_NOISE_MEANING,
                                    latent_foreground_weight="0: every element weighted alike")
        if self.vae_canvas_batch and 0 < self.vae_steps < self.vae_canvas_every:
            raise ValueError(f"--vae-canvas-every {self.vae_canvas_every} is more than --vae-steps {self.vae_steps}: "
                             f"the canvas term would come at step 0 alone; use at most {self.vae_steps}, or "
                             "--vae-canvas-batch 0 to leave it out")
        parse_task_weights(self.task_weights)
        parse_action_mix(self.action_mix)
        parse_checkpoint_steps(self.checkpoint_steps, self.steps)
        phases = parse_curriculum(self.curriculum)
        if self.latent_foreground_weight and not any(
                Task.FORWARD_DYNAMICS in parse_task_weights(weights)
                for weights in [self.task_weights, *(w for _, w in phases)]):
            raise ValueError(f"--latent-foreground-weight {self.latent_foreground_weight} weighs forward dynamics' "
                             "generated frames, but neither --task-weights nor --curriculum has forward_dynamics; "
                             "add it, or leave the weight at 0")
        check_imagined_conditions(self, [self.task_weights, *(w for _, w in phases)])
        if self.imagined_replay and not self.imagined_conditions:
            raise ValueError("--imagined-replay sets the targets of the imagined conditions, but --imagined-conditions "
                             "is 0; give it a share in (0, 1]")
        phased = sum(steps for steps, _ in phases)
        if phased > self.steps:
            raise ValueError(f"--curriculum {self.curriculum!r} has {phased} steps, more than --steps {self.steps}; "
                             "its phases are part of the run's steps")


def check_imagined_conditions(args, task_weights: list[str]) -> None:
    """The ``--imagined-*`` flags both trainers share, refused before anything loads (``task_weights``: the
    run's task-weight strings, curriculum phases included)."""
    require_at_least(args, imagined_steps=1, imagined_every=0)
    if not 0.0 <= args.imagined_conditions <= 1.0:
        raise ValueError(f"--imagined-conditions {args.imagined_conditions} is not a share in [0, 1]")
    if args.imagined_conditions and not args.init_from:
        raise ValueError("--imagined-conditions conditions on the model's own imaginings, which untrained weights "
                         "do not have yet; continue trained ones with --init-from CHECKPOINT")
    if args.imagined_conditions and not any(Task.FORWARD_DYNAMICS in parse_task_weights(w) for w in task_weights):
        raise ValueError(f"--imagined-conditions applies to forward dynamics, which --task-weights "
                         f"{args.task_weights!r} leaves out; add forward_dynamics=W")
    if args.imagined_every and not args.imagined_conditions:
        raise ValueError("--imagined-every refreshes the imagined conditions, but --imagined-conditions is 0; "
                         "give it a share in (0, 1]")
    if args.imagined_every >= max(args.steps, 1):
        raise ValueError(f"--imagined-every {args.imagined_every} is not below --steps {args.steps}, so the "
                         "conditions would be imagined once, at the start; use 0 for that, or fewer steps")


def with_imagined(pools: dict, imagined, task: str, share: float, rng: np.random.Generator) -> dict:
    """``pools`` with forward dynamics' chunks drawn from ``imagined`` (a pool conditioned on the model's own
    imaginings) for ``share`` of its batches; ``rng`` is drawn from only then, so that a run without them
    draws what it drew before they existed."""
    if imagined is not None and task == Task.FORWARD_DYNAMICS and rng.random() < share:
        return {**pools, "dynamics": imagined}
    return pools


def _pixels(frames, device) -> torch.Tensor:
    return to_device(torch.as_tensor(frames), device).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0  # [B, 3, F, H, W]


class SceneBatches(torch.utils.data.Dataset):
    """The world's videos of ``seeds`` (one batch of ``count`` per seed) with their video and image
    captions. The world renders in numpy on the CPU, about a quarter of a text-to-video step on
    the H200; :func:`scene_batches` renders the next batches in worker processes meanwhile."""

    def __init__(self, seeds: list[int], count: int):
        self.seeds, self.count = seeds, count

    def __len__(self) -> int:
        return len(self.seeds)

    def __getitem__(self, index: int) -> tuple[np.ndarray, list[str], list[str]]:
        frames, scenes = dataset(self.seeds[index], self.count, NUM_FRAMES, SIZE)
        return frames, [s.caption for s in scenes], [s.image_caption for s in scenes]


def scene_batches(seeds: list[int], count: int, workers: int):
    """The batches of :class:`SceneBatches` in order, ``workers`` processes rendering ahead (0: here)."""
    if not seeds:  # no worker processes for a stage without text batches
        return iter(())
    return iter(torch.utils.data.DataLoader(SceneBatches(seeds, count), batch_size=None, num_workers=workers,
                                            prefetch_factor=4 if workers else None))


def noisy_conditions(video: torch.Tensor, given_latents: int, scale: float, rng: np.random.Generator) -> torch.Tensor:
    """``video`` with Gaussian noise of standard deviation ``s ~ U(0, scale)`` (one per clip) added to its
    first ``given_latents`` latent frames, the clean condition: in closed loop the world env conditions
    the model on the frame it imagined last, so a model trained on clean conditions alone meets
    inputs it never saw and drifts (the noise-augmented context of GameNGen and DIAMOND). The frames it
    generates, the loss's targets, are left as they are."""
    levels = torch.from_numpy(rng.uniform(0.0, scale, len(video))).to(video.device, video.dtype)
    # drawn where the batch lives, from a generator seeded by ``rng``: with a million drawn on the host per
    # batch, an H100 run made 4.4 steps/s where the same run without the noise made 7.8
    generator = torch.Generator(video.device).manual_seed(int(rng.integers(2**63)))
    noise = torch.randn(video[:, :, :given_latents].shape, generator=generator, device=video.device,
                        dtype=video.dtype)
    noisy = video.clone()
    noisy[:, :, :given_latents] += levels.view(-1, 1, 1, 1, 1) * noise
    return noisy


def _lr(step: int, total: int, peak: float, warmup: int = 200) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _fused(device) -> bool:
    """AdamW as one kernel for all parameters where torch has it (CUDA): the trainer is bound by launches."""
    return torch.device(device).type == "cuda"


def _update(optimizer, loss, parameters, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, 1.0)
    optimizer.step()


def canvas_reconstruction(model: Cosmos3Model, clips: np.ndarray, resolution_tier: int
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The VAE's reconstruction of uint8 ``clips`` along the action tasks' path (padded into the
    tier's canvas, encoded, the latent cropped back to the content, decoded) against the clips
    in [-1, 1], and the posterior's KL. The VAE sees a 32x32 scene as a corner of a 256x256
    canvas there; trained on plain scenes alone, it may draw the object in another colour."""
    vae, pipe = model.vae, model.pipeline
    canvas, content = model.action_canvases(clips, resolution_tier, clips.shape[1])
    posterior = vae.encode(canvas).latent_dist
    recon = vae.decode(crop_action_latent(pipe, posterior.sample(), content)).sample
    return recon, _pixels(clips, recon.device), posterior.kl().mean()


def train_vae(model: Cosmos3Model, args: TrainArgs, log: list) -> None:
    """Reconstruction + a small KL term on the world's scenes and, ``vae_canvas_batch`` every
    ``vae_canvas_every``-th step, on action clips encoded as the action tasks encode them
    (:func:`canvas_reconstruction`)."""
    from tqdm import tqdm

    vae = model.vae
    vae.train().requires_grad_(True)
    optimizer = torch.optim.AdamW(vae.parameters(), lr=args.vae_lr, weight_decay=0.0, fused=_fused(args.device))
    batches = scene_batches([args.data_seed * 1_000_003 + step for step in range(args.vae_steps)], args.vae_batch,
                            args.data_workers)
    clips_rng = np.random.default_rng(args.data_seed * 1_000_003 + 5 * 10**6)
    for step in tqdm(range(args.vae_steps), desc="vae"):
        video = _pixels(next(batches)[0], args.device)
        posterior = vae.encode(video).latent_dist
        recon = vae.decode(posterior.sample()).sample
        mse = torch.nn.functional.mse_loss(recon, video)
        loss = mse + args.kl_weight * posterior.kl().mean()
        record = {"stage": "vae", "step": step, "mse": mse}
        if args.vae_canvas_batch and step % args.vae_canvas_every == 0:
            clips = action_chunks(clips_rng, args.vae_canvas_batch, NUM_FRAMES - 1)[1]
            canvas_recon, target, kl = canvas_reconstruction(model, clips, args.resolution_tier)
            record["canvas_mse"] = torch.nn.functional.mse_loss(canvas_recon, target)
            loss = loss + record["canvas_mse"] + args.kl_weight * kl
        _update(optimizer, loss, vae.parameters(), _lr(step, args.vae_steps, args.vae_lr))
        if step % args.log_every == 0 or step == args.vae_steps - 1:
            log.append({key: value.item() if torch.is_tensor(value) else value for key, value in record.items()})
    vae.eval().requires_grad_(False)
    with torch.no_grad():  # latent statistics, so that the transformer sees unit-scale latents
        video = _pixels(dataset(args.data_seed * 1_000_003 + 10**6, 512, NUM_FRAMES, SIZE)[0], args.device)
        mu = vae.encode(video).latent_dist.mode()
        mean, std = mu.mean(dim=(0, 2, 3, 4)), mu.std(dim=(0, 2, 3, 4))
    vae.register_to_config(latents_mean=mean.tolist(), latents_std=std.tolist())


def _parse_weights(spec: str, names, what: str, where: str) -> dict[str, float]:
    weights = {}
    for item in spec.split(","):
        name, _, value = item.partition("=")
        if name not in names or not value.replace(".", "", 1).isdigit() or float(value) <= 0:
            raise ValueError(f"{where}: {item!r} is not {what}=weight with a weight > 0 "
                             f"and a {what} of {[str(n) for n in names]}")
        weights[name] = float(value)
    return weights


def parse_task_weights(spec: str, where: str = "") -> dict[str, float]:
    """``"t2v=4,policy=2"`` as ``{"t2v": 4.0, "policy": 2.0}``; ``where`` names the argument in errors."""
    return _parse_weights(spec, TASKS, "task", where or f"task_weights={spec!r}")


def parse_action_mix(spec: str) -> dict[str, float]:
    """``"turn=3,zero=1"`` as ``{"turn": 3.0, "zero": 1.0}``, each a kind of ``procedural_world.ACTION_KINDS``."""
    return _parse_weights(spec, ACTION_KINDS, "kind", f"--action-mix {spec!r}")


def parse_curriculum(spec: str) -> list[tuple[int, str]]:
    """``"1500:t2v=4,forward_dynamics=6/600:t2v=1"`` as ``[(1500, "t2v=4,..."), (600, "t2v=1")]``."""
    phases = []
    for phase in spec.split("/") if spec else []:
        steps, _, weights = phase.partition(":")
        if not steps.isdigit() or int(steps) < 1 or not weights:
            raise ValueError(f"curriculum={spec!r}: {phase!r} is not steps:weights with steps >= 1 "
                             "(e.g. 1500:t2v=4,forward_dynamics=6/600:t2v=1)")
        parse_task_weights(weights, f"curriculum={spec!r}, phase {phase!r}")
        phases.append((int(steps), weights))
    return phases


def parse_checkpoint_steps(spec: str, steps: int) -> set[int]:
    """``"2000,2700"`` as ``{2000, 2700}``, each a step count of the run (1 to ``steps``)."""
    counts = set()
    for item in spec.split(",") if spec else []:
        if not item.strip().isdigit() or not 1 <= int(item) <= steps:
            raise ValueError(f"--checkpoint-steps {spec!r}: {item!r} is not a step count from 1 to --steps {steps} "
                             "(e.g. 2000,2700: the weights after 2000 and after 2700 transformer steps)")
        counts.add(int(item))
    return counts


def draw_tasks(spec: str, count: int, rng: np.random.Generator) -> list[str]:
    """``count`` tasks drawn independently from the task weights ``spec`` (``"t2v=4,policy=2"``)."""
    weights = parse_task_weights(spec)
    names, p = list(weights), np.array(list(weights.values())) / sum(weights.values())
    return [names[i] for i in rng.choice(len(names), size=count, p=p)]


def task_schedule(args: TrainArgs, rng: np.random.Generator) -> list[str]:
    """The task of every transformer step, drawn up front so that text batches render ahead: each
    phase of ``curriculum`` in turn from its own weights, the remaining steps from ``task_weights``."""
    phases = parse_curriculum(args.curriculum)
    schedule = [task for steps, weights in phases for task in draw_tasks(weights, steps, rng)]
    return schedule + draw_tasks(args.task_weights, args.steps - len(schedule), rng)


def latent_cells(model: Cosmos3Model, mask: torch.Tensor) -> torch.Tensor:
    """A pixel mask ``[B, 1, F, H, W]`` (1.0 marked) at the latent grid ``[B, 1, T, h, w]``: an element is
    marked where any pixel of its frames (the first alone, then groups of the VAE's temporal
    compression: it is causal) and of its spatial cell is; where a loss weights what the mask marks."""
    batch, _, frames, height, width = mask.shape
    step, cell = model.temporal_compression, model.spatial_compression
    later = mask[:, :, 1:].reshape(batch, 1, (frames - 1) // step, step, height, width).amax(dim=3)
    return torch.nn.functional.max_pool3d(torch.cat([mask[:, :, :1], later], dim=2), kernel_size=(1, cell, cell))


@dataclass
class ActionPool:
    """Played-out chunks of the action world, encoded once with
    :meth:`~cosmos3_gym.model.model.Cosmos3Model.encode_action_clips`, as the envs encode their
    conditions (the VAE is causal, so latent frame 0 is also the policy / forward-dynamics
    condition). The canvas encode is most of an action batch's cost; the pool pays it once."""

    prompts: list[str]
    latents: torch.Tensor  # [N, C, T, h, w]
    commands: torch.Tensor  # [N, chunk, 2]
    weights: torch.Tensor | None = None  # [N, 1, T, h, w]: each latent element's weight in the loss (None: all 1)

    @classmethod
    @torch.no_grad()
    def build(cls, model: Cosmos3Model, count: int, mix: dict[str, float], seed: int, tier: int, device,
              foreground_weight: float = 0.0, imagine=None, replay: bool = False) -> "ActionPool":
        """``count`` chunks, each of a kind drawn from ``mix`` (kind -> weight); with
        ``foreground_weight``, the loss weights ``1 + foreground_weight`` on the latent elements that see
        the object (:func:`latent_cells` of :func:`~cosmos3_gym.rollout.procedural_world.object_pixels`).

        With ``imagine(frames, commands, prompts, rng)`` (:func:`world_imaginer`), each task is played for
        two chunks of its kind; the first is imagined from the true start, and the pool holds the second,
        conditioned on the encode of that imagined last frame (what the world env feeds the model after its
        first step), its targets, commands and weights the true ones; with ``replay``, its targets and weights
        are the commands replayed from where the imagined frame shows the object (:func:`replay_from`; the true
        ones where it shows none)."""
        from tqdm import tqdm

        rng, chunk = np.random.default_rng(seed), NUM_FRAMES - 1
        prompts, latents, commands, weights = [], [], [], []
        desc = f"{'imagined ' if imagine else ''}action pool {','.join(mix)}"
        for start in tqdm(range(0, count, POOL_BATCH), desc=desc):
            tasks, frames, moves = action_chunks(rng, min(POOL_BATCH, count - start), chunk * (2 if imagine else 1),
                                                 mix=mix)
            if imagine:
                imagined = imagine(frames[:, 0], moves[:, :chunk], [task.prompt for task in tasks], rng)
                frames, moves = frames[:, chunk:], moves[:, chunk:]
                if replay:
                    replayed = [replay_from(last, task, move, SIZE) for last, task, move in
                                zip(imagined[:, -1], tasks, moves)]
                    frames = np.stack([true if again is None else again for again, true in zip(replayed, frames)])
            latent = model.encode_action_clips(frames, tier, NUM_FRAMES)
            if imagine:
                latent[:, :, :1] = model.encode_action_clips(imagined[:, -1:], tier, NUM_FRAMES, given=1)
            latents.append(latent)
            prompts += [task.prompt for task in tasks]
            commands.append(torch.from_numpy(moves))
            if foreground_weight:
                mask = torch.from_numpy(object_pixels(frames)).float().unsqueeze(1)  # [B, 1, F, H, W]
                weights.append(1.0 + foreground_weight * latent_cells(model, mask))
        latents = torch.cat(latents)
        return cls(prompts, latents, torch.cat(commands).to(device),
                   torch.cat(weights).to(latents.device) if weights else None)

    def take(self, index: np.ndarray) -> "ActionPool":
        """The chunks at ``index`` (host integers; repeats allowed), every field alike."""
        on_device = to_device(torch.from_numpy(index), self.latents.device)
        return ActionPool([self.prompts[i] for i in index], self.latents[on_device], self.commands[on_device],
                          None if self.weights is None else self.weights[on_device])


@torch.no_grad()
def training_batch(model: Cosmos3Model, task: str, args: TrainArgs, scenes, rng: np.random.Generator,
                   tokens: dict, pools: dict[str, ActionPool]
                   ) -> tuple[list[RowSpec], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One batch of ``task``: its rows, the clean latents ``x0`` per stream and, per stream, the
    mask of the elements the model generates (the loss's elements; the rest stays at ``x0``): where
    the pool has ``weights``, the video's mask holds the generated elements' weights instead of True.
    Text tasks take their videos from ``scenes`` (an item of :class:`SceneBatches`), action tasks
    draw from ``pools`` (``"expert"`` for the policy, ``"dynamics"`` for forward and inverse dynamics)."""
    chunk = NUM_FRAMES - 1
    action = task in ROBOT_TASKS
    if action:
        pool = pools["expert" if task == Task.POLICY else "dynamics"]
        drawn = pool.take(rng.integers(0, len(pool.prompts), args.batch))
        video, commands, weights, prompts = drawn.latents, drawn.commands, drawn.weights, drawn.prompts
        num_frames = NUM_FRAMES
    else:
        frames, captions, image_captions = scenes
        if task == Task.T2I:
            frames = frames[:, :1]
        prompts = image_captions if task == Task.T2I else captions
        num_frames = frames.shape[1]
        video = encode_video(model.pipeline, _pixels(frames, args.device))
    given_latents = 0
    if action:  # the clean latent frames: the first (policy, forward dynamics) or all (inverse dynamics)
        given = num_frames if TASK_TABLE[Task(task)].clean_frames == "all" else 1
        given_latents = (given - 1) // model.temporal_compression + 1
    clean_frames = tuple(range(given_latents))
    generated_frames = torch.arange(video.shape[2], device=args.device) >= given_latents
    grid = video.shape[2:]
    height, width = model.action_canvas(SIZE, SIZE, args.resolution_tier) if action else (SIZE, SIZE)
    mode = task if action else None
    domain_id, raw_dim = checked_domain(args.domain, model.transformer.config.action_dim) if action else (0, 0)
    rows = []
    for prompt in prompts:
        key = (prompt, num_frames, mode)
        if key not in tokens:
            tokens[key] = model.tokenize(prompt, "", num_frames, height, width, FPS, action_mode=mode,
                                         view_point=args.view_point)
        cond, uncond = tokens[key]
        ids = tuple(uncond if rng.random() < args.uncond_prob else cond)
        extra = {}
        if action:
            extra = dict(action_len=chunk, clean_actions=tuple(range(chunk)) if TASK_TABLE[Task(task)].robot_chunk == "given" else (),
                         domain_id=domain_id, raw_action_dim=raw_dim)
        rows.append(RowSpec(ids, *grid, FPS, clean_frames, **extra))
    # rows of equal text length next to each other: each such run attends as one batch
    order = sorted(range(len(rows)), key=lambda i: len(rows[i].input_ids))
    rows, order = [rows[i] for i in order], to_device(torch.tensor(order), video.device)
    video = video[order]
    if task == Task.FORWARD_DYNAMICS and args.condition_noise > 0:
        video = noisy_conditions(video, given_latents, args.condition_noise, rng)
    x0 = {"video": video}
    generated = {"video": generated_frames.view(1, 1, -1, 1, 1).expand_as(video)}
    if action and weights is not None:
        generated["video"] = (generated["video"] * weights[order]).expand_as(video)
    if action:
        padded = torch.zeros((args.batch, chunk, model.transformer.config.action_dim), device=args.device)
        padded[:, :, :raw_dim] = commands[order]
        x0["action"] = padded
        mask = torch.zeros_like(padded, dtype=torch.bool)
        if TASK_TABLE[Task(task)].robot_chunk == "generated":
            mask[:, :, :raw_dim] = True
        generated["action"] = mask
    return rows, x0, generated


def flow_matching_loss(model: Cosmos3Model, rows: list[RowSpec], x0: dict[str, torch.Tensor],
                       generated: dict[str, torch.Tensor], noise: dict[str, torch.Tensor],
                       sigma: torch.Tensor) -> torch.Tensor:
    """The rectified-flow loss of one batch, the objective the samplers integrate: each generated
    element at ``(1 - sigma) x0 + sigma noise`` (the rest stays clean), the model's velocity at time
    ``1000 sigma`` against ``noise - x0``, the squared error averaged per stream over its generated
    elements (weighted where ``generated`` holds weights, not booleans) and summed over streams (a
    stream with none adds 0). ``sigma`` (one per row) comes from the host, and the model's timesteps
    are read from it there, not back from the device."""
    on_device = to_device(sigma, x0["video"].device)
    x_sigma = {}
    for name, x in x0.items():
        s = on_device.view(-1, *([1] * (x.ndim - 1)))
        x_sigma[name] = torch.where(generated[name] != 0, (1 - s) * x + s * noise[name], x)
    inputs = {"video": [x.unsqueeze(0) for x in x_sigma["video"]]}
    if "action" in x_sigma:
        inputs["action"] = list(x_sigma["action"])
    velocity = model.forward_rows(model.pack(rows), inputs, (sigma * 1000).tolist())
    loss = 0.0
    for name, x in x0.items():
        predicted = torch.stack([v[name] for v in velocity])
        mask = generated[name].float()
        loss = loss + ((predicted - (noise[name] - x)) ** 2 * mask).sum() / mask.sum().clamp_min(1.0)
    return loss


def schedule_step(step: int, total: int, started: float, deadline: float) -> int:
    """The learning-rate schedule's step: with a time budget the cosine decays on whichever of steps
    and time runs out first."""
    if started >= deadline or math.isinf(deadline):
        return step
    return max(step, int(total * (time.time() - started) / (deadline - started)))


def train_step(model: Cosmos3Model, optimizer, batch, rng: np.random.Generator, lr: float) -> torch.Tensor:
    """One flow-matching step on ``batch`` (:func:`training_batch`'s rows, clean latents and masks) at
    ``lr``; returns the loss."""
    rows, x0, generated = batch
    # sigma from a logit-normal, which weights the middle of the trajectory like SD3 / Cosmos training;
    # drawn on the host (see flow_matching_loss)
    sigma = torch.sigmoid(torch.from_numpy(rng.normal(0.0, 1.0, len(rows))).float())
    noise = {name: torch.randn_like(x) for name, x in x0.items()}
    loss = flow_matching_loss(model, rows, x0, generated, noise, sigma)
    _update(optimizer, loss, model.transformer.parameters(), lr)
    return loss


def train_transformer(model: Cosmos3Model, args: TrainArgs, log: list, deadline: float, save=None) -> None:
    """The transformer stage; ``save(step_count)`` runs after each step count of ``--checkpoint-steps``."""
    from tqdm import tqdm

    transformer = model.transformer
    transformer.train().requires_grad_(True)
    optimizer = torch.optim.AdamW(transformer.parameters(), lr=args.lr, weight_decay=0.01, fused=_fused(args.device))
    tokens: dict = {}
    rng = np.random.default_rng(args.data_seed)
    schedule = task_schedule(args, rng)
    pools = {}
    if {Task.FORWARD_DYNAMICS, Task.INVERSE_DYNAMICS} & set(schedule):
        pools["dynamics"] = ActionPool.build(model, args.action_pool, parse_action_mix(args.action_mix),
                                             args.data_seed * 1_000_003 + 3 * 10**6, args.resolution_tier, args.device,
                                             args.latent_foreground_weight)
    if Task.POLICY in schedule:
        pools["expert"] = ActionPool.build(model, args.action_pool // 2, {"expert": 1.0},
                                           args.data_seed * 1_000_003 + 4 * 10**6, args.resolution_tier, args.device)
    text_steps = [step for step, task in enumerate(schedule) if task in ("t2v", "t2i")]
    batches = scene_batches([args.data_seed * 1_000_003 + 2 * 10**6 + step for step in text_steps], args.batch,
                            args.data_workers)
    checkpoint_steps = parse_checkpoint_steps(args.checkpoint_steps, args.steps)
    imagined = imagined_pool(model, args, log, 0) if args.imagined_conditions else None
    started = time.time()
    for step, task in enumerate(tqdm(schedule, desc="transformer")):
        if args.imagined_every and step and step % args.imagined_every == 0:
            imagined = imagined_pool(model, args, log, step)
        scenes = next(batches) if task in ("t2v", "t2i") else None
        drawn = with_imagined(pools, imagined, task, args.imagined_conditions, rng)
        loss = train_step(model, optimizer, training_batch(model, task, args, scenes, rng, tokens, drawn), rng,
                          _lr(schedule_step(step, args.steps, started, deadline), args.steps, args.lr))
        out_of_time = time.time() > deadline
        if step % args.log_every == 0 or step == args.steps - 1 or out_of_time:
            log.append({"stage": "transformer", "step": step, "task": task, "loss": loss.item()})
        if step + 1 in checkpoint_steps:
            save(step + 1)
        if out_of_time:
            break
    transformer.eval().requires_grad_(False)


@contextlib.contextmanager
def eval_mode(module: torch.nn.Module):
    """``module`` in eval mode meanwhile (imagining mid-training, as the env would), its mode restored after,
    also when the body raises."""
    training = module.training
    module.eval()
    try:
        yield module
    finally:
        module.train(training)


def world_imaginer(model: Cosmos3Model, args: TrainArgs):
    """``imagine(frames, commands, prompts, rng)`` for :meth:`ActionPool.build`: one chunk per frame
    imagined as ``Cosmos3World-v0`` imagines it (its sampler, ``--imagined-steps`` steps, a seed per chunk
    from ``rng``; :meth:`~cosmos3_gym.world.envs.Cosmos3WorldVectorEnv.imagine`), the transformer in eval
    mode meanwhile."""
    from ..world.envs import Cosmos3WorldVectorEnv

    world = Cosmos3WorldVectorEnv(POOL_BATCH, chunk=NUM_FRAMES - 1, size=SIZE, num_steps=args.imagined_steps,
                                  domain=args.domain, model=model)

    def imagine(frames, commands, prompts, rng) -> np.ndarray:
        with eval_mode(model.transformer):
            return world.imagine(frames, commands, rng.integers(0, 2**62, len(frames)).tolist(), prompts)

    return imagine


def imagined_pool(model: Cosmos3Model, args: TrainArgs, log: list, step: int) -> ActionPool:
    """``--imagined-pool`` chunks of ``--action-mix`` conditioned on the model's imaginings with the weights
    of transformer step ``step`` (:meth:`ActionPool.build` with :func:`world_imaginer`), logged."""
    began = time.time()
    pool = ActionPool.build(model, args.imagined_pool, parse_action_mix(args.action_mix),
                            args.data_seed * 1_000_003 + 5 * 10**6 + step, args.resolution_tier, args.device,
                            args.latent_foreground_weight, world_imaginer(model, args), args.imagined_replay)
    log.append({"stage": "imagined conditions", "step": step, "chunks": args.imagined_pool,
                "seconds": round(time.time() - began, 1)})
    return pool


def trainable_model(components: dict, device) -> Cosmos3Model:
    """The tiny components on ``device`` as the trainer runs them: fp32, SDPA, uncompiled."""
    return Cosmos3Model.from_components(components["transformer"], components["vae"].to(device),
                                        components["text_tokenizer"], components["scheduler"], device=device,
                                        dtype=torch.float32, attention="sdpa", compile=False)


def plot_curve(log: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, stage, keys, title in ((axes[0], "vae", ("mse", "canvas_mse"), "VAE reconstruction MSE"),
                                   (axes[1], "transformer", ("loss",), "flow-matching loss")):
        for key in keys:
            points = [(r["step"], r[key]) for r in log if r["stage"] == stage and key in r]
            if points:
                ax.plot(*zip(*points), label={"mse": "scenes", "canvas_mse": "action clips in the canvas"}.get(key))
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize=8)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_record(out: Path, record: dict, device: str, init_from: str) -> None:
    """``training.json`` (``record`` with the device, torch's version and, when ``init_from`` has one,
    the record of the run these weights continue) and ``training_curve.png`` of ``record["log"]``."""
    record.update(device=torch.cuda.get_device_name() if device.startswith("cuda") else device,
                  torch=torch.__version__)
    if init_from and (Path(init_from) / "training.json").exists():
        record["continues"] = json.loads((Path(init_from) / "training.json").read_text())
    (out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    plot_curve(record["log"], out / "training_curve.png")


def _load_weights(components: dict, checkpoint: Path) -> None:
    """The transformer's and the VAE's weights (and the VAE's latent statistics) of ``checkpoint``."""
    from diffusers import AutoencoderKLWan
    from safetensors.torch import load_file

    components["transformer"].load_state_dict(
        load_file(checkpoint / "transformer" / "diffusion_pytorch_model.safetensors"))
    components["vae"] = load_component(AutoencoderKLWan, checkpoint, "vae", torch.float32)  # refused unless it fits


def check_command(args: TrainArgs) -> None:
    """:func:`~cosmos3_gym.train.args.check_trainer_command`, and an ``--init-from`` of other sizes than the
    embedded model's (a PushT checkpoint, say) refused before anything loads, not at its first weight."""
    check_trainer_command(args)
    if not args.init_from:
        return
    init = Path(args.init_from).expanduser()
    sizes = {part: json.loads((init / part / "config.json").read_text()) for part in ("transformer", "vae")}
    ours = {"transformer": TRANSFORMER_CONFIG, "vae": VAE_CONFIG}
    other = {f"{part}.{key}": value for part, config in sizes.items() for key, value in config.items()
             if key in ours[part] and not key.startswith("latents_") and value != ours[part][key]}  # not trained ones
    if other:
        raise ValueError(f"--init-from {args.init_from} is a model of other sizes than the embedded world's ("
                         + ", ".join(f"{key} {value}" for key, value in other.items()) + "); this trainer continues "
                         "checkpoints of its sizes (cosmos3_gym/assets/cosmos3-tiny); a PushT checkpoint continues "
                         "with python -m cosmos3_gym.train_pusht")


def main(argv=None) -> int:
    args = parse_args(TrainArgs, argv, __doc__, prog="python -m cosmos3_gym.train.world_model", check=check_command)
    torch.backends.cuda.matmul.allow_tf32 = True
    start = time.time()
    components = build_tiny_components(args.init_seed)
    if args.init_from:
        _load_weights(components, Path(args.init_from))
    log: list = []
    components["vae"].to(args.device)
    if args.vae_steps:
        train_vae(trainable_model(components, args.device), args, log)
    model = trainable_model(components, args.device)  # anew: its pipeline reads the VAE's new latent statistics
    deadline = start + 60 * args.max_minutes if args.max_minutes > 0 else float("inf")
    out = Path(args.out)

    def save(step_count: int) -> None:  # CPU copies: the run goes on with its weights where they are
        copies = {name: copy.deepcopy(components[name]).to("cpu") for name in ("transformer", "vae")}
        save_checkpoint(out / f"checkpoint-{step_count}", {**components, **copies})

    train_transformer(model, args, log, deadline, save)
    for name in ("transformer", "vae"):
        components[name].to("cpu")
    save_checkpoint(out, components)
    record = {"command": "python -m cosmos3_gym.train.world_model " + " ".join(argv or sys.argv[1:]),
              "args": dataclasses.asdict(args), "seconds": round(time.time() - start, 1), "log": log}
    write_record(out, record, args.device, args.init_from)
    print(f"wrote {out} in {record['seconds']} s; last losses: "
          f"{[r for r in log if r['stage'] == 'vae'][-1:]}, {[r for r in log if r['stage'] == 'transformer'][-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
