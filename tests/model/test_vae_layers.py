"""The VAE's leaner layers (``cosmos3_gym.model.vae_layers``) give diffusers' numbers bit for bit."""

import copy

import pytest
import torch
from diffusers import AutoencoderKLWan

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
