"""Every private diffusers symbol the package relies on, and nothing else.

diffusers 0.42 ships Cosmos 3's prompt templates, position ids, conditioning preprocessors and
embodiment tables inside the pipeline module, most of them underscored. They are reached here
only, each under a name that says what it does, so that a diffusers upgrade that moves one of
them touches this file and no other.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from diffusers.models.transformers import transformer_cosmos3 as _transformer
from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as _pipeline

rotate_half = _transformer._rotate_half  # the rotary embedding's half rotation
mrope_text_ids = _pipeline.get_3d_mrope_ids_text_tokens  # 3-D mRoPE position ids of text tokens
mrope_vae_ids = _pipeline.get_3d_mrope_ids_vae_tokens  # ... of latent (vision, sound, action) tokens
preprocess_conditioning_image = _pipeline._preprocess_conditioning_image  # uint8 [H, W, 3] -> [1, 3, H, W]
ACTION_RESOLUTION_BINS = _pipeline._ACTION_RESOLUTION_BINS  # {tier: aspect-ratio bins} of action canvases


def embodiment_domains() -> dict[str, tuple[int, int]]:
    """``{embodiment: (domain id, raw action dimension)}`` for the embodiments with a fixed action width."""
    return {name: (_pipeline._EMBODIMENT_TO_DOMAIN_ID[name], dim)
            for name, dim in _pipeline._EMBODIMENT_TO_RAW_ACTION_DIM.items()}


def encode_video(pipeline, frames):
    """The pipeline's VAE encode of pixel frames ``[B, 3, F, H, W]`` in [-1, 1] (normalised latents)."""
    return pipeline._encode_video(frames)


def crop_action_latent(pipeline, latent, content):
    """A latent of an action canvas cropped back to the content the canvas was padded from."""
    return pipeline._remove_action_video_padding_from_latent(latent, content)


def action_canvas(pipeline, frames, resolution_tier: int, num_frames: int, device, dtype):
    """Frames in [0, 1] (a clip's float arrays, or a batch of clips ``[B, F, 3, H, W]`` as one tensor)
    padded into the tier's canvas as an action request pads them: ``(pixels [B, 3, num_frames, H, W]
    in [-1, 1], size record, ...)``."""
    return pipeline._prepare_action_video_conditioning(frames, resolution_tier, num_frames, device=device, dtype=dtype)


def sound_hop_size(sound_tokenizer) -> int:
    """Audio samples per sound latent frame."""
    return sound_tokenizer._hop_size


@contextlib.contextmanager
def quiet_legacy_weight_norm():
    """Building diffusers' AVAE decoder calls torch's deprecated ``weight_norm``: a FutureWarning per
    build that the caller can do nothing about (the loader folds the norm away, see ``model.py``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.nn\.utils\.weight_norm` is deprecated", FutureWarning)
        yield


@contextlib.contextmanager
def action_heads_without_host_checks(transformer):
    """Inside, the transformer's action heads (diffusers' ``DomainAwareLinear``) skip their check that
    every domain id is in range: a device-to-host read, which a CUDA graph capture cannot contain.
    The same embedding lookups and batched products otherwise. For domain ids checked on the host
    already, as every packing's are (the embodiment table gives them)."""
    heads = [m for m in transformer.modules() if isinstance(m, _transformer.DomainAwareLinear)]
    missing = object()
    own = [vars(head).get("forward", missing) for head in heads]  # a hook's forward on the instance, if any
    for head in heads:
        head.forward = functools.partial(_unchecked_domain_linear, head)
    try:
        yield
    finally:
        for head, forward in zip(heads, own):
            if forward is missing:
                del head.forward
            else:
                head.forward = forward


def _unchecked_domain_linear(head, x, domain_id):
    """diffusers' ``DomainAwareLinear.forward`` without its range check of the domain ids (its shape
    checks, which read nothing from the device, kept)."""
    domain_id = domain_id.to(device=x.device, dtype=torch.long).reshape(-1)
    if x.shape[0] != domain_id.shape[0]:
        raise ValueError(f"action domain ids: {domain_id.shape[0]} for {x.shape[0]} action tokens")
    if x.ndim not in (2, 3):
        raise ValueError(f"action heads take rank-2 or rank-3 inputs, got {tuple(x.shape)}")
    weight = head.fc(domain_id).view(domain_id.shape[0], head.input_size, head.output_size)
    bias = head.bias(domain_id).view(domain_id.shape[0], head.output_size)
    if x.ndim == 2:
        return torch.bmm(x.unsqueeze(1), weight).squeeze(1) + bias
    return torch.bmm(x, weight) + bias.unsqueeze(1)
