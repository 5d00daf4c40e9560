"""Train a Cosmos 3 world model of PushT, so that ``Cosmos3PushT-v0`` imagines LeRobot's gym-pusht.

    python -m cosmos3_gym.train_pusht --device cuda --max-minutes 8 --out out/pusht
    # a smoke run on a CPU (half a minute; a tiny model that learns nothing):
    python -m cosmos3_gym.train_pusht --device cpu --clips 8 --clips-per-episode 2 --hidden-size 64 --layers 1 \
        --vae-base-dim 4 --vae-steps 5 --vae-batch 2 --steps 5 --batch 2 --data-workers 1 \
        --out /tmp/pusht_smoke --overwrite
    # the clips made once where gym-pusht is installed, the training where the GPU is:
    python -m cosmos3_gym.world.pusht_data --clips 6000 --workers 2 --out out/pusht_clips.npz
    python -m cosmos3_gym.train_pusht --clips-file out/pusht_clips.npz --device cuda --max-minutes 8 --out out/pusht
    # more training for those weights:
    python -m cosmos3_gym.train_pusht --init-from out/pusht --vae-steps 0 --device cuda --out out/pusht2

The clips are gym-pusht played headless (:mod:`cosmos3_gym.world.pusht_data`: random walks, scripted
pushes, noisy experts, standing still), generated here in worker processes or read from a file
that module wrote (a machine without gym-pusht trains on clips made where it is installed). A
share of the episodes is held out. The model is the tiny Cosmos 3 of
:mod:`cosmos3_gym.model.tiny_model` (the real diffusers classes), its transformer widened and
deepened by ``--hidden-size`` and ``--layers`` (96x96 frames are 9 times the tokens of the
procedural world's 32x32), the checkpoint kept to at most :data:`MAX_MEGABYTES`.

Everything the model sees is what ``Cosmos3PushT-v0`` feeds it, read from the env and its preset
rather than restated: the clips padded into the resolution tier's canvas, encoded and cropped as
:meth:`~cosmos3_gym.model.model.Cosmos3Model.encode_action_clips` encodes the env's conditions, the
env's prompt through the pipeline's action caption (its view point, fps and canvas size), the
``pusht`` domain, and gym-pusht's targets in the model's units as :func:`cosmos3_gym.world.pusht.model_actions`
gives them (``--action-frame``: the canvas, or relative to the agent each clip's first frame shows; the
record's ``args.action_frame`` tells the env which). Stage 1 fits the VAE along that path
(:func:`~cosmos3_gym.train.world_model.canvas_reconstruction`) and sets its latent statistics from
the cropped latents; stage 2 fits the transformer with
:mod:`cosmos3_gym.train.world_model`'s flow-matching objective and batches, on forward dynamics (what
the env runs), inverse dynamics and a policy (from the scripted pushes). At each log step the
held-out clips' forward-dynamics loss is measured at fixed noise under their own actions and under
another clip's: a model that uses the actions scores better with its own.

Writes a diffusers-layout checkpoint (``gym.make("Cosmos3PushT-v0", checkpoint=OUT)``),
``training.json`` (command, seeds, data, losses, minutes) and ``training_curve.png``. With
``--max-minutes`` each stage ends on time (the VAE's after ``--vae-share`` of it) and the run still saves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .env.presets import load_preset
from .model.diffusers_private import crop_action_latent
from .model.model import check_checkpoint, checked_device, load_component
from .model.tasks import ROBOT_TASKS, Task
from .model.tiny_model import TRANSFORMER_CONFIG, VAE_CONFIG, build_tiny_components, build_tiny_tokenizer, \
    save_checkpoint, scale_action_heads
from .train.args import check_trainer_command, check_trainer_flags, parse_args, require_at_least, \
    require_finite_non_negative
from .train.world_model import CONDITION_NOISE_MEANING, NUM_FRAMES, ActionPool, _fused, _lr, _update, \
    canvas_reconstruction, check_imagined_conditions, draw_tasks, eval_mode, flow_matching_loss, latent_cells, \
    parse_task_weights, schedule_step, train_step, trainable_model, training_batch, with_imagined, write_record
from .world.pusht import ACTION_FRAMES, CHUNK, PROMPT, Cosmos3PushTVectorEnv, checkpoint_action_frame, frame_actions
from .world.pusht_coverage import SIZE
from .world.pusht_data import DEFAULT_MIX, KINDS, Clips, generate

MAX_MEGABYTES = 40.0  # the checkpoint's weights (fp32 safetensors), small enough to ship with the package
HEAD_DIM = TRANSFORMER_CONFIG["head_dim"]
ENCODE_BATCH = 32  # clips per VAE encode when the clips are encoded once (statistics, pools)
EVAL_BATCH = 64  # held-out clips in the fixed forward-dynamics batch
TABLE_LEVEL = 200  # a pixel whose darkest channel is at least this is the table (white, its greys, the walls)
# Cosmos3PushT-v0's engine runs this preset (cosmos3_gym.world.envs.Cosmos3WorldVectorEnv), and its
# domain is the env's default: the trainer reads both instead of restating them
ENV_PRESET = load_preset("Cosmos3ForwardDynamicsRollout-v0")
ENV_DEFAULTS = Cosmos3PushTVectorEnv.__init__.__kwdefaults__  # its sampler too (the imagined conditions')
ENV_DOMAIN = ENV_DEFAULTS["domain"]
PROG = "python -m cosmos3_gym.train_pusht"


@dataclass
class PushTTrainArgs:
    out: str = "out/pusht"
    overwrite: bool = False  # replace a checkpoint already in --out
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    clips: int = 6000  # gym-pusht clips of 8 actions (9 frames) to generate (cosmos3_gym.world.pusht_data)
    # (then --clips, --mix, --near-goal and --clips-per-episode are the file's)
    clips_file: str = ""  # clips from a .npz of python -m cosmos3_gym.world.pusht_data --out, instead of generating
    mix: str = ",".join(f"{kind}={share}" for kind, share in DEFAULT_MIX.items())  # shares of episodes per behaviour
    near_goal: float = 0.25  # share of episodes starting with the block near the goal pose
    clips_per_episode: int = 4  # consecutive clips per gym-pusht episode
    data_workers: int = min(12, os.cpu_count() or 1)  # processes playing gym-pusht (the clips do not depend on it)
    data_seed: int = 0  # the clips, the held-out split's batches and the batches' draws
    held_out: float = 0.05  # share of episodes held out (their clips are never trained on)
    init_seed: int = 0  # the untrained weights
    init_from: str = ""  # a checkpoint whose transformer and VAE to continue training (the four sizes below are its)
    hidden_size: int = 192  # the transformer's width (a multiple of 64; the procedural world's model has 128)
    layers: int = 8  # the transformer's layers (the procedural world's model has 4)
    vae_base_dim: int = 16  # the VAE's base channels
    # (the agent is a 5-pixel disc moving through the 4 frames a latent frame holds: 4 channels keep it in about
    # 6 of 10 reconstructions; more channels cost the transformer only its patch embedding's width)
    vae_z_dim: int = VAE_CONFIG["z_dim"]  # the VAE's latent channels
    vae_steps: int = 2000
    vae_batch: int = 8  # clips per VAE step, each a 9-frame canvas of the resolution tier
    vae_lr: float = 1e-3
    kl_weight: float = 1e-6
    # (a plain MSE collapses to the white table: the block and the agent are a few percent of the pixels)
    foreground_weight: float = 20.0  # the reconstruction loss's weight on pixels that are not the white table, vs 1
    # (the agent is a disc of a latent pixel or two: a plain flow-matching loss lets the imagined frames drop it)
    # the transformer's loss weighs 1 + this on latent elements that see a pixel other than the table (the block,
    # the agent, and the goal's T, which never moves), 1 elsewhere; in every task that generates video
    latent_foreground_weight: float = 0.0  # loss weight 1 + this where a latent element sees the block, agent or goal
    # (with --init-from: the encoder, the latent statistics and so the transformer's latents stay as they are)
    vae_decoder_only: bool = False  # the VAE stage trains the decoder alone
    vae_share: float = 0.2  # with --max-minutes: the VAE stage ends once the run has taken this share of it (--steps 0: all)
    steps: int = 20000  # transformer steps (0: the VAE stage alone)
    batch: int = 64
    lr: float = 5e-4
    uncond_prob: float = 0.1  # the env's unconditional prompt in place of its prompt (classifier-free guidance)
    # (in closed loop the env conditions the model on its own imagined frames: they drift unless it learns noisy ones)
    condition_noise: float = 0.0  # forward dynamics' condition latent + N(0, s^2), s ~ U(0, this) per clip
    # (forward dynamics is what the env runs; the policy learns from the scripted pushes)
    task_weights: str = "forward_dynamics=6,inverse_dynamics=1,policy=1"  # the transformer's tasks and their weights
    # this share of forward dynamics' batches conditioned on the frame the model itself imagines where the clip
    # starts (the episode's previous clip imagined from its first frame under its actions), as the env conditions
    # it in closed loop; the targets stay the true frames (0: clean conditions only)
    imagined_conditions: float = 0.0  # share of forward dynamics' batches conditioned on the model's own imaginings
    imagined_steps: int = 4  # the denoising steps of those imaginings (world-eval --world pusht scores at 4)
    imagined_every: int = 0  # > 0: imagine them again with the weights of every this many steps (0: once, at the start)
    # what the model's actions are measured from: "canvas" (targets scaled to [-1, 1]) or "agent" (each target
    # minus the agent's position in the clip's first frame: translation-equivariant, as the procedural world's
    # commands); empty: --init-from's (canvas without one). Cosmos3PushT-v0 reads it from training.json
    action_frame: str = ""  # canvas or agent (empty: the --init-from checkpoint's, else canvas)
    log_every: int = 50
    max_minutes: float = 0.0  # > 0: the whole run (data included) ends its training after this long, then saves

    def __post_init__(self):  # before anything loads: a typo fails in a second, not after the data
        require_at_least(self, clips=1, clips_per_episode=1, data_workers=1, hidden_size=64, layers=1,
                         vae_base_dim=4, vae_z_dim=1, vae_steps=0, vae_batch=1, steps=0, batch=1, log_every=1)
        if self.vae_decoder_only and not self.init_from:
            raise ValueError("--vae-decoder-only fine-tunes a trained decoder, but no --init-from was given; "
                             "add --init-from CHECKPOINT")
        if self.vae_decoder_only and not self.vae_steps:
            raise ValueError("--vae-decoder-only with --vae-steps 0 trains nothing; give --vae-steps N >= 1")
        if not self.steps and not self.vae_decoder_only:
            raise ValueError("--steps 0 (no transformer training) is for --vae-decoder-only, which keeps the latents "
                             "the transformer learned; a whole new VAE needs a transformer trained on its latents")
        checked_device(self.device, name="--device", cpu_hint="--device cpu")
        parse_mix(self.mix)
        require_finite_non_negative(self, condition_noise=CONDITION_NOISE_MEANING,
                                    foreground_weight="0: every element weighted alike",
                                    latent_foreground_weight="0: every element weighted alike")
        if self.action_frame not in ("", *ACTION_FRAMES):
            raise ValueError(f"--action-frame {self.action_frame!r} is invalid; use one of {ACTION_FRAMES} "
                             "(or leave it out for --init-from's)")
        check_trainer_flags(self)
        for name in ("near_goal", "vae_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} is not a share in [0, 1]")
        if not 0.0 <= self.held_out < 1.0:
            raise ValueError(f"--held-out {self.held_out} is not a share in [0, 1): some episodes have to train")
        check_imagined_conditions(self, [self.task_weights])
        if self.imagined_conditions and not self.clips_file and self.clips_per_episode < 2:
            raise ValueError(f"--imagined-conditions needs episodes of two clips or more, but --clips-per-episode is "
                             f"{self.clips_per_episode}; use 2 or more")
        self._take_checkpoint_sizes()
        if not self.action_frame:  # the record says the frame trained in, which the env reads
            self.action_frame = checkpoint_action_frame(self.init_from)  # canvas without a checkpoint
        if self.clips_file and not Path(self.clips_file).is_file():
            raise ValueError(f"--clips-file {self.clips_file} is not a file; write one with "
                             "python -m cosmos3_gym.world.pusht_data --out FILE.npz")
        weights = parse_task_weights(self.task_weights)
        if set(weights) - set(ROBOT_TASKS):
            raise ValueError(f"--task-weights {self.task_weights!r}: PushT clips have no captions; use the action "
                             f"tasks {[str(task) for task in ROBOT_TASKS]}")
        if Task.POLICY in weights and not self.clips_file and not parse_mix(self.mix).get("push"):
            raise ValueError("--task-weights has policy, which learns from the scripted pushes, but --mix has no push")
        if self.hidden_size % (2 * HEAD_DIM):
            raise ValueError(f"--hidden-size {self.hidden_size} is not a multiple of {2 * HEAD_DIM} "
                             f"(heads of {HEAD_DIM}, two per key-value head)")
        if not self.init_from and checkpoint_megabytes(self) > MAX_MEGABYTES:
            raise ValueError(f"--hidden-size {self.hidden_size} --layers {self.layers} --vae-base-dim "
                             f"{self.vae_base_dim} --vae-z-dim {self.vae_z_dim} make a "
                             f"{checkpoint_megabytes(self):.1f} MB checkpoint, more than {MAX_MEGABYTES:g} MB; use "
                             "fewer layers, a smaller width or fewer latent channels")

    def _take_checkpoint_sizes(self) -> None:
        """With ``--init-from``, the sizes are the checkpoint's: a size flag that names another is refused, and the
        record states the sizes trained rather than the flags' defaults."""
        configs = {part: Path(self.init_from) / part / "config.json" for part in ("transformer", "vae")}
        if not self.init_from or not all(path.is_file() for path in configs.values()):
            return  # no checkpoint, or one that check_checkpoint refuses when it loads
        transformer, vae = (json.loads(configs[part].read_text()) for part in ("transformer", "vae"))
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        sizes = {"hidden_size": transformer.get("hidden_size"), "layers": transformer.get("num_hidden_layers"),
                 "vae_base_dim": vae.get("base_dim"), "vae_z_dim": vae.get("z_dim")}
        for name, value in sizes.items():
            if getattr(self, name) not in (defaults[name], value):
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}: --init-from {self.init_from} "
                                 f"has {value}; leave the flag out (a continued run keeps the checkpoint's sizes)")
            setattr(self, name, value)

    # what the env feeds the model, for world_model.training_batch: the env's, never flags
    @property
    def domain(self) -> str:
        return ENV_DOMAIN

    @property
    def resolution_tier(self) -> int:
        return ENV_PRESET.resolution_tier

    @property
    def view_point(self) -> str:
        return ENV_PRESET.view_point


