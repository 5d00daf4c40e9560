"""The one transition function of rollout and replay, and the trainer's replay of stored log-probs.

:func:`transition` computes a step's guided velocity (conditional and unconditional rows
of every request in one forward; the conditional rows alone where every guidance scale is 1) and,
per generated stream, its :func:`~cosmos3_gym.rollout.sde.sde_step`: with
``noise=`` it samples (the rollout), with ``next_sample=`` it scores a stored step (the
trainer). Both sides call it, so they cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..model.model import Cosmos3Model
from ..model.packing import PackedRows, RowSpec
from .sde import sde_step
from .streams import LATENTS
from ..model.tasks import checked_domain
from .trajectory import Trajectory


def needs_unconditional(guidance: torch.Tensor) -> bool:
    """Whether a step's requests need their unconditional rows: not when every guidance scale is 1,
    whose velocity is the conditional one (diffusers' pipeline skips its unconditional pass there
    too). Then the forward has half the rows."""
    return not bool((guidance == 1).all())


def cfg_packing(packings: dict, model: Cosmos3Model, requests: Sequence[tuple], unconditional: bool) -> PackedRows:
    """``packings[unconditional]``, packed with :func:`pack_cfg_rows` on first use: a set of requests
    keeps both of its packings (and their text caches) while its steps switch between guidance 1
    and other scales."""
    if unconditional not in packings:
        packings[unconditional] = pack_cfg_rows(model, requests, unconditional)
    return packings[unconditional]


def pack_cfg_rows(model: Cosmos3Model, requests: Sequence[tuple], unconditional: bool = True) -> PackedRows:
    """Pack ``(cond_ids, uncond_ids, row)`` requests (``row``: the request's :class:`RowSpec`, its
    ``input_ids`` ignored) as rows: the conditional rows of all requests, then (``unconditional``)
    their unconditional rows (the order :func:`transition` reads them back). Consecutive rows of equal
    lengths attend in one call (:class:`~cosmos3_gym.model.packing.RowLayout`): the unconditional rows
    share the negative prompt, and the conditional rows of a group share theirs."""
    conditional = [replace(row, input_ids=tuple(cond)) for cond, _, row in requests]
    if not unconditional:
        return model.pack(conditional)
    return model.pack(conditional + [replace(row, input_ids=tuple(uncond)) for _, uncond, row in requests])


def noisy_masks(packed: PackedRows, latents: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """Per stream, a bool mask broadcastable to its ``[b, ...]`` latents, True on the elements each
    request generates (None: all of them). Clean video frames, given action tokens and action
    channels above the domain's raw dimension (which the pipeline keeps at zero) are not generated."""
    rows = packed.rows[: len(latents["video"])]  # the conditional rows, one per request
    device = latents["video"].device
    frames = latents["video"].shape[2]
    masks: dict[str, torch.Tensor | None] = {"video": None}
    if any(row.clean_frames for row in rows):
        video = torch.ones((len(rows), frames), dtype=torch.bool, device=device)
        for j, row in enumerate(rows):
            video[j, list(row.clean_frames)] = False
        masks["video"] = video.view(len(rows), 1, frames, 1, 1)
    if "sound" in latents:
        masks["sound"] = None
    if "action" in latents:
        tokens, channels = latents["action"].shape[1:]
        action = torch.zeros((len(rows), tokens, channels), dtype=torch.bool, device=device)
        for j, row in enumerate(rows):
            action[j, :, : row.raw_action_dim] = True
            action[j, list(row.clean_actions)] = False
        masks["action"] = action
    return masks


