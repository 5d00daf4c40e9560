"""One Edge transformer forward (text cached), timed for each way of running the vision pathway.

Variants (install_processors' switches, all with compiled norms/MLPs):
  baseline                  diffusers' decoder layers, their norm and MLP modules compiled one by one
  fused_layers              our decoder layer: residual additions fused into the norms
  run_buffers               diffusers' layers; attention without torch.cat (per-run key/value buffers,
                            per-run output projection written in place)
  fused_layers+run_buffers  both

Each variant: warm-up (compilation, text cache), then the median of several forwards, each between
torch.cuda.synchronize calls; TFLOP/s and % of the bf16 matmul peak measured in the same run, and
the largest absolute difference of the variant's velocities from the baseline's. The geometry is
`cosmos3-gym bench`'s: Edge at random weights, 832x480, 21 frames, 16 requests with CFG (32 rows).
A last section times cuDNN's SDPA alone at the forward's shape for three key/value layouts.

    PYTHONPATH=. python3 benchmarks/forward_variants.py --out benchmarks/forward_variants.txt
    python benchmarks/forward_variants.py --tiny --device cpu     # the embedded tiny model, a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from cosmos3_gym.bench import MODEL_CONFIGS, PROMPT, forward_flops, matmul_peak_tflops, random_model, sync_device
from cosmos3_gym.model.attention import install_processors
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.packing import RowSpec
from cosmos3_gym.rollout.transition import pack_cfg_rows

# name: (fused_layers, run_buffers). The fused variants run first: the baseline compiles the
# layers' norm and MLP modules in place, which would then sit inside the fused layers' compiled code.
VARIANTS = {"fused_layers": (True, False), "fused_layers+run_buffers": (True, True),
            "baseline": (False, False), "run_buffers": (False, True)}
REPORT_ORDER = ("baseline", "fused_layers", "run_buffers", "fused_layers+run_buffers")


def build(tiny: bool, device: torch.device, envs: int, frames: int, height: int, width: int):
    """The model, the packing of ``envs`` CFG requests (text cache not yet filled), their latents and timesteps."""
    if tiny:
        model = Cosmos3Model.embedded(device=device)
    else:
        model = random_model("edge", device, torch.bfloat16 if device.type == "cuda" else torch.float32, compile=True)
    shape = model.latent_shape(frames, height, width)
    cond, uncond = model.tokenize(PROMPT, "", frames, height, width, 24.0)
    row = RowSpec((), *shape[1:], 24.0)
    packed = pack_cfg_rows(model, [(cond, uncond, row)] * envs)
    g = torch.Generator(device=device).manual_seed(0)
    latents = {"video": [torch.randn(1, *shape, generator=g, device=device) for _ in packed.rows]}
    timesteps = [700.0] * len(packed.rows)
    return model, packed, latents, timesteps


def time_forward(model, packed, latents, timesteps, warmup: int, repeats: int):
    """(median seconds, velocities) of ``model.velocity`` over ``packed`` with its text cache filled."""
    packed.text_cache = None  # each variant records its own text cache
    for _ in range(warmup):
        velocities = model.velocity(packed, latents, timesteps)
    seconds = []
    for _ in range(repeats):
        sync_device(model.device)
        start = time.perf_counter()
        velocities = model.velocity(packed, latents, timesteps)
        sync_device(model.device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), velocities


def max_abs_difference(a, b) -> float:
    return max(float((x["video"] - y["video"]).abs().max()) for x, y in zip(a, b))


def attention_layouts(packed, config, device, repeats: int) -> list[str]:
    """cuDNN's SDPA alone over the first run of rows, for three layouts of the same tensors."""
    _, _, rows, text_len, gen_len = packed.layout.runs[0]
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q = torch.randn(rows, gen_len, heads, head_dim, device=device, dtype=dtype)
    kv = [torch.randn(rows, text_len + gen_len, kv_heads, head_dim, device=device, dtype=dtype) for _ in range(2)]
    layouts = {  # name: (q, k, v) as [rows, h, length, d]
        "q, k, v [rows, length, h, d] (today)": (q.transpose(1, 2), *(t.transpose(1, 2) for t in kv)),
        "q [rows, length, h, d]; k, v [rows, h, length, d] contiguous":
            (q.transpose(1, 2), *(t.transpose(1, 2).contiguous() for t in kv)),
        "q, k, v [rows, h, length, d] contiguous": tuple(t.transpose(1, 2).contiguous() for t in (q, *kv)),
    }
    flops = 4 * rows * heads * head_dim * gen_len * (text_len + gen_len)
    lines = []
    for name, (qq, kk, vv) in layouts.items():
        def attend():
            return F.scaled_dot_product_attention(qq, kk, vv, enable_gqa=True)

        attend()
        sync_device(device)
        start = time.perf_counter()
        for _ in range(repeats):
            attend()
        sync_device(device)
        seconds = (time.perf_counter() - start) / repeats
        lines.append(f"attention_layout {name}: {seconds * 1e3:.3f} ms per call ({rows} rows, {text_len}+{gen_len} "
                     f"keys), {flops / seconds / 1e12:.0f} TFLOP/s")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="the embedded tiny model at a small request (smoke run)")
    parser.add_argument("--envs", type=int, default=16, help="requests; each is a conditional and an unconditional row")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="also write the result lines to this file")
    args = parser.parse_args()
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    frames, height, width = (9, 32, 32) if args.tiny else (21, 480, 832)
    envs = 2 if args.tiny else args.envs

    lines = []

    def report(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    report(f"device {torch.cuda.get_device_name() if on_gpu else device}, torch {torch.__version__}, model "
           f"{'tiny (embedded)' if args.tiny else 'edge ' + str(MODEL_CONFIGS['edge'])}, request "
           f"{frames}x{height}x{width}, {envs} requests with CFG, text cached")
    peak = matmul_peak_tflops(device, size=1024 if args.tiny else 8192)
    report(f"matmul_peak_bf16: {peak:.0f} TFLOP/s (measured now)" if on_gpu else
           f"matmul_peak: {peak:.3f} TFLOP/s (CPU, bf16 8192^3 replaced by 1024^3)")
    model, packed, latents, timesteps = build(args.tiny, device, envs, frames, height, width)
    flops = forward_flops(packed, model.transformer.config, text_cached=True)
    report(f"{len(packed.rows)} rows, runs (rows, text, vision tokens): "
           f"{[(run[2], run[3], run[4]) for run in packed.layout.runs]}, {flops / 1e12:.2f} TFLOP per forward")

    results = {}
    for name, (fused_layers, run_buffers) in VARIANTS.items():
        model.context = install_processors(model.transformer, compile=True, fused_layers=fused_layers,
                                           run_buffers=run_buffers)
        results[name] = time_forward(model, packed, latents, timesteps, args.warmup, args.repeats)
    baseline = results["baseline"]
    for name in REPORT_ORDER:
        seconds, velocities = results[name]
        report(f"{name}: {seconds * 1e3:.1f} ms, {flops / seconds / 1e12:.0f} TFLOP/s = "
               f"{flops / seconds / 1e12 / peak:.1%} of matmul peak, {baseline[0] / seconds:.3f}x baseline, "
               f"max |velocity - baseline| {max_abs_difference(velocities, baseline[1]):.3e}")
    for line in attention_layouts(packed, model.transformer.config, device, args.repeats * 4):
        report(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
