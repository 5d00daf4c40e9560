"""The VAE's lean layers (``cosmos3_gym.model.vae_layers``) on the CPU: 16-env steps of the tiny world
(the embedded model, 32x32, chunks of 8, the env's defaults) with diffusers' layers and with the lean
ones, alternating, on one torch thread of a machine other jobs share; the frames compared
(output: vae_layers_cpu.txt)."""
import platform
import time

import numpy as np
import torch

from cosmos3_gym.model import vae_layers
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

torch.set_num_threads(1)
model = Cosmos3Model.embedded(device="cpu")
venv = Cosmos3WorldVectorEnv(16, model=model)
actions = np.random.default_rng(0).uniform(-1, 1, (3, *venv.action_space.shape)).astype(np.float32)
frames, seconds = {}, {"diffusers": [], "lean": []}
for round_ in range(3):
    for layers in ("diffusers", "lean"):
        vae_layers.restore(model.vae) if layers == "diffusers" else model.install_processors()
        venv.reset(seed=0)
        start = time.perf_counter()
        steps = [venv.step(a)[0] for a in actions]
        seconds[layers].append(time.perf_counter() - start)
        frames[layers] = np.stack(steps)
chunk = venv.action_space.shape[1]
for layers, times in seconds.items():
    best = min(times)
    print(f"{layers:9s}: 3 steps of 16 envs in {', '.join(f'{t:.2f}' for t in times)} s; best "
          f"{3 * 16 * chunk / best:.1f} imagined frames/s")
print("observations equal:", np.array_equal(frames["diffusers"], frames["lean"]))
print(f"{platform.machine()}, torch {torch.__version__}, 1 thread")
