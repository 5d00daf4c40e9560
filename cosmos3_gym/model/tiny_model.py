"""The embedded tiny Cosmos 3: the real diffusers classes at a toy size.

:func:`build_tiny_components` makes the untrained model (fixed seed);
:mod:`cosmos3_gym.train.world_model` trains it on the procedural world of
:mod:`cosmos3_gym.rollout.procedural_world` and writes the checkpoint shipped in
``cosmos3_gym/assets/cosmos3-tiny`` with :func:`save_checkpoint`. It has the diffusers
layout of ``nvidia/Cosmos3-*`` (``transformer/``, ``vae/``, ``text_tokenizer/``,
``scheduler/``, ``sound_tokenizer/``), so it loads through the same loader as a real checkpoint and every code
path (packing, mRoPE, CFG, VAE decode) is the one a real checkpoint runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

TINY_CHECKPOINT = Path(__file__).parents[1] / "assets" / "cosmos3-tiny"

# Special tokens of the Cosmos 3 text tokenizer (Qwen chat format plus vision markers).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
]

# Qwen-style chat template; `add_vision_id` is accepted (and ignored) like the real one.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TRANSFORMER_CONFIG = dict(
    hidden_size=128,
    head_dim=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=384,
    num_hidden_layers=4,
    latent_channel=4,
    latent_patch_size=2,
    patch_latent_dim=2 * 2 * 4,
    rope_axes_dim=[8, 4, 4],
    hidden_act="silu",
    # Action heads (DomainAwareLinear, one weight pair per embodiment domain; the world's domain is
    # "pusht", raw action dimension 2, padded to action_dim) and the sound stream.
    action_gen=True,
    action_dim=8,
    sound_gen=True,
    sound_dim=8,
    sound_latent_fps=100.0,
)

# A tiny decoder-only AVAE: 8 latent channels, hop 8 samples, mono 800 Hz (100 sound latents per second).
SOUND_TOKENIZER_CONFIG = dict(
    sampling_rate=800,
    vocoder_input_dim=8,
    dec_dim=8,
    dec_c_mults=[1, 2],
    dec_strides=[2, 4],
    dec_out_channels=1,
    stereo=False,
    encoder_enabled=False,
)

VAE_CONFIG = dict(
    base_dim=16,
    z_dim=4,
    dim_mult=[1, 2, 2],
    num_res_blocks=1,
    attn_scales=[],
    temperal_downsample=[True, True],
    latents_mean=[0.0] * 4,
    latents_std=[1.0] * 4,
    scale_factor_temporal=4,
    scale_factor_spatial=4,
)

SCHEDULER_CONFIG = dict(
    num_train_timesteps=1000,
    prediction_type="flow_prediction",
    use_flow_sigmas=True,
    flow_shift=3.0,
    final_sigmas_type="zero",
)


def build_tiny_tokenizer():
    """A byte-level tokenizer (no merges) with the Cosmos 3 chat template and special tokens.

    Byte-level with no merges makes it lossless for any UTF-8 prompt and identical on every machine.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_vocab = {token: i for i, token in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=byte_vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_components(seed: int = 0) -> dict:
    """The untrained tiny model: ``text_tokenizer``, ``transformer``, ``vae``, ``sound_tokenizer``, ``scheduler``."""
    from diffusers import AutoencoderKLWan, Cosmos3AVAEAudioTokenizer, Cosmos3OmniTransformer, UniPCMultistepScheduler

    from .diffusers_private import quiet_legacy_weight_norm

    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(seed)
    transformer = Cosmos3OmniTransformer(vocab_size=len(tokenizer), **TRANSFORMER_CONFIG)
    scale_action_heads(transformer)
    vae = AutoencoderKLWan(**VAE_CONFIG)  # before the sound tokenizer: the draws' order fixes the weights
    with quiet_legacy_weight_norm():
        sound_tokenizer = Cosmos3AVAEAudioTokenizer(**SOUND_TOKENIZER_CONFIG)
    return {
        "text_tokenizer": tokenizer,
        "transformer": transformer,
        "vae": vae,
        "sound_tokenizer": sound_tokenizer,
        "scheduler": UniPCMultistepScheduler(**SCHEDULER_CONFIG),
    }


@torch.no_grad()
def scale_action_heads(transformer) -> None:
    """Give the action heads a linear layer's scale: ``DomainAwareLinear`` stores its weights in an
    ``nn.Embedding``, initialised N(0, 1), which would make the untrained action velocity ~10x too large."""
    for head in (transformer.action_proj_in, transformer.action_proj_out):
        head.fc.weight.mul_(head.input_size ** -0.5)
        head.bias.weight.zero_()


def save_checkpoint(path: str | Path, components: dict) -> Path:
    """Write ``components`` in the diffusers layout of ``nvidia/Cosmos3-*`` (safetensors weights)."""
    path = Path(path)
    components["text_tokenizer"].save_pretrained(path / "text_tokenizer")
    components["transformer"].save_pretrained(path / "transformer", safe_serialization=True)
    components["vae"].save_pretrained(path / "vae", safe_serialization=True)
    components["sound_tokenizer"].save_pretrained(path / "sound_tokenizer", safe_serialization=True)
    components["scheduler"].save_pretrained(path / "scheduler")
    model_index = {
        "_class_name": "Cosmos3OmniPipeline",
        "_diffusers_version": "0.42.1",
        "enable_safety_checker": False,
        "default_use_system_prompt": True,
        "use_native_flow_schedule": False,
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_tokenizer": ["transformers", "PreTrainedTokenizerFast"],
        "transformer": ["diffusers", "Cosmos3OmniTransformer"],
        "vae": ["diffusers", "AutoencoderKLWan"],
        "sound_tokenizer": ["diffusers", "Cosmos3AVAEAudioTokenizer"],
    }
    (path / "model_index.json").write_text(json.dumps(model_index, indent=2) + "\n")
    return path


def build_tiny_checkpoint(path: str | Path, seed: int = 0) -> Path:
    """Write the untrained tiny model as a checkpoint directory."""
    return save_checkpoint(path, build_tiny_components(seed))
