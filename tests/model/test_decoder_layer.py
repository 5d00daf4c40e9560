"""Our decoder layer (residual additions fused into the norms when compiled) computes exactly what
diffusers' ``Cosmos3VLTextMoTDecoderLayer`` computes, and the run-buffer attention exactly what the
default SDPA path computes."""

import copy

import pytest
import torch

from cosmos3_gym.model.attention import install_processors
from cosmos3_gym.model.decoder_layer import install_fused_layers, remove_fused_layers
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.packing import RowSpec

SMALL = dict(hidden_size=64, head_dim=16, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
             num_hidden_layers=3, latent_channel=4, latent_patch_size=2, patch_latent_dim=16, rope_axes_dim=[4, 2, 2])


def _stack(transformer, und_seq, gen_seq, rotary_emb):
    """The decoder layers one after the other, as the transformer's forward runs them."""
    for layer in transformer.layers:
        und_seq, gen_seq = layer(und_seq, gen_seq, rotary_emb)
    return und_seq, gen_seq


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden_act", ["relu2", "silu"])  # Edge's Nemotron norms, and diffusers' RMSNorm
@pytest.mark.parametrize("und_len", [0, 7])  # text cached (no text tokens), and the recording forward
def test_fused_layers_match_diffusers_layers_bit_for_bit(dtype, hidden_act, und_len):
    from diffusers import Cosmos3OmniTransformer

    torch.manual_seed(0)
    transformer = Cosmos3OmniTransformer(**SMALL, hidden_act=hidden_act).to(dtype)
    with torch.no_grad():
        for parameter in transformer.parameters():  # norm weights away from 1, so that a skipped norm shows
            parameter.normal_(0.0, 0.3)
    g = torch.Generator().manual_seed(1)
    gen_len, hidden, head_dim = 40, SMALL["hidden_size"], SMALL["head_dim"]
    und_seq = torch.randn(und_len, hidden, generator=g).to(dtype)
    gen_seq = torch.randn(gen_len, hidden, generator=g).to(dtype)
    rotary_emb = tuple(torch.randn(n, head_dim, generator=g).to(dtype) for n in (und_len, und_len, gen_len, gen_len))

    with torch.no_grad():
        expected = _stack(transformer, und_seq, gen_seq, rotary_emb)
        install_fused_layers(transformer, compiled=False)
        got = _stack(transformer, und_seq, gen_seq, rotary_emb)
        remove_fused_layers(transformer)
        again = _stack(transformer, und_seq, gen_seq, rotary_emb)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert torch.equal(again[1], expected[1])  # diffusers' forward is back

    # A layer that reads the carried norm of another layer's weights must differ: the check has teeth.
    with torch.no_grad():
        install_fused_layers(transformer, compiled=False)
        transformer.layers[0].forward.next_norm = transformer.layers[2].input_layernorm_moe_gen
        transformer.layers[1].input_layernorm_moe_gen = transformer.layers[2].input_layernorm_moe_gen
        broken = _stack(transformer, und_seq, gen_seq, rotary_emb)
    assert not torch.equal(broken[1], expected[1])


def _velocities(model, rows, latents, timesteps):
    """The recording forward's velocities, then the text-cached one's."""
    packed = model.pack(rows)
    return [model.velocity(packed, {"video": latents}, timesteps) for _ in range(2)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_with_fused_layers_and_run_buffers_matches_the_default(tiny_model, dtype):
    """Whole forwards, two runs of rows (two prompt lengths), eager: fused layers and the run-buffer
    attention leave every velocity bit-identical."""
    pipeline = copy.deepcopy(tiny_model.pipeline)
    model = Cosmos3Model(pipeline, "cpu", torch.float32, compile=False)
    if dtype != torch.float32:
        model.transformer.to(dtype)
        model.dtype = dtype
    shape = model.latent_shape(9, 32, 32)
    prompts = ["a red ball", "a red ball", "a green square slides to the left", "a green square slides to the left"]
    rows = [RowSpec(tuple(model.tokenize(p, "", 9, 32, 32, 24.0)[0]), *shape[1:], 24.0) for p in prompts]
    latents = [torch.randn(1, *shape, generator=torch.Generator().manual_seed(i)) for i in range(len(rows))]
    timesteps = [800.0, 300.0, 500.0, 100.0]
    expected = _velocities(model, rows, latents, timesteps)

    model.context = install_processors(model.transformer, run_buffers=True)
    install_fused_layers(model.transformer, compiled=False)
    got = _velocities(model, rows, latents, timesteps)
    for step_got, step_expected in zip(got, expected):
        for a, b in zip(step_got, step_expected):
            assert torch.equal(a["video"], b["video"])
