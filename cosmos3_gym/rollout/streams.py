"""The generated streams of a request and their names: video always; sound and actions where a
request has them (``Cosmos3OmniPipeline``'s ``enable_sound`` and ``action=CosmosActionCondition``).

One table names each stream's tensors in an episode / a trajectory, its observation key and its
per-stream log-prob key, so that every stream is handled by the same loop.
"""

from __future__ import annotations

STREAMS = ("video", "sound", "action")
LATENTS = {"video": "latents", "sound": "sound_latents", "action": "action_latents"}
NOISES = {"video": "noises", "sound": "sound_noises", "action": "action_noises"}
OBS_KEYS = {"video": "latent", "sound": "sound_latent", "action": "action_latent"}
LOG_PROB_SUMS = {name: f"log_prob_sums_{name}" for name in STREAMS}  # trajectory / episode fields
LOG_PROB_INFO = {name: f"log_prob_sum_{name}" for name in STREAMS}  # per-step info keys
