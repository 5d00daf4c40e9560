"""Where a 16-env Edge world step goes: the batched encode and the decode (NVIDIA H100 run: world_vae_time.txt)."""
import time
import numpy as np
import torch
from cosmos3_gym.bench import random_model, RAW_DIM

def timed(fn, n=3):
    fn(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): out = fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n, out

model = random_model("edge", "cuda", torch.bfloat16, compile=False, action_gen=True)
rng = np.random.default_rng(0)
images = rng.integers(0, 256, (16, 256, 256, 3), dtype=np.uint8)
actions = rng.uniform(-1, 1, (16, 16, RAW_DIM)).astype(np.float32)
enc = lambda: model.encode_action_conditions("forward_dynamics", 16, 256, images, actions)
cond = enc()
latents = torch.randn(16, *cond[0].latent.shape, device="cuda")
print("condition latent", tuple(cond[0].latent.shape))
dec = lambda: model.decode(latents)
results = {}
for name in ("default", "channels_last_3d", "cudnn.benchmark"):
    if name == "channels_last_3d":
        model.vae.to(memory_format=torch.channels_last_3d)
    if name == "cudnn.benchmark":
        torch.backends.cudnn.benchmark = True
    e, _ = timed(enc); d, frames = timed(dec)
    results[name] = frames
    print(f"{name}: encode 16 frames {e*1e3:.1f} ms, decode 16 x {frames.shape[1]} frames {d*1e3:.1f} ms "
          f"(frames {frames.shape}); same frames as default: {np.array_equal(frames, results['default'])}, "
          f"max diff {np.abs(frames.astype(int) - results['default']).max()}", flush=True)
