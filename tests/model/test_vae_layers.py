"""The VAE's leaner layers (``cosmos3_gym.model.vae_layers``) give diffusers' numbers bit for bit."""

import copy

import pytest
import torch
from diffusers import AutoencoderKLWan
from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d, WanRMS_norm, WanUpsample

from cosmos3_gym.model import vae_layers
from cosmos3_gym.model.tiny_model import VAE_CONFIG

# The embedded model's VAE (Wan 2.1's layout: resampling blocks, plain upsamplers) and a small VAE of
# Wan 2.2's layout (residual up blocks, patches), as Cosmos 3 ships it.
WAN22_SMALL = dict(base_dim=16, decoder_base_dim=16, z_dim=8, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                   temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12,
                   out_channels=12, scale_factor_spatial=16, scale_factor_temporal=4,
                   latents_mean=[0.0] * 8, latents_std=[1.0] * 8)


def both(config, dtype, device="cpu", fuse_norms=False):
    torch.manual_seed(0)
    reference = AutoencoderKLWan(**config).to(device, dtype).eval()
    with torch.no_grad():  # the norms' gains start at 1: other gains, so that a misapplied one shows
        for name, parameter in reference.named_parameters():
            if name.endswith("gamma"):
                parameter.uniform_(0.5, 1.5)
    lean = copy.deepcopy(reference)
    vae_layers.install(lean, fuse_norms=fuse_norms)
    assert {type(m) for m in lean.modules()} >= set(vae_layers.SUBCLASSES.values())
    return reference, lean


@pytest.mark.parametrize("config", [VAE_CONFIG, WAN22_SMALL], ids=["wan21_tiny", "wan22_small"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_and_encode_equal_diffusers_bit_for_bit(config, dtype):
    reference, lean = both(config, dtype)
    spatial = config["scale_factor_spatial"]
    generator = torch.Generator().manual_seed(1)
    latents = torch.randn(2, config["z_dim"], 3, 2, 2, generator=generator).to(dtype)  # 3 latent frames: cached frames
    video = torch.rand(2, 3, 9, 2 * spatial, 2 * spatial, generator=generator).to(dtype) * 2 - 1
    with torch.no_grad():
        assert torch.equal(lean.decode(latents).sample, reference.decode(latents).sample)
        assert torch.equal(lean.encode(video).latent_dist.mean, reference.encode(video).latent_dist.mean)


def test_gradients_flow_through_the_padded_buffers_as_through_f_pad():
    reference, lean = both(VAE_CONFIG, torch.float32)
    latents = torch.randn(1, 4, 2, 2, 2)
    grads = []
    for vae in (reference, lean):
        vae.zero_grad()
        vae.decode(latents).sample.square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in vae.decoder.parameters()]))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-7)


def test_install_is_idempotent_and_restore_gives_diffusers_classes_back():
    reference, lean = both(VAE_CONFIG, torch.float32, fuse_norms=True)
    vae_layers.install(lean, fuse_norms=True)
    norms = [m for m in lean.modules() if isinstance(m, vae_layers.FusedRMSNorm)]
    assert norms and all(m.fuse for m in norms)
    vae_layers.restore(lean)
    assert [type(m) for m in lean.modules()] == [type(m) for m in reference.modules()]


