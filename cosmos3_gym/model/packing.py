"""Pack many generation requests into one ``Cosmos3OmniTransformer`` forward.

The transformer takes one packed sequence: every understanding (text) token first, then
every generation token (vision, and sound and action where a request has them). diffusers' own
processor treats that sequence as a single sample, so naively packing two requests would let
them attend to each other. This module lays the rows out (positions, row ids, runs of equal
rows, block masks); :class:`~cosmos3_gym.model.attention.PackedRowsAttnProcessor` uses the
layout to keep them apart: row ``r``'s text tokens
attend causally to row ``r``'s text only, and row ``r``'s generation tokens attend to row
``r``'s text and generation tokens only.

A *row* is one sequence of ``Cosmos3OmniPipeline``: the conditional or the unconditional
prompt of one request. Positions (mRoPE) and token order inside a row are exactly the
pipeline's; only the placement of rows side by side is ours.

Two attention backends give the same result: ``"sdpa"`` (the default) runs each row's
attention as diffusers' processor does for a single sample (so it matches the pipeline to the
last bit on the CPU), one call per run of consecutive rows of equal lengths; ``"flex"`` keeps
the packed sequence and uses FlexAttention document masks compiled into block-sparse kernels
(blocks that cross rows are skipped, not masked). For ``"flex"`` the text stream is padded to a
multiple of :data:`FLEX_PAD_MULTIPLE` with inert tokens, so that episodes with different
prompt lengths reuse one compiled kernel.
"""

from __future__ import annotations

import functools
import itertools

import math
from dataclasses import dataclass

import torch

from .diffusers_private import mrope_text_ids, mrope_vae_ids


@dataclass(frozen=True)
class RowSpec:
    """The static description of one row, as ``Cosmos3OmniPipeline`` packs it: its prompt tokens,
    its latent grid and which latent frames are clean conditioning (timestep 0, no prediction);
    then the optional sound stream (``sound_len`` latent frames, all generated) and action stream
    (``action_len`` tokens of the embodiment ``domain_id``; ``clean_actions`` are given, and only
    the first ``raw_action_dim`` channels of the others are generated)."""

    input_ids: tuple[int, ...]
    latent_frames: int
    latent_height: int
    latent_width: int
    fps: float
    clean_frames: tuple[int, ...] = ()
    sound_len: int = 0
    sound_fps: float = 0.0
    action_len: int = 0
    clean_actions: tuple[int, ...] = ()
    domain_id: int = 0
    raw_action_dim: int = 0


FLEX_PAD_MULTIPLE = 256
ATTENTION_BACKENDS = ("sdpa", "flex")


@dataclass
class RowLayout:
    """Runs of consecutive rows with equal lengths, each ``(und_start, gen_start, rows, und_len,
    gen_len)`` in the packed und (text) and gen (vision) streams: a run attends as one batch."""

    runs: list[tuple[int, int, int, int, int]]

    @classmethod
    def of(cls, und_lengths: list[int], gen_lengths: list[int]) -> "RowLayout":
        runs, und_start, gen_start = [], 0, 0
        for lengths, group in itertools.groupby(zip(und_lengths, gen_lengths)):
            count = len(list(group))
            runs.append((und_start, gen_start, count, *lengths))
            und_start, gen_start = und_start + count * lengths[0], gen_start + count * lengths[1]
        return cls(runs)


@dataclass
class FlexLayout:
    """Block masks over the packed streams: same-row (and causal, for text) attention only."""

    und_mask: object
    gen_mask: object


def _flex_layout(und_doc: torch.Tensor, gen_doc: torch.Tensor) -> FlexLayout:
    from torch.nn.attention.flex_attention import create_block_mask

    all_doc = torch.cat([und_doc, gen_doc])

    def same_row_causal(b, h, q, kv):
        return (und_doc[q] == und_doc[kv]) & (q >= kv)

    def same_row(b, h, q, kv):
        return gen_doc[q] == all_doc[kv]

    device = und_doc.device
    und_len, gen_len = und_doc.numel(), gen_doc.numel()
    return FlexLayout(
        create_block_mask(same_row_causal, None, None, und_len, und_len, device=device),
        create_block_mask(same_row, None, None, gen_len, und_len + gen_len, device=device),
    )