def parse_mix(spec: str) -> dict[str, float]:
    """``"random_walk=0.5,push=0.5"`` as ``{"random_walk": 0.5, "push": 0.5}`` (shares of :data:`KINDS`)."""
    try:
        mix = {name: float(share) for name, share in (item.split("=") for item in spec.split(","))}
    except ValueError:
        mix = {}
    if not mix or set(mix) - set(KINDS) or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"--mix {spec!r} is not name=share pairs with non-negative shares of {list(KINDS)}")
    return mix


def sized_configs(args: PushTTrainArgs) -> tuple[dict, dict]:
    """The tiny model's transformer and VAE configs at ``args``' width, depth, VAE channels and latent channels."""
    heads, z = args.hidden_size // HEAD_DIM, args.vae_z_dim
    patch = TRANSFORMER_CONFIG["latent_patch_size"]
    transformer = {**TRANSFORMER_CONFIG, "hidden_size": args.hidden_size, "num_attention_heads": heads,
                   "num_key_value_heads": heads // 2, "intermediate_size": 3 * args.hidden_size,
                   "num_hidden_layers": args.layers, "latent_channel": z, "patch_latent_dim": patch * patch * z}
    return transformer, {**VAE_CONFIG, "base_dim": args.vae_base_dim, "z_dim": z, "latents_mean": [0.0] * z,
                         "latents_std": [1.0] * z}


