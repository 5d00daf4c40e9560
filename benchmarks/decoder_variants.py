"""The Wan 2.2 VAE decoder of a 16-env Edge world step (16 chunks of 5 latent frames -> 17 frames at
256x256, bf16): where its time goes (torch.profiler, kernels by kind) and what compiling its
elementwise work or a channels-last layout buys, each variant in its own process, its frames compared
with the eager decoder's (decoder_variants.txt).

    python benchmarks/decoder_variants.py                 # every variant, one process each
    python benchmarks/decoder_variants.py eager lean_layers  # these (eager first: the others compare with it)
"""
import subprocess
import sys
import time

import numpy as np
import torch

VARIANTS = ("eager", "lean_layers", "lean_layers+fused_norms", "compiled_norms", "compiled_norms_emulated_casts", "compiled_residual_blocks",
            "compiled_decoder", "channels_last", "channels_last+compiled_decoder")
BASELINE = "/tmp/decoder_eager_frames.npy"


def build_vae():
    from diffusers import AutoencoderKLWan

    from cosmos3_gym.bench import WAN22_VAE_CONFIG

    torch.manual_seed(0)
    return AutoencoderKLWan(**WAN22_VAE_CONFIG).to("cuda", torch.bfloat16).eval()


def frames_of(vae, z):
    video = vae.decode(z).sample.float()
    return ((video.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


def kinds(profile) -> dict[str, float]:
    """Device ms per kind of kernel."""
    out: dict[str, float] = {}
    for event in profile.key_averages():
        if event.device_type != torch.autograd.DeviceType.CUDA or not event.self_device_time_total:
            continue
        name = event.key.lower()
        kind = ("convolution" if any(s in name for s in ("conv", "xmma", "implicit", "sm90_", "cudnn", "nvjet", "gemm"))
                else "triton (compiled)" if name.startswith("triton") else
                "copy, cat, pad" if any(s in name for s in ("copy", "cat", "pad", "reflection", "constant"))
                else "norm (reduction)" if any(s in name for s in ("reduce", "norm")) else
                "upsample" if "upsample" in name else "other elementwise")
        out[kind] = out.get(kind, 0.0) + event.self_device_time_total / 1e3
    return out


def run(variant: str) -> None:
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanResidualBlock, WanRMS_norm

    if "compiled" in variant:  # one compiled graph per module shape and cache state; the lean layers keep the defaults
        torch._dynamo.config.cache_size_limit = 256
        torch._dynamo.config.accumulated_cache_size_limit = 4096
    if "emulated_casts" in variant:
        torch._inductor.config.emulate_precision_casts = True
    vae = build_vae()
    z = torch.randn(16, 48, 5, 16, 16, generator=torch.Generator().manual_seed(1)).to("cuda", torch.bfloat16)
    if variant.startswith("channels_last"):
        for module in vae.modules():
            if isinstance(module, torch.nn.Conv3d):
                module.weight.data = module.weight.data.to(memory_format=torch.channels_last_3d)
    if "compiled_norms" in variant:
        for module in vae.decoder.modules():
            if isinstance(module, WanRMS_norm):
                module.compile()
    if "compiled_residual_blocks" in variant:
        for module in vae.decoder.modules():
            if isinstance(module, WanResidualBlock):
                module.compile()
    if "compiled_decoder" in variant:
        vae.decoder.compile()
    if variant.startswith("lean_layers"):  # cosmos3_gym.model.vae_layers, as Cosmos3Model installs them
        from cosmos3_gym.model import vae_layers
        vae_layers.install(vae, fuse_norms="fused_norms" in variant)
    with torch.no_grad():
        torch.cuda.synchronize(); start = time.perf_counter()
        frames_of(vae, z)
        torch.cuda.synchronize(); first = time.perf_counter() - start
        frames_of(vae, z)
        torch.cuda.synchronize(); start = time.perf_counter()
        for _ in range(3):
            frames = frames_of(vae, z)
        torch.cuda.synchronize(); seconds = (time.perf_counter() - start) / 3
        frames = frames.cpu().numpy()
        line = f"{variant}: decode {seconds * 1e3:.1f} ms (first call {first:.1f} s)"
        if variant == "eager":
            np.save(BASELINE, frames)
            flops = 0
            from torch.utils.flop_counter import FlopCounterMode
            with FlopCounterMode(display=False) as counter:
                frames_of(vae, z)
            flops = counter.get_total_flops()
            line += f", {flops / 1e12:.1f} TFLOP ({flops / seconds / 1e12:.0f} TFLOP/s)"
        else:
            base = np.load(BASELINE)
            diff = np.abs(frames.astype(int) - base)
            line += f"; frames vs eager: max diff {diff.max()} levels, share that differ {np.mean(diff > 0):.2e}"
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            frames_of(vae, z)
            torch.cuda.synchronize()
        split = kinds(profile)
        line += "\n  kernels by kind: " + ", ".join(f"{k} {v:.0f} ms" for k, v in sorted(split.items(), key=lambda kv: -kv[1]))
        print(line, flush=True)
        if variant == "eager":
            print(profile.key_averages().table(sort_by="self_cuda_time_total", row_limit=25, max_name_column_width=90),
                  flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        run(sys.argv[2])
    else:
        print("device", torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
        for variant in sys.argv[1:] or VARIANTS:
            done = subprocess.run([sys.executable, __file__, "--one", variant], capture_output=True, text=True,
                                  timeout=900)
            print(done.stdout.strip() or f"{variant}: failed (rc {done.returncode}): {done.stderr.strip()[-1500:]}",
                  flush=True)