def to_device(host: torch.Tensor, device) -> torch.Tensor:
    """``host`` (a CPU tensor) on ``device``, without waiting for the device: PyTorch ends a blocking
    copy of pageable memory with ``cudaStreamSynchronize``, so on CUDA the tensor is pinned and copied
    asynchronously (the pinned block is kept until the copy has run)."""
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _row_ids(lengths: list[int], device) -> torch.Tensor:
    """For each token of a packed stream, the index of the row it belongs to."""
    return torch.repeat_interleave(torch.arange(len(lengths), device=device), to_device(torch.tensor(lengths), device),
                                   output_size=sum(lengths))


@functools.lru_cache(maxsize=4096)
def _row_positions(text_len: int, grid: tuple[int, int, int], fps: float, sound_len: int, sound_fps: float,
                   action_len: int, mrope: tuple, temporal_compression: int) -> tuple[torch.Tensor, torch.Tensor]:
    """mRoPE positions ``[3, n]`` of one row's text and of its generated streams, as the pipeline
    computes them. They depend on the row's geometry only, not on its tokens, so rows of equal
    geometry (every row of a training batch) share one computation. Read-only: callers concatenate."""
    fps_modulation, margin, reset_spatial, base_fps = mrope
    fps_of = (lambda value: value) if fps_modulation else (lambda value: None)
    text, next_offset = mrope_text_ids(text_len, temporal_offset=0, use_float_positions=fps_modulation)
    offset = next_offset + margin  # every generated stream's start
    gen = [mrope_vae_ids(*grid, temporal_offset=offset, reset_spatial_indices=reset_spatial,
                                       fps=fps_of(fps), base_fps=base_fps,
                                       temporal_compression_factor=temporal_compression)[0]]
    if sound_len:
        gen.append(mrope_vae_ids(sound_len, 1, 1, temporal_offset=offset,
                                               reset_spatial_indices=reset_spatial, fps=fps_of(sound_fps),
                                               base_fps=base_fps, temporal_compression_factor=1)[0])
    if action_len:
        gen.append(mrope_vae_ids(action_len, 1, 1, temporal_offset=offset,
                                               reset_spatial_indices=reset_spatial, fps=fps_of(fps),
                                               base_fps=base_fps, temporal_compression_factor=1,
                                               base_temporal_compression_factor=temporal_compression,
                                               start_frame_offset=1)[0])
    return text, torch.cat(gen, dim=1)