def checkpoint_megabytes(args: PushTTrainArgs) -> float:
    """The fp32 weights of the transformer and VAE ``args`` ask for, counted without allocating them."""
    from diffusers import AutoencoderKLWan, Cosmos3OmniTransformer

    transformer, vae = sized_configs(args)
    with torch.device("meta"):
        modules = (Cosmos3OmniTransformer(vocab_size=len(build_tiny_tokenizer()), **transformer),
                   AutoencoderKLWan(**vae))
    return sum(p.numel() for module in modules for p in module.parameters()) * 4 / 1e6


def pusht_components(args: PushTTrainArgs) -> dict:
    """The tiny model's components with the transformer and VAE of ``args``: untrained (seeded as
    :func:`~cosmos3_gym.model.tiny_model.build_tiny_components` seeds its own), or ``init_from``'s."""
    from diffusers import AutoencoderKLWan, Cosmos3OmniTransformer

    components = build_tiny_components(args.init_seed)
    if args.init_from:
        path = check_checkpoint(args.init_from)
        return {**components, "transformer": load_component(Cosmos3OmniTransformer, path, "transformer", torch.float32),
                "vae": load_component(AutoencoderKLWan, path, "vae", torch.float32)}
    transformer_config, vae_config = sized_configs(args)
    torch.manual_seed(args.init_seed)
    transformer = Cosmos3OmniTransformer(vocab_size=len(components["text_tokenizer"]), **transformer_config)
    scale_action_heads(transformer)
    return {**components, "transformer": transformer, "vae": AutoencoderKLWan(**vae_config)}