@dataclass
class JointStep:
    """One transition of every stream of ``b`` requests (fp32). The streams share the step's sigma
    and are independent Gaussians given the velocity, so the joint log-density is the sum of the
    streams' (``log_prob_sums``); ``log_prob`` divides it by the number of generated elements."""

    next_sample: dict[str, torch.Tensor]
    velocity: dict[str, torch.Tensor]
    log_prob: torch.Tensor  # [b]
    log_prob_sum: torch.Tensor  # [b]
    log_prob_sums: dict[str, torch.Tensor]  # per stream, [b]
    num_scored: dict[str, torch.Tensor]  # per stream, [b]: the generated elements its log-density covers
    deterministic: torch.Tensor  # [b] bool


def transition(model: Cosmos3Model, packed: PackedRows, latents: dict[str, torch.Tensor], timesteps: Sequence[float],
               guidance: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: torch.Tensor,
               sigma_max: torch.Tensor, kind: str, *, noise: dict[str, torch.Tensor] | None = None,
               next_sample: dict[str, torch.Tensor] | None = None) -> JointStep:
    """One denoising transition of ``latents[stream][j]`` (request ``j`` of ``packed``).

    The velocity is ``u + g (c - u)`` (classifier-free guidance, every stream) in fp32, and ``c`` itself
    where ``g`` is 1 (in a packing of conditional rows only, :func:`needs_unconditional`, or beside
    other scales), zero on elements that are not generated (as ``Cosmos3OmniPipeline`` masks its
    predictions); each stream's SDE step copies those elements unchanged and scores the generated ones only.
    Autograd is as the caller set it.
    """
    b = len(latents["video"])
    if len(packed.rows) not in (b, 2 * b):
        raise ValueError(f"the packing has {len(packed.rows)} rows for {b} requests; pack_cfg_rows packs {2 * b} "
                         f"(conditional and unconditional) or {b} (conditional only, for guidance 1)")
    copies = len(packed.rows) // b  # 2: conditional rows, then unconditional; 1: conditional only
    if copies == 1 and needs_unconditional(guidance):
        raise ValueError(f"a packing without unconditional rows serves guidance 1 only, got {guidance.tolist()}; "
                         f"pack with pack_cfg_rows(..., unconditional=True)")
    rows = {name: [tensor[j : j + 1] if name == "video" else tensor[j] for j in range(len(tensor))] * copies
            for name, tensor in latents.items()}  # the packing's order
    velocities = model.forward_rows(packed, rows, [float(t) for t in timesteps] * copies)
    masks = noisy_masks(packed, latents)
    steps, velocity = {}, {}
    for name, x in latents.items():
        cond = torch.stack([v[name] for v in velocities[:b]])
        if copies == 1:
            guided = cond
        else:
            uncond = torch.stack([v[name] for v in velocities[b:]])
            g = guidance.float().to(cond.device).view(-1, *([1] * (cond.ndim - 1)))
            # guidance 1 is c whatever the neighbours' scales (u + (c - u) rounds differently)
            guided = torch.where(g == 1, cond, uncond + g * (cond - uncond))
        mask = masks[name]
        velocity[name] = guided if mask is None else torch.where(mask, guided, torch.zeros_like(guided))
        steps[name] = sde_step(velocity[name], x, sigma, sigma_next, kind=kind, noise_level=noise_level,
                               sigma_max=sigma_max, noise=None if noise is None else noise[name],
                               next_sample=None if next_sample is None else next_sample[name], mask=mask)
    log_prob_sum = sum(step.log_prob_sum for step in steps.values())
    count = sum(step.num_scored for step in steps.values())
    return JointStep(
        next_sample={name: step.next_sample for name, step in steps.items()}, velocity=velocity,
        log_prob=log_prob_sum / count, log_prob_sum=log_prob_sum,
        log_prob_sums={name: step.log_prob_sum for name, step in steps.items()},
        num_scored={name: step.num_scored for name, step in steps.items()},
        deterministic=torch.stack([step.deterministic for step in steps.values()]).all(dim=0),
    )