class PackedRows:
    """The step-invariant part of a packed forward over a list of rows.

    ``text_cache`` holds, per layer, the text stream's keys and values as the vision tokens
    read them. The understanding pathway never attends to vision tokens, so these are the
    same at every denoising step: the first forward over this packing records them and
    later forwards skip the text tokens altogether (only vision tokens are computed).

    Consecutive rows of equal shape (latent grid, sound and action lengths, domain) reach the
    transformer as one item, their latents joined along time: diffusers packs, patchifies and
    unpacks item by item, and its packed sequence is the same token for token either way, so a
    batch of 128 rows costs a few kernel launches instead of hundreds.
    """

    def __init__(self, rows: list[RowSpec], transformer_config, temporal_compression: int, device,
                 attention: str = "sdpa"):
        if attention not in ATTENTION_BACKENDS:
            raise ValueError(f"attention={attention!r} is not supported; choose one of {ATTENTION_BACKENDS}")
        if len({(bool(r.sound_len), bool(r.action_len)) for r in rows}) > 1:
            raise ValueError("rows of one packing must all have (or all lack) the sound and the action stream")
        cfg = transformer_config
        p = cfg.latent_patch_size
        mrope = (bool(cfg.enable_fps_modulation), cfg.unified_3d_mrope_temporal_modality_margin,
                 cfg.unified_3d_mrope_reset_spatial_ids, float(cfg.base_fps))
        self.rows = rows
        self.has_sound, self.has_action = bool(rows[0].sound_len), bool(rows[0].action_len)
        text_positions, gen_positions, grids, noisy_frames, noisy_actions = [], [], [], [], []
        und_lengths, gen_lengths, self.noisy_lengths, self.noisy_action_lengths = [], [], [], []
        vision_offsets, noisy_offsets, sound_offsets, action_offsets, action_noisy_offsets = [], [], [], [], []
        gen_start = 0
        for row in rows:
            grid = (row.latent_frames, math.ceil(row.latent_height / p), math.ceil(row.latent_width / p))
            text, gen = _row_positions(len(row.input_ids), grid, row.fps, row.sound_len, row.sound_fps,
                                       row.action_len, mrope, temporal_compression)
            text_positions.append(text)
            gen_positions.append(gen)
            grids.append(grid)
            noisy = [f for f in range(grid[0]) if f not in row.clean_frames]
            noisy_frames.append(noisy)
            frame_tokens = grid[1] * grid[2]
            vision_offsets += range(gen_start, gen_start + math.prod(grid))
            noisy_offsets += [gen_start + f * frame_tokens + i for f in noisy for i in range(frame_tokens)]
            self.noisy_lengths.append(len(noisy) * frame_tokens)
            cursor = gen_start + math.prod(grid)
            if row.sound_len:
                sound_offsets += range(cursor, cursor + row.sound_len)
                cursor += row.sound_len
            if row.action_len:
                noisy_tokens = [a for a in range(row.action_len) if a not in row.clean_actions]
                noisy_actions.append(noisy_tokens)
                self.noisy_action_lengths.append(len(noisy_tokens))
                action_offsets += range(cursor, cursor + row.action_len)
                action_noisy_offsets += [cursor + a for a in noisy_tokens]
                cursor += row.action_len
            und_lengths.append(len(row.input_ids))
            gen_lengths.append(cursor - gen_start)
            gen_start = cursor
        input_ids = [i for row in rows for i in row.input_ids]
        if attention == "flex":  # inert padding tokens: a row of their own that nothing else sees
            padding = -len(input_ids) % FLEX_PAD_MULTIPLE
            input_ids += [0] * padding
            text_positions.append(torch.zeros((3, padding), dtype=text_positions[0].dtype))
            und_lengths.append(padding)
        self.und_len = sum(und_lengths)
        self.gen_lengths = gen_lengths
        self.gen_len = gen_start
        self.input_ids = to_device(torch.tensor(input_ids, dtype=torch.long), device)
        self.position_ids = to_device(torch.cat(text_positions + gen_positions, dim=1), device)

        def index(offsets):  # positions in the generation stream
            return to_device(torch.tensor(offsets, dtype=torch.long), device)

        self.vision_offsets, self.noisy_gen_offsets = index(vision_offsets), index(noisy_offsets)
        self.sound_offsets, self.action_offsets = index(sound_offsets), index(action_offsets)
        self.action_noisy_offsets = index(action_noisy_offsets)
        # the transformer's items: runs of consecutive rows of one shape, (first row, number of rows)
        shape_of = [(grid, row.sound_len, row.action_len, row.domain_id) for grid, row in zip(grids, rows)]
        self.items, first = [], 0
        for _, run in itertools.groupby(shape_of):
            count = len(list(run))
            self.items.append((first, count))
            first += count

        def joined(per_row, length):  # each item's per-row indexes, row b's shifted by b * length
            return [index([b * length(first) + i for b in range(count) for i in per_row[first + b]])
                    for first, count in self.items]

        self.item_token_shapes = [(count * grids[first][0], *grids[first][1:]) for first, count in self.items]
        self.item_noisy_frames = joined(noisy_frames, lambda r: grids[r][0])
        if self.has_sound:
            self.item_sound_lengths = [count * rows[first].sound_len for first, count in self.items]
        if self.has_action:
            self.item_noisy_actions = joined(noisy_actions, lambda r: rows[r].action_len)
            self.item_domain_ids = [index([rows[first].domain_id]) for first, _ in self.items]
        self.text_cache: list | None = None
        self.text_cache_version = None  # the model's weights_fingerprint() the cache was computed with
        self.forward_graph = None  # the CUDA graph of a forward over the cached text (Cosmos3Model.cuda_graphs)
        if attention == "flex":
            self.layout = _flex_layout(_row_ids(und_lengths, device), _row_ids(gen_lengths, device))
        else:
            self.layout = RowLayout.of(und_lengths, gen_lengths)

    def transformer_kwargs(self, latents: dict[str, list[torch.Tensor]], timesteps: list[float], dtype,
                           text_cached: bool = False) -> dict:
        """Keyword arguments of ``Cosmos3OmniTransformer.forward`` for this step.

        ``latents``: per stream (``"video"``, and ``"sound"`` / ``"action"`` where the rows have
        them) one tensor per row, shaped as the pipeline passes them (``[1, C, T, H, W]``,
        ``[C, T]``, ``[T, D]``). With ``text_cached`` the sequence holds the generated streams
        only (the attention processor supplies the cached text keys and values).
        """
        device = self.input_ids.device
        step = to_device(torch.tensor(timesteps, dtype=torch.float32), device)

        def per_token(counts):  # each row's timestep, repeated over its noisy tokens
            return step.repeat_interleave(to_device(torch.tensor(counts), device), output_size=sum(counts))

        def items(tensors, dim):  # one tensor per item: its rows joined along time (dim ``dim``)
            return [(tensors[first] if count == 1 else torch.cat(tensors[first:first + count], dim=dim)
                     ).to(device=device, dtype=dtype) for first, count in self.items]

        und_len = 0 if text_cached else self.und_len
        kwargs = dict(
            input_ids=self.input_ids[:und_len],
            text_indexes=torch.arange(und_len, device=device),
            position_ids=self.position_ids[:, self.und_len - und_len:],
            und_len=und_len,
            sequence_length=und_len + self.gen_len,
            vision_tokens=items(latents["video"], 2),
            vision_token_shapes=self.item_token_shapes,
            vision_sequence_indexes=self.vision_offsets + und_len,
            vision_mse_loss_indexes=self.noisy_gen_offsets + und_len,
            vision_timesteps=per_token(self.noisy_lengths),
            vision_noisy_frame_indexes=self.item_noisy_frames,
            return_dict=False,
        )
        if self.has_sound:
            lengths = [row.sound_len for row in self.rows]
            kwargs.update(
                sound_tokens=items(latents["sound"], 1),
                sound_token_shapes=[(n, 1, 1) for n in self.item_sound_lengths],
                sound_sequence_indexes=self.sound_offsets + und_len,
                sound_mse_loss_indexes=self.sound_offsets + und_len,
                sound_timesteps=per_token(lengths),
                sound_noisy_frame_indexes=[torch.arange(n, device=device) for n in self.item_sound_lengths])
        if self.has_action:
            kwargs.update(
                action_tokens=items(latents["action"], 0),
                action_token_shapes=[(count * self.rows[first].action_len, 1, 1) for first, count in self.items],
                action_sequence_indexes=self.action_offsets + und_len,
                action_mse_loss_indexes=self.action_noisy_offsets + und_len,
                action_timesteps=per_token(self.noisy_action_lengths),
                action_noisy_frame_indexes=self.item_noisy_actions, action_domain_ids=self.item_domain_ids)
        return kwargs

    def split_outputs(self, video: list[torch.Tensor], sound: list[torch.Tensor] | None,
                      action: list[torch.Tensor] | None) -> dict[str, list[torch.Tensor]]:
        """The transformer's per-item predictions -> per stream, one fp32 tensor per row (video
        ``[C, T, H, W]``, sound ``[C, T]``, action ``[T, D]``), each contiguous."""
        def rows_of(item_outputs, time_dim):  # [..., count * T, ...] -> count tensors [..., T, ...]
            out = []
            for (first, count), x in zip(self.items, item_outputs):
                x = x.float()
                if count > 1:
                    x = x.unflatten(time_dim, (count, -1)).movedim(time_dim, 0).contiguous()
                    out.extend(x.unbind(0))
                else:
                    out.append(x)
            return out

        streams = {"video": rows_of([v.squeeze(0) for v in video], 1)}
        if sound is not None:
            streams["sound"] = rows_of(sound, 1)
        if action is not None:
            streams["action"] = rows_of(action, 0)
        return streams