def load_clips(path: str) -> Clips:
    """The clips of a file :meth:`~cosmos3_gym.world.pusht_data.Clips.save` wrote, checked against the env's shapes."""
    with np.load(path) as data:
        clips = Clips(**{field.name: data[field.name] for field in dataclasses.fields(Clips)})
    if clips.frames.shape[1:] != (CHUNK + 1, SIZE, SIZE, 3):
        raise ValueError(f"--clips-file {path}: clips of shape {clips.frames.shape[1:]}, but Cosmos3PushT-v0 "
                         f"imagines {(CHUNK + 1, SIZE, SIZE, 3)} (chunks of {CHUNK} actions)")
    return clips


def subset(clips: Clips, keep: np.ndarray) -> Clips:
    return Clips(**{field.name: getattr(clips, field.name)[keep] for field in dataclasses.fields(Clips)})


def held_out_mask(clips: Clips, share: float) -> np.ndarray:
    """The clips of the last ``share`` of the episodes (whole episodes: consecutive clips share a frame);
    none unless at least one episode is left to train on."""
    episodes = np.unique(clips.episodes)
    count = int(round(share * len(episodes)))
    if not 0 < count < len(episodes):
        return np.zeros(len(clips), dtype=bool)
    return np.isin(clips.episodes, episodes[-count:])