def trajectory_row(model: Cosmos3Model, trajectory: Trajectory) -> RowSpec:
    """The :class:`RowSpec` (without tokens) a trajectory's rollout packed."""
    shape = tuple(trajectory.latents.shape[2:])
    sound_len = 0 if trajectory.sound_latents is None else trajectory.sound_latents.shape[-1]
    action_len, domain_id, raw_dim = 0, 0, 0
    if trajectory.action_latents is not None:
        action_len = trajectory.action_latents.shape[1]
        domain_id, raw_dim = checked_domain(trajectory.domain, model.transformer.config.action_dim,
                                            "trajectory.domain")
    return RowSpec((), *shape, trajectory.fps, tuple(trajectory.clean_frames), sound_len=sound_len,
                   sound_fps=float(model.transformer.config.sound_latent_fps), action_len=action_len,
                   clean_actions=tuple(trajectory.clean_actions), domain_id=domain_id, raw_action_dim=raw_dim)


def replay_log_probs(model: Cosmos3Model, trajectories: Trajectory | Sequence[Trajectory],
                     steps: Sequence[int] | None = None, micro_batch: int | None = None,
                     reduction: str = "mean", streams: Sequence[str] | None = None) -> torch.Tensor:
    """Recompute stored steps' log-probs with ``model``'s current weights (the trainer's side).

    No rollout engine is needed. For each requested step ``k`` (default: all; Flow-GRPO
    trains on a subset) the guided velocity is recomputed from the stored latent, the
    stored ``timesteps[k]`` (the scheduler's timestep, *not* ``1000 * sigma``), guidance and
    tokens, and the stored next latent is scored by :func:`transition`, the function the
    rollout sampled with. ``micro_batch`` trajectories share one forward per step (default:
    all). Passing one vector-env episode's trajectories in env order with the default
    grouping repeats the rollout's computation exactly, bit for bit (bf16 included); other
    groupings agree up to the model dtype's rounding.

    Autograd is as the caller set it: under ``torch.enable_grad()`` the result is
    differentiable in the model's trainable parameters. Gradients flow through both the
    conditional and the unconditional row, because the sampled policy is the *guided*
    velocity ``u + g (c - u)`` and its log-prob depends on both (with ``g = 1`` the
    unconditional row drops out exactly). With autograd on, the text tokens are recomputed
    at every step rather than cached, so the text pathway gets its gradient from every step.

    Returns ``[len(steps)]`` for one trajectory, ``[B, len(steps)]`` for a list;
    ``reduction="sum"`` gives the exact log-density (``log_prob_sums``) instead of the
    per-element mean. ``streams`` (default: all the trajectories have) scores only those
    streams, e.g. ``("action",)`` for a policy rewarded on its actions alone: the log-density of
    the others' elements carries no signal about the reward, only variance.
    """
    if not isinstance(model, Cosmos3Model):
        raise TypeError(f"model is a {type(model).__name__}; give a Cosmos3Model (the env's, env.unwrapped.model, "
                        "or a trainer's copy)")
    single = isinstance(trajectories, Trajectory)
    if trajectories is None or isinstance(trajectories, (dict, str, bytes)) or hasattr(trajectories, "__fspath__"):
        raise TypeError(f"trajectories is {'None' if trajectories is None else 'a ' + type(trajectories).__name__}; "
                        "give info['trajectory'] (an episode's last step has it), a list of them, or "
                        "Trajectory.load(path) for a saved one")
    batch = [trajectories] if single else list(trajectories)
    if not batch:
        raise ValueError("replay_log_probs got no trajectories")
    for i, item in enumerate(batch):
        if item is None:
            raise TypeError(f"trajectories[{i}] is None: an env whose episode had not ended; a vector env's "
                            "infos['trajectory'] holds trajectories where infos['_trajectory'] is True only: "
                            "infos['trajectory'][infos['_trajectory']]")
        if not isinstance(item, Trajectory):
            raise TypeError(f"trajectories[{i}] is a {type(item).__name__}, not a Trajectory; give the episode's "
                            "info['trajectory'] (a vector env's infos['trajectory'] holds one per env)")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r} is not supported; choose 'mean' or 'sum'")
    n = batch[0].num_steps
    for name, values in (("steps", [t.num_steps for t in batch]), ("kind", [t.kind for t in batch]),
                         ("latent shape", [tuple(t.latents.shape[1:]) for t in batch]),
                         ("streams", [t.streams for t in batch]),
                         ("stream shapes", [t.stream_shapes() for t in batch])):
        if len(set(values)) != 1:
            raise ValueError(f"trajectories differ in {name} ({values}); replay them in groups that agree")
    steps = list(range(n)) if steps is None else steps
    if isinstance(steps, (str, bytes)) or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                                                  and 0 <= k < n for k in steps):
        raise ValueError(f"steps={steps!r} must be step indices (ints) in [0, {n}) for trajectories of {n} steps")
    steps = [int(k) for k in steps]
    scored = list(batch[0].streams) if streams is None else streams
    if isinstance(scored, str) or not scored or not set(scored) <= set(batch[0].streams):
        raise ValueError(f"streams={streams!r} must be a non-empty list of the trajectories' streams "
                         f"{list(batch[0].streams)}")
    size = len(batch) if micro_batch is None else micro_batch
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise ValueError(f"micro_batch={micro_batch!r} must be a positive integer or None")
    vocab = model.transformer.config.vocab_size
    for t in batch:
        want = model.latent_shape(t.num_frames, t.height, t.width)
        if tuple(t.latents.shape[1:]) != want:
            raise ValueError(f"a trajectory of {t.num_frames}x{t.height}x{t.width} has latents "
                             f"{tuple(t.latents.shape[1:])}; this model makes {want}: it comes from another setup")
        if not all(0 <= i < vocab for i in (*t.cond_ids, *t.uncond_ids)):
            raise ValueError(f"a trajectory has token ids outside this model's vocabulary [0, {vocab})")
        cfg = model.transformer.config
        for name, enabled, width, got in (
                ("sound", cfg.sound_gen, cfg.sound_dim, None if t.sound_latents is None else t.sound_latents.shape[1]),
                ("action", cfg.action_gen, cfg.action_dim,
                 None if t.action_latents is None else t.action_latents.shape[2])):
            if got is not None and (not enabled or got != width):
                raise ValueError(f"a trajectory has a {name} stream of {got} channels; this model "
                                 f"{f'makes {width}' if enabled else f'has no {name} stream'}: it comes from "
                                 f"another setup")
    out = []
    for start in range(0, len(batch), size):
        chunk = batch[start:start + size]
        requests = [(t.cond_ids, t.uncond_ids, trajectory_row(model, t)) for t in chunk]
        packings = {}  # with and without unconditional rows (cfg_packing)
        streams = {name: torch.stack([getattr(t, LATENTS[name]) for t in chunk]).to(model.device)
                   for name in chunk[0].streams}
        sigmas = torch.stack([t.sigmas for t in chunk]).to(model.device)
        timesteps = torch.stack([t.timesteps for t in chunk])
        rows = []
        for k in steps:
            guidance = torch.stack([t.guidance_scales[k] for t in chunk])
            packed = cfg_packing(packings, model, requests, needs_unconditional(guidance))
            step = transition(
                model, packed, {name: x[:, k] for name, x in streams.items()}, timesteps[:, k].tolist(),
                guidance, sigmas[:, k], sigmas[:, k + 1],
                torch.stack([t.noise_levels[k] for t in chunk]).to(model.device), sigmas[:, 1], chunk[0].kind,
                next_sample={name: x[:, k + 1] for name, x in streams.items()})
            total = sum(step.log_prob_sums[name] for name in scored)
            rows.append(total / sum(step.num_scored[name] for name in scored) if reduction == "mean" else total)
        out.append(torch.stack(rows, dim=1))
    result = torch.cat(out)
    return result[0] if single else result
