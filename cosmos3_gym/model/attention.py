"""The attention processor that keeps packed rows apart (installed on every transformer layer).

Same projections, norms and rotary embeddings as diffusers' ``Cosmos3AttnProcessor``; rows of a
:class:`~cosmos3_gym.model.packing.PackedRows` attend only to themselves, through one SDPA call
per run of equal rows or FlexAttention block masks. The processors of one transformer share a
:class:`ForwardContext`, which :class:`~cosmos3_gym.model.model.Cosmos3Model` fills for each
forward (diffusers' processor interface passes no per-call state of its own).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .diffusers_private import rotate_half
from .packing import FlexLayout, PackedRows


@functools.cache
def _flex_attention(device_type: str):
    """Compiled FlexAttention on accelerators; the eager reference (same math) on the CPU."""
    from torch.nn.attention.flex_attention import flex_attention

    if device_type == "cpu":
        return flex_attention
    return torch.compile(flex_attention, dynamic=False)


def _rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def _norm_rope(norm, x, cos, sin):
    """Per-head norm then rotary embedding: the order of diffusers' Cosmos3AttnProcessor."""
    return _rope(norm(x), cos, sin)


@functools.cache
def _compiled_norm_rope():
    return torch.compile(_norm_rope)


class PackedRowsAttnProcessor:
    """Cosmos 3 dual-pathway attention with every row isolated from the others.

    Same projections, norms and rotary embeddings as diffusers' ``Cosmos3AttnProcessor``;
    the attention itself runs as one SDPA call per run of consecutive rows of equal lengths
    (a batch of those rows; no masks, no padding), or with FlexAttention block masks. One
    instance per layer (``layer``); all share ``packed``, the :class:`PackedRows` of the
    current forward, which
    :class:`~cosmos3_gym.model.model.Cosmos3Model` sets before each forward. When the
    packing's ``text_cache`` is filled, the forward carries no text tokens and this layer's
    cached text keys/values are used.
    """

    def __init__(self, shared: "ForwardContext", layer: int):
        self.shared, self.layer = shared, layer

    def __call__(self, attn, und_seq, gen_seq, rotary_emb):
        packed = self.shared.packed
        norm_rope = _compiled_norm_rope() if self.shared.compiled else _norm_rope
        heads, kv_heads, head_dim = attn.num_attention_heads, attn.num_key_value_heads, attn.head_dim
        cos_und, sin_und, cos_gen, sin_gen = (t.unsqueeze(1) for t in rotary_emb)
        q_gen = norm_rope(attn.norm_added_q, attn.add_q_proj(gen_seq).view(-1, heads, head_dim), cos_gen, sin_gen)
        k_gen = norm_rope(attn.norm_added_k, attn.add_k_proj(gen_seq).view(-1, kv_heads, head_dim), cos_gen, sin_gen)
        v_gen = attn.add_v_proj(gen_seq).view(-1, kv_heads, head_dim)
        if self.shared.text_cached:
            k_und_for_gen, v_und = packed.text_cache[self.layer]
            und_out = None
        else:
            q_und = attn.norm_q(attn.to_q(und_seq).view(-1, heads, head_dim))
            k_und = attn.norm_k(attn.to_k(und_seq).view(-1, kv_heads, head_dim))
            v_und = attn.to_v(und_seq).view(-1, kv_heads, head_dim)
            k_und_for_gen = attn.k_norm_und_for_gen(k_und) if attn.k_norm_und_for_gen is not None else k_und
            q_und, k_und = _rope(q_und, cos_und, sin_und), _rope(k_und, cos_und, sin_und)
            k_und_for_gen = _rope(k_und_for_gen, cos_und, sin_und)
            self.shared.new_text_cache[self.layer] = (k_und_for_gen, v_und)
            und_out = (q_und, k_und, v_und)
        attend = self._flex if isinstance(packed.layout, FlexLayout) else self._sdpa
        und_out, gen_out = attend(packed.layout, und_out, k_und_for_gen, v_und, q_gen, k_gen, v_gen)
        und_out = und_seq.new_zeros(0, attn.to_out.out_features) if und_out is None else attn.to_out(und_out)
        return und_out, attn.to_add_out(gen_out)

    @staticmethod
    def _sdpa(layout, und, k_und_for_gen, v_und, q_gen, k_gen, v_gen):
        # Each packed stream is split into its runs once (views; the backward is one concatenation,
        # where slicing run by run would add one full-size gradient per run).
        und_sizes = [rows * und_len for _, _, rows, und_len, _ in layout.runs]
        gen_sizes = [rows * gen_len for _, _, rows, _, gen_len in layout.runs]

        def runs_of(x, sizes, length_at):  # packed [L, h, d] -> per run [rows, length, h, d], views
            return [part.view(run[2], run[length_at], *x.shape[1:]) for part, run in zip(x.split(sizes), layout.runs)]

        def attend(q, k, v, causal):  # [rows, length, h, d] each -> packed [rows * length, h * d]
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 is_causal=causal, enable_gqa=True)
            return out.transpose(1, 2).flatten(-2).flatten(0, 1)

        text_keys, text_values = runs_of(k_und_for_gen, und_sizes, 3), runs_of(v_und, und_sizes, 3)
        gen_out = [
            # Joined along the sequence before the head transpose: two block copies per row, not a
            # transposing copy (which cost 7 % of an Edge forward).
            attend(q, torch.cat([k_text, k], dim=1), torch.cat([v_text, v], dim=1), False)
            for q, k, v, k_text, v_text in zip(runs_of(q_gen, gen_sizes, 4), runs_of(k_gen, gen_sizes, 4),
                                               runs_of(v_gen, gen_sizes, 4), text_keys, text_values)]
        und_out = None
        if und is not None:
            q_und, k_und, _ = und
            und_out = torch.cat([attend(q, k, v, True) for q, k, v in zip(
                runs_of(q_und, und_sizes, 3), runs_of(k_und, und_sizes, 3), text_values)])
        return und_out, torch.cat(gen_out)

    @staticmethod
    def _flex(layout, und, k_und_for_gen, v_und, q_gen, k_gen, v_gen):
        flex = _flex_attention(q_gen.device.type)

        def seq(x):  # packed [L, h, d] -> [1, h, L, d]
            return x.transpose(0, 1).unsqueeze(0)

        def packed(x):  # [1, h, L, d] -> packed [L, h * d]
            return x.squeeze(0).transpose(0, 1).flatten(-2)

        und_out = None
        if und is not None:
            q_und, k_und, _ = und
            und_out = packed(flex(seq(q_und), seq(k_und), seq(v_und), block_mask=layout.und_mask, enable_gqa=True))
        gen_out = flex(seq(q_gen), seq(torch.cat([k_und_for_gen, k_gen])), seq(torch.cat([v_und, v_gen])),
                       block_mask=layout.gen_mask, enable_gqa=True)
        return und_out, packed(gen_out)


@dataclass(eq=False)  # compared by identity: a CUDA graph belongs to the processors it was captured through
class ForwardContext:
    """What the per-layer processors of one transformer share during a forward."""

    packed: PackedRows | None = None
    text_cached: bool = False
    new_text_cache: list | None = None  # filled layer by layer; published on the packing once the forward succeeds
    compiled: bool = False


def install_processors(transformer, compile: bool = False) -> ForwardContext:
    """Give every attention layer of ``transformer`` a :class:`PackedRowsAttnProcessor`.

    ``compile``: also compile the vision pathway's norms and MLPs (their elementwise work
    fuses into few kernels); the same compiled code serves every layer.
    """
    shared = ForwardContext(compiled=compile)
    names = [name for name, module in transformer.named_modules() if hasattr(module, "set_processor")]
    transformer.set_attn_processor({f"{name}.processor": PackedRowsAttnProcessor(shared, i)
                                    for i, name in enumerate(names)})
    if compile:
        for layer in transformer.layers:
            for module in (layer.input_layernorm_moe_gen, layer.post_attention_layernorm_moe_gen, layer.mlp_moe_gen):
                module.compile()
    return shared