def foreground(clips: np.ndarray, device) -> torch.Tensor:
    """``[B, 1, F, H, W]``, 1.0 where a pixel of uint8 ``clips`` is not the table (its darkest channel
    below :data:`TABLE_LEVEL`: the block, the agent, the goal), else 0.0."""
    return torch.as_tensor(clips.min(axis=-1) < TABLE_LEVEL).float().unsqueeze(1).to(device)


def weighted_mse(recon: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The squared error averaged with ``weights`` (broadcast over the channels): their weighted mean."""
    weights = weights.expand_as(target)
    return (weights * (recon - target) ** 2).sum() / weights.sum().clamp_min(1e-12)


def train_vae(model, frames: np.ndarray, args: PushTTrainArgs, log: list, deadline: float) -> None:
    """Reconstruction (``1 + foreground_weight`` on what is not the table, :func:`foreground`) + a small
    KL term on clips along the env's path (padded into the tier's canvas, encoded, cropped to the
    content, decoded), then the latent statistics of the cropped latents, so that the transformer
    sees unit-scale latents where the env conditions it."""
    from tqdm import tqdm

    vae = model.vae
    trained = [*vae.decoder.parameters(), *vae.post_quant_conv.parameters()] if args.vae_decoder_only \
        else list(vae.parameters())
    vae.train().requires_grad_(False)
    for parameter in trained:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(trained, lr=args.vae_lr, weight_decay=0.0, fused=_fused(args.device))
    rng, started = np.random.default_rng([args.data_seed, 1]), time.time()
    for step in tqdm(range(args.vae_steps), desc="vae"):
        batch = frames[np.sort(rng.integers(0, len(frames), args.vae_batch))]
        recon, target, kl = canvas_reconstruction(model, batch, args.resolution_tier)
        mask = foreground(batch, recon.device)
        loss = weighted_mse(recon, target, 1.0 + args.foreground_weight * mask)
        progress = schedule_step(step, args.vae_steps, started, deadline)
        _update(optimizer, loss + args.kl_weight * kl, trained, _lr(progress, args.vae_steps, args.vae_lr))
        out_of_time = time.time() > deadline
        if step % args.log_every == 0 or step == args.vae_steps - 1 or out_of_time:
            log.append({"stage": "vae", "step": step, "canvas_loss": loss.item(),
                        "canvas_mse": torch.nn.functional.mse_loss(recon, target).item(),
                        "foreground_mse": weighted_mse(recon, target, mask).item()})
        if out_of_time:
            break
    vae.eval().requires_grad_(False)
    if not args.vae_decoder_only:  # a new encoder: new statistics
        mean, std = latent_statistics(model, frames[:256], args.resolution_tier)
        vae.register_to_config(latents_mean=mean, latents_std=std)


@torch.no_grad()
def latent_statistics(model, frames: np.ndarray, resolution_tier: int) -> tuple[list[float], list[float]]:
    """Per channel, the mean and standard deviation of the VAE's latent means of the clips' content
    (the canvas encoded, the latent cropped back), the part of the latent the transformer sees."""
    latents = []
    for start in range(0, len(frames), ENCODE_BATCH):
        canvas, content = model.action_canvases(frames[start:start + ENCODE_BATCH], resolution_tier, NUM_FRAMES)
        latents.append(crop_action_latent(model.pipeline, model.vae.encode(canvas).latent_dist.mode(), content))
    latents = torch.cat(latents)
    return latents.mean(dim=(0, 2, 3, 4)).tolist(), latents.std(dim=(0, 2, 3, 4)).tolist()


def latent_foreground(model, clips: np.ndarray) -> torch.Tensor:
    """``[B, 1, T, h, w]``, 1.0 where a latent element of uint8 ``clips`` ``[B, F, H, W, 3]`` sees a pixel
    that is not the table (:func:`foreground`), else 0.0 (:func:`~cosmos3_gym.train.world_model.latent_cells`)."""
    return latent_cells(model, foreground(clips, "cpu"))


@torch.no_grad()
def pusht_pool(model, clips: Clips, resolution_tier: int, device, latent_foreground_weight: float = 0.0,
               action_frame: str = "canvas") -> ActionPool:
    """The clips encoded once as the env encodes its conditions (the VAE is causal: latent frame 0 is
    also the forward-dynamics condition), with the env's prompt and its actions in ``action_frame``
    (:func:`~cosmos3_gym.world.pusht.frame_actions`); with
    ``latent_foreground_weight``, the loss weights ``1 + latent_foreground_weight`` where a latent
    element sees a pixel that is not the table: the block, the agent or the goal (:func:`latent_foreground`)."""
    from tqdm import tqdm

    latents = [model.encode_action_clips(clips.frames[start:start + ENCODE_BATCH], resolution_tier, NUM_FRAMES)
               for start in tqdm(range(0, len(clips), ENCODE_BATCH), desc="encode clips")]
    commands = torch.from_numpy(frame_actions(clips.actions, clips.frames[:, 0], action_frame)).to(device)
    latents = torch.cat(latents)
    weights = None
    if latent_foreground_weight:
        weights = torch.cat([1.0 + latent_foreground_weight * latent_foreground(model, clips.frames[start:start + 256])
                             for start in range(0, len(clips), 256)])
        if weights.shape[2:] != latents.shape[2:]:
            raise ValueError(f"the clips' latent grid {tuple(latents.shape[2:])} is not their pixels' "
                             f"{tuple(weights.shape[2:])} compressed by the VAE's factors")
        weights = weights.to(latents.device)
    return ActionPool([PROMPT] * len(clips), latents, commands, weights)


def successors(clips: Clips, among: np.ndarray) -> np.ndarray:
    """The clips (indices) whose episode's previous clip is the one before them, both ``among`` (a mask):
    clip ``i`` starts at the frame where clip ``i - 1`` ends."""
    follows = np.zeros(len(clips), dtype=bool)
    follows[1:] = (clips.episodes[1:] == clips.episodes[:-1]) & among[1:] & among[:-1]
    index = np.flatnonzero(follows)
    if not np.array_equal(clips.frames[index, 0], clips.frames[index - 1, -1]):
        raise ValueError("the clips' episodes are not in order (a clip does not start where the one before it "
                         "in its episode ends); write them with python -m cosmos3_gym.world.pusht_data")
    return index


@torch.no_grad()
def imagined_pool(model, clips: Clips, everything: ActionPool, index: np.ndarray, args: PushTTrainArgs,
                  seed: int) -> ActionPool:
    """The chunks of ``everything`` at ``index`` (clips with a previous clip, :func:`successors`), each
    conditioned on what the model imagines at its start instead of the true frame: the previous clip
    imagined from its first frame under its actions, with ``Cosmos3PushT-v0``'s generation and
    ``--imagined-steps`` steps (:meth:`~cosmos3_gym.world.envs.Cosmos3WorldVectorEnv.imagine`, the world
    env PushT's is built on, which needs no gym-pusht), its last frame encoded as the env encodes a
    condition, and the clip's actions measured from it (the agent frame reads the agent there). In closed
    loop the env conditions every chunk after the first on such a frame; trained on clean frames alone, a
    model meets blur and drift it never saw there (DAgger's argument)."""
    from tqdm import tqdm

    from .world.envs import Cosmos3WorldVectorEnv

    sampler = {name: ENV_DEFAULTS[name] for name in ("guidance_scale", "noise_level", "kind")}
    world = Cosmos3WorldVectorEnv(EVAL_BATCH, chunk=CHUNK, size=SIZE, num_steps=args.imagined_steps, domain=ENV_DOMAIN,
                                  model=model, **sampler)
    rng, conditions, starts = np.random.default_rng([args.data_seed, 2, seed]), [], []
    commands = everything.commands.cpu().numpy()  # the clips' actions as the model takes them (from their first frames)
    with eval_mode(model.transformer):
        for start in tqdm(range(0, len(index), EVAL_BATCH), desc="imagined conditions"):
            previous = index[start:start + EVAL_BATCH] - 1
            seeds = rng.integers(0, 2 ** 62, len(previous)).tolist()
            chunks = world.imagine(clips.frames[previous, 0], commands[previous], seeds, [PROMPT] * len(previous))
            starts.append(chunks[:, -1])
            conditions.append(model.encode_action_clips(chunks[:, -1:], args.resolution_tier, NUM_FRAMES, given=1))
    pool = everything.take(index)
    latents = pool.latents.clone()
    latents[:, :, :1] = torch.cat(conditions).to(latents.device)
    commands = frame_actions(clips.actions[index], np.concatenate(starts), args.action_frame)
    return dataclasses.replace(pool, latents=latents, commands=torch.from_numpy(commands).to(pool.commands.device))


@torch.no_grad()
def fixed_batch(model, pool: ActionPool, args: PushTTrainArgs) -> tuple:
    """One forward-dynamics batch of ``pool`` (the env's prompt, no unconditional rows, clean conditions,
    every generated element weighted alike) with its noise and sigmas, drawn once: the same clips,
    noise and sigmas at every measurement."""
    count = min(EVAL_BATCH, len(pool.prompts))
    fixed = dataclasses.replace(args, batch=count, uncond_prob=0.0, condition_noise=0.0)
    rows, x0, generated = training_batch(model, Task.FORWARD_DYNAMICS, fixed, None, np.random.default_rng(0), {},
                                         {"dynamics": dataclasses.replace(pool, weights=None)})
    generator = torch.Generator().manual_seed(0)
    noise = {name: torch.randn(x.shape, generator=generator).to(x.device) for name, x in x0.items()}
    return rows, x0, generated, noise, torch.linspace(0.1, 0.9, count)


@torch.no_grad()
def held_out_losses(model, batch: tuple) -> dict[str, float]:
    """The loss of a :func:`fixed_batch` under each clip's own actions and under the next clip's."""
    rows, x0, generated, noise, sigma = batch
    shuffled = {**x0, "action": x0["action"].roll(1, dims=0)}
    return {"held_out": flow_matching_loss(model, rows, x0, generated, noise, sigma).item(),
            "held_out_shuffled": flow_matching_loss(model, rows, shuffled, generated, noise, sigma).item()}


def train_transformer(model, pools: dict[str, ActionPool], held_out: ActionPool | None, args: PushTTrainArgs,
                      log: list, deadline: float, imagine=None) -> None:
    """Flow matching on the tasks of ``task_weights`` (``pools``: ``"dynamics"``, every clip, for the
    dynamics; ``"expert"``, the scripted pushes, for the policy), logging the held-out losses. With
    ``imagine(step)`` (the :func:`imagined_pool` of the weights at ``step``), ``--imagined-conditions`` of
    forward dynamics' batches are drawn from that pool, refreshed every ``--imagined-every`` steps."""
    from tqdm import tqdm

    transformer = model.transformer
    transformer.train().requires_grad_(True)
    optimizer = torch.optim.AdamW(transformer.parameters(), lr=args.lr, weight_decay=0.01, fused=_fused(args.device))
    rng, tokens = np.random.default_rng(args.data_seed), {}
    measured = fixed_batch(model, held_out, args) if held_out else None
    schedule = draw_tasks(args.task_weights, args.steps, rng)
    imagined = imagine(0) if imagine else None
    started = time.time()
    for step, task in enumerate(tqdm(schedule, desc="transformer")):
        if imagine and args.imagined_every and step and step % args.imagined_every == 0:
            imagined = imagine(step)
        drawn = with_imagined(pools, imagined, task, args.imagined_conditions, rng)
        loss = train_step(model, optimizer, training_batch(model, task, args, None, rng, tokens, drawn), rng,
                          _lr(schedule_step(step, args.steps, started, deadline), args.steps, args.lr))
        out_of_time = time.time() > deadline
        if step % args.log_every == 0 or step == args.steps - 1 or out_of_time:
            record = {"stage": "transformer", "step": step, "task": task, "loss": loss.item()}
            log.append({**record, **(held_out_losses(model, measured) if measured else {})})
        if out_of_time:
            break
    transformer.eval().requires_grad_(False)


def _usage_error(message: str):
    """What the flags ask of the clips cannot be done: one line and exit status 2, as a bad flag's."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv=None) -> int:
    args = parse_args(PushTTrainArgs, argv, __doc__, prog=PROG, check=check_trainer_command)
    torch.backends.cuda.matmul.allow_tf32 = True
    start = time.time()
    deadline = start + 60 * args.max_minutes if args.max_minutes > 0 else float("inf")
    log: list = []
    # 1. the clips: gym-pusht played headless (or a file of them); whole episodes held out
    if args.clips_file:
        clips, source = load_clips(args.clips_file), {"file": args.clips_file}
    else:
        clips = generate(args.clips, CHUNK, args.data_seed, parse_mix(args.mix), args.clips_per_episode,
                         args.near_goal, args.data_workers)
        source = {"generated": {"mix": parse_mix(args.mix), "near_goal": args.near_goal,
                                "clips_per_episode": args.clips_per_episode, "seed": args.data_seed}}
    data_seconds = time.time() - start
    held = held_out_mask(clips, args.held_out)
    training = subset(clips, ~held)
    expert = training.kinds == KINDS.index("push")
    following = successors(clips, ~held) if args.imagined_conditions else None
    # the clips' checks: usage errors of the data (a clips file's too), before any model is built
    if following is not None and not following.size:
        _usage_error("--imagined-conditions needs episodes of two clips or more among the training clips; use "
                     "--clips-per-episode 2 or more (or a clips file written so)")
    if Task.POLICY in parse_task_weights(args.task_weights) and not expert.any():
        _usage_error("--task-weights has policy, which learns from the scripted pushes, but no training clip is "
                     "one; add push to --mix (or a clips file with pushes), or leave policy out")
    # 2. the model: the tiny components at the asked size (or a checkpoint to continue)
    components = pusht_components(args)
    components["vae"].to(args.device)
    # 3. the VAE along the env's path, and its latent statistics (the VAE stage ends at its share of the budget)
    if args.vae_steps:
        share = args.vae_share if args.steps else 1.0  # the only stage takes the whole budget
        vae_deadline = start + 60 * args.max_minutes * share if args.max_minutes > 0 else float("inf")
        train_vae(trainable_model(components, args.device), training.frames, args, log, vae_deadline)
    model = trainable_model(components, args.device)  # anew: its pipeline reads the VAE's new latent statistics
    if args.steps:
        # 4. the clips encoded once, as the env encodes its conditions
        everything = pusht_pool(model, clips, args.resolution_tier, args.device, args.latent_foreground_weight,
                                args.action_frame)
        pools = {"dynamics": everything.take(np.flatnonzero(~held))}
        if expert.any():
            pools["expert"] = pools["dynamics"].take(np.flatnonzero(expert))
        held_out = everything.take(np.flatnonzero(held)) if held.any() else None
        imagine = None
        if args.imagined_conditions:  # the model's own imaginings as conditions (the clips they replace: training)
            def imagine(step: int) -> ActionPool:
                began = time.time()
                pool = imagined_pool(model, clips, everything, following, args, step)
                log.append({"stage": "imagined conditions", "step": step, "clips": len(following),
                            "seconds": round(time.time() - began, 1)})
                return pool
        # 5. the transformer: flow matching on forward dynamics, inverse dynamics and the policy
        train_transformer(model, pools, held_out, args, log, deadline, imagine)
    # 6. the checkpoint, its record and its curve
    for name in ("transformer", "vae"):
        components[name].to("cpu")
    out = Path(args.out)
    save_checkpoint(out, components)
    weights = sorted(out.glob("*/*.safetensors"))
    record = {"command": "python -m cosmos3_gym.train_pusht " + " ".join(sys.argv[1:] if argv is None else argv),
              "args": dataclasses.asdict(args), "seeds": {"data": args.data_seed, "init": args.init_seed},
              "data": {**source, **clips.summary(), "held_out_clips": int(held.sum()),
                       "seconds": round(data_seconds, 1)},
              "env": {"prompt": PROMPT, "domain": args.domain, "resolution_tier": args.resolution_tier,
                      "view_point": args.view_point, "frames": [CHUNK + 1, SIZE, SIZE]},
              "megabytes": round(sum(path.stat().st_size for path in weights) / 1e6, 2),
              "minutes": round((time.time() - start) / 60, 2), "log": log}
    write_record(out, record, args.device, args.init_from)
    print(f"wrote {out} ({record['megabytes']} MB) in {record['minutes']} min; last record: {log[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
