"""The Cosmos 3 decoder layer's forward with the vision pathway's residual additions fused into its norms.

diffusers' ``Cosmos3VLTextMoTDecoderLayer`` adds each sublayer's output to the residual stream and
then norms the sum in a separate call: two passes over the full vision stream where one does. This
forward computes the same operations in the same order (so it is bit-identical to diffusers' layer
in eager mode) but groups them into functions that torch.compile turns into one kernel per group:

* residual + attention output, then the post-attention norm (one kernel: the new residual and the
  normed value);
* the MLP, then residual + MLP output and the *next* layer's input norm (one kernel after the down
  projection). The normed value rides on the layer's output tensor to the next layer, which uses it
  when it receives that very tensor; the last layer hands its output to the transformer's final norm.

The text (und) pathway is diffusers' own code: it runs on the recording forward only (later forwards
read the cached text keys and values) and its sequence is empty otherwise.
"""

from __future__ import annotations

import functools

import torch

# Attribute of a layer's vision output carrying ``(norm, norm(output))`` for the layer that receives it.
_NORMED = "_cosmos3_gym_normed"


def _norm(norm, x):
    return norm(x)


def _add_norm(norm, residual, update):
    """The residual addition and the norm that follows it (diffusers' order)."""
    residual = residual + update
    return residual, norm(residual)


def _mlp_add_norm(mlp, next_norm, residual, normed):
    """The MLP, its residual addition and, if a layer follows, that layer's input norm."""
    out = residual + mlp(normed)
    return out, (None if next_norm is None else next_norm(out))


@functools.cache
def _compiled(fn):
    return torch.compile(fn)


class FusedDecoderLayerForward:
    """``forward`` of one ``Cosmos3VLTextMoTDecoderLayer`` with fused residual additions.

    ``next_norm``: the following layer's ``input_layernorm_moe_gen`` (None for the last layer).
    ``compiled``: run the vision pathway's groups through torch.compile (the same compiled code
    serves every layer); eager otherwise, which is exactly diffusers' arithmetic.
    """

    def __init__(self, layer, next_norm, compiled: bool):
        self.layer, self.next_norm, self.compiled = layer, next_norm, compiled

    def __call__(self, und_seq, gen_seq, rotary_emb):
        layer = self.layer
        run = _compiled if self.compiled else (lambda fn: fn)
        carried = getattr(gen_seq, _NORMED, None)
        if carried is not None and carried[0] is layer.input_layernorm_moe_gen:
            gen_norm = carried[1]
        else:
            gen_norm = run(_norm)(layer.input_layernorm_moe_gen, gen_seq)
        und_attn_out, gen_attn_out = layer.self_attn(layer.input_layernorm(und_seq), gen_norm, rotary_emb)
        residual_und = und_seq + und_attn_out
        residual_gen, gen_norm = run(_add_norm)(layer.post_attention_layernorm_moe_gen, gen_seq, gen_attn_out)
        out_und = residual_und + layer.mlp(layer.post_attention_layernorm(residual_und))
        out_gen, next_normed = run(_mlp_add_norm)(layer.mlp_moe_gen, self.next_norm, residual_gen, gen_norm)
        if next_normed is not None:
            setattr(out_gen, _NORMED, (self.next_norm, next_normed))
        return out_und, out_gen


def install_fused_layers(transformer, compiled: bool) -> None:
    """Replace every decoder layer's forward with :class:`FusedDecoderLayerForward`."""
    layers = list(transformer.layers)
    for layer, following in zip(layers, layers[1:] + [None]):
        next_norm = None if following is None else following.input_layernorm_moe_gen
        layer.forward = FusedDecoderLayerForward(layer, next_norm, compiled)


def remove_fused_layers(transformer) -> None:
    """Give every decoder layer diffusers' forward back."""
    for layer in transformer.layers:
        layer.__dict__.pop("forward", None)
