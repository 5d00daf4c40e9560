"""What building an action request's canvas costs per frame: 16 first frames of 256x256 padded into
the 256 tier's canvas as the whole 17-frame clip the pipeline pads (the last frame repeated), and as
the first frame alone, which is all the world envs encode (output: world_canvas_cpu.txt)."""
import platform
import time

import numpy as np
import torch

from cosmos3_gym.model.model import Cosmos3Model

torch.set_num_threads(1)
model = Cosmos3Model.embedded(device="cpu")
clips = [[frame] for frame in np.random.default_rng(0).integers(0, 256, (16, 256, 256, 3), dtype=np.uint8)]
canvases = {}
for frames in (17, 1, 17, 1):  # twice each, alternating, on a machine other jobs share
    start = time.perf_counter()
    canvases[frames], _ = model.action_canvases(clips, 256, frames)
    print(f"{frames:2d} frames: {(time.perf_counter() - start) * 1e3:6.0f} ms for 16 canvases "
          f"{tuple(canvases[frames].shape)}")
print("first frame's canvas equal:", torch.equal(canvases[17][:, :, :1], canvases[1]))
print(f"{platform.machine()}, torch {torch.__version__}, 1 thread")