@pytest.mark.parametrize("config", [VAE_CONFIG, WAN22_SMALL], ids=["wan21_tiny", "wan22_small"])
def test_fused_norms_reshaped_for_one_kernel_decode_as_diffusers(config):
    """The fused path's reshaping to [B, C, rest] and back, run uncompiled on the CPU in bf16 (on CUDA the
    same function is compiled: the GPU test below)."""
    reference, lean = both(config, torch.bfloat16, fuse_norms=True)
    latents = torch.randn(2, config["z_dim"], 3, 2, 2, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(lean.decode(latents).sample, reference.decode(latents).sample)


def swapped(module, fuse=False):
    """A copy of one of diffusers' modules with its lean subclass."""
    lean = copy.deepcopy(module)
    lean.__class__ = vae_layers.SUBCLASSES[type(module)]
    if fuse:
        lean.fuse = True
    return lean


@pytest.mark.parametrize("images", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_a_fused_norm_equals_diffusers_norm_with_bias_and_zero_vectors(images, bias):
    torch.manual_seed(0)
    norm = WanRMS_norm(16, images=images, bias=bias).to(torch.bfloat16)
    with torch.no_grad():
        norm.gamma.uniform_(0.5, 1.5)
        if bias:
            norm.bias.uniform_(-1, 1)
    x = torch.randn(2, 16, *((3, 4, 5) if not images else (4, 5))).to(torch.bfloat16)
    x[0, :, 1] = 0  # all-zero channel vectors, and vectors far shorter than one: F.normalize's clamp at 1e-12
    x[1, :, 1] = torch.randn(x[1, :, 1].shape).to(torch.bfloat16) * 1e-9
    lean = swapped(norm, fuse=True)
    with torch.no_grad():
        assert torch.equal(lean(x), norm(x))


def test_the_fused_path_runs_only_without_autograd_and_on_contiguous_inputs(monkeypatch):
    def kernel(*_):
        raise AssertionError("the fused kernel ran")

    monkeypatch.setattr(vae_layers, "_norm_tail_kernel", lambda device_type: kernel)
    norm = swapped(WanRMS_norm(8, images=False).to(torch.bfloat16), fuse=True)
    x = torch.randn(1, 8, 2, 3, 3).to(torch.bfloat16)
    assert torch.equal(norm(x), super(vae_layers.FusedRMSNorm, norm).forward(x))  # autograd on: eager's path
    with torch.no_grad():
        strided = x.transpose(3, 4)
        assert torch.equal(norm(strided), super(vae_layers.FusedRMSNorm, norm).forward(strided))
        with pytest.raises(AssertionError, match="fused kernel ran"):
            norm(x)


def test_calls_outside_diffusers_patterns_take_diffusers_code():
    torch.manual_seed(0)
    conv = WanCausalConv3d(4, 6, 3, padding=1)
    lean = swapped(conv)
    x = torch.randn(2, 4, 3, 5, 5)
    # a cache of another batch size: diffusers' torch.cat refuses it (no broadcast)
    with pytest.raises(RuntimeError):
        conv(x, torch.randn(1, 4, 2, 5, 5))
    with pytest.raises(RuntimeError):
        lean(x, torch.randn(1, 4, 2, 5, 5))
    # a cache in another dtype: diffusers' torch.cat promotes it (a float32 cache makes a bf16 convolution's
    # input float32, which it refuses), where a copy into the buffer would round it silently
    half, half_lean = conv.to(torch.bfloat16), lean.to(torch.bfloat16)
    with pytest.raises(RuntimeError):
        half(x.to(torch.bfloat16), x[:, :, -2:])
    with pytest.raises(RuntimeError):
        half_lean(x.to(torch.bfloat16), x[:, :, -2:])
    conv, lean = half.float(), half_lean.float()
    # channels-last input: the same values and layout as diffusers'
    last = x.to(memory_format=torch.channels_last_3d)
    expected, got = conv(last, x[:, :, -2:]), lean(last, x[:, :, -2:])
    assert torch.equal(got, expected) and got.stride() == expected.stride()
    # float64 through the upsampler: diffusers rounds it to float32 on the way
    upsample = WanUpsample(scale_factor=(2.0, 2.0), mode="nearest-exact")
    y = torch.full((1, 1, 2, 2), 1 / 3, dtype=torch.float64)
    assert torch.equal(swapped(upsample)(y), upsample(y))


def test_the_model_installs_the_layers_and_fuses_only_on_cuda(tiny_model):
    from cosmos3_gym.model.model import Cosmos3Model

    kinds = {type(m) for m in tiny_model.vae.modules()}
    assert set(vae_layers.SUBCLASSES.values()) <= kinds and not kinds & set(vae_layers.SUBCLASSES)
    pipeline = copy.deepcopy(tiny_model.pipeline)
    vae_layers.restore(pipeline.vae)
    compiled = Cosmos3Model(pipeline, "cpu", torch.float32, compile=True)  # compiled, but on the CPU: no fusing
    norms = [m for m in compiled.vae.modules() if isinstance(m, vae_layers.FusedRMSNorm)]
    assert norms and not any(m.fuse for m in norms)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("config", [VAE_CONFIG, WAN22_SMALL], ids=["wan21_tiny", "wan22_small"])
def test_fused_norms_decode_as_diffusers_on_the_gpu(config):
    """bf16 on CUDA, the norms' elementwise chain compiled with eager numerics: the same frames bit for bit."""
    reference, lean = both(config, torch.bfloat16, "cuda", fuse_norms=True)
    latents = torch.randn(4, config["z_dim"], 3, 8, 8, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(lean.decode(latents).sample, reference.decode(latents).sample)


def test_the_fused_norms_need_two_compiled_graphs_for_every_batch_size_of_an_edge_world(monkeypatch):
    """Dynamo's graphs for the fused norms of the Edge-size Wan 2.2 VAE encoding and decoding a world's
    batches of 16, 4 and 1 envs (on meta tensors: Dynamo guards on shapes and layouts alone, so a CPU
    shows what a GPU compiles): one graph for batches of 2 or more, one for 1, far below Dynamo's
    recompile limit (8), after which the norms would run eagerly."""
    from cosmos3_gym.bench import WAN22_VAE_CONFIG

    graphs = []

    def count(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()
    compiled = torch.compile(vae_layers._norm_tail, dynamic=True, backend=count)
    monkeypatch.setattr(vae_layers, "_norm_tail_kernel", lambda device_type: compiled)
    with torch.device("meta"):
        vae = AutoencoderKLWan(**WAN22_VAE_CONFIG).to(torch.bfloat16).eval()
    vae_layers.install(vae, fuse_norms=True)
    with torch.no_grad():
        for batch in (16, 4, 1, 16):
            vae.decode(torch.empty(batch, 48, 5, 16, 16, dtype=torch.bfloat16, device="meta"))
            vae.encode(torch.empty(batch, 3, 17, 256, 256, dtype=torch.bfloat16, device="meta"))
    assert len(graphs) == 2
