"""Where a 16-env Edge world step goes: the batched encode and the decode, with cuDNN's heuristics and
with its autotuner (``cudnn.benchmark``), and with the VAE's 3-D convolutions in channels-last layout
(NVIDIA H100 runs: world_vae_time.txt)."""
import time

import numpy as np
import torch

from cosmos3_gym.bench import RAW_DIM, random_model


def timed(fn, n=3):
    fn(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n):
        out = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n, out


def channels_last_convolutions(vae):
    """The 3-D convolutions' weights in channels-last layout (``vae.to(memory_format=...)`` refuses the
    VAE's other parameters)."""
    for module in vae.modules():
        if isinstance(module, torch.nn.Conv3d):
            module.weight.data = module.weight.data.to(memory_format=torch.channels_last_3d)


model = random_model("edge", "cuda", torch.bfloat16, compile=False, action_gen=True)
rng = np.random.default_rng(0)
images = rng.integers(0, 256, (16, 256, 256, 3), dtype=np.uint8)
actions = rng.uniform(-1, 1, (16, 16, RAW_DIM)).astype(np.float32)
enc = lambda: model.encode_action_conditions("forward_dynamics", 16, 256, images, actions)
cond = enc()
latents = torch.randn(16, *cond[0].latent.shape, device="cuda")
print("device", torch.cuda.get_device_name(), "torch", torch.__version__,
      "condition latent", tuple(cond[0].latent.shape))
dec = lambda: model.decode(latents)
results = {}
for name in ("default", "cudnn.benchmark", "channels_last_3d + cudnn.benchmark"):
    try:
        if name.startswith("channels_last_3d"):
            channels_last_convolutions(model.vae)
        with torch.backends.cudnn.flags(enabled=True, benchmark="benchmark" in name, deterministic=False,
                                        allow_tf32=True):
            e, _ = timed(enc)
            d, frames = timed(dec)
    except Exception as error:  # a variant that fails is reported, the next still runs
        print(f"{name}: failed: {error!r}", flush=True)
        continue
    results[name] = frames
    print(f"{name}: encode 16 frames {e*1e3:.1f} ms, decode 16 x {frames.shape[1]} frames {d*1e3:.1f} ms "
          f"(frames {frames.shape}); same frames as default: {np.array_equal(frames, results['default'])}, "
          f"max diff {np.abs(frames.astype(int) - results['default']).max()}, "
          f"share of values that differ {np.mean(frames != results['default']):.2e}", flush=True)
