"""Rounding decoded frames to uint8: diffusers' float frames on the host (numpy) against the same math
in torch where the video is (what Cosmos3Model.decode does), for 16 chunks of 17 frames at 256x256.

    python benchmarks/decode_rounding_cpu.py > benchmarks/decode_rounding_cpu.txt
"""

import time

import numpy as np
import torch
from diffusers.video_processor import VideoProcessor

torch.set_num_threads(1)
processor = VideoProcessor(vae_scale_factor=16)
video = torch.randn(16, 3, 17, 256, 256, generator=torch.Generator().manual_seed(0)) * 0.7  # a VAE's output range
start = time.perf_counter()
host = (np.asarray(processor.postprocess_video(video, output_type="np")) * 255.0).round().astype(np.uint8)
host_seconds = time.perf_counter() - start
start = time.perf_counter()
frames = processor.postprocess_video(video, output_type="pt")
device = (frames * 255.0).round().to(torch.uint8).permute(0, 1, 3, 4, 2).contiguous().cpu().numpy()
device_seconds = time.perf_counter() - start
print(f"torch {torch.__version__}, 1 thread; frames {host.shape}; the same uint8 frames: {np.array_equal(host, device)}")
print(f"numpy on the host: {host_seconds:.3f} s; torch where the video is: {device_seconds:.3f} s")
