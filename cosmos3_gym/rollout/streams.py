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


def embodiment_domains() -> dict[str, tuple[int, int]]:
    """``{domain: (domain id, raw action dimension)}`` of the Cosmos 3 embodiments with a fixed action width."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
        _EMBODIMENT_TO_DOMAIN_ID,
        _EMBODIMENT_TO_RAW_ACTION_DIM,
    )

    return {name: (_EMBODIMENT_TO_DOMAIN_ID[name], dim) for name, dim in _EMBODIMENT_TO_RAW_ACTION_DIM.items()}


def checked_domain(domain, action_dim: int, name: str = "domain") -> tuple[int, int]:
    """``(domain id, raw action dimension)`` of ``domain``, or ``ValueError`` saying what is allowed."""
    domains = embodiment_domains()
    if not isinstance(domain, str) or domain not in domains:
        raise ValueError(f"{name}={domain!r} is not a Cosmos 3 embodiment with a fixed action width; "
                         f"choose one of {sorted(domains)}")
    if domains[domain][1] > action_dim:
        raise ValueError(f"{name}={domain!r} has {domains[domain][1]}-dimensional actions; this model's action "
                         f"heads have action_dim={action_dim}")
    return domains[domain]
