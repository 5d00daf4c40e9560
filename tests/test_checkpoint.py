"""The embedded checkpoint: a real diffusers layout, reproducible from its builder."""

import json

import torch
from safetensors.torch import load_file

from cosmos3_gym.generator import Cosmos3Generator
from cosmos3_gym.tiny_model import TINY_CHECKPOINT, build_tiny_checkpoint


def test_shipped_checkpoint_is_what_the_builder_writes(tmp_path):
    build_tiny_checkpoint(tmp_path)
    for component in ("transformer", "vae"):
        shipped = load_file(TINY_CHECKPOINT / component / "diffusion_pytorch_model.safetensors")
        rebuilt = load_file(tmp_path / component / "diffusion_pytorch_model.safetensors")
        assert shipped.keys() == rebuilt.keys()
        assert all(torch.equal(shipped[k], rebuilt[k]) for k in shipped)
        assert json.loads((TINY_CHECKPOINT / component / "config.json").read_text())["_class_name"] == \
            json.loads((tmp_path / component / "config.json").read_text())["_class_name"]
    assert (TINY_CHECKPOINT / "text_tokenizer" / "tokenizer.json").read_text() == \
        (tmp_path / "text_tokenizer" / "tokenizer.json").read_text()


def test_loads_through_the_checkpoint_loader(tmp_path):
    build_tiny_checkpoint(tmp_path)
    generator = Cosmos3Generator.from_pretrained(tmp_path, device="cpu")
    assert type(generator.transformer).__name__ == "Cosmos3OmniTransformer"
    assert type(generator.vae).__name__ == "AutoencoderKLWan"
    assert generator.dtype == torch.float32
    tokenizer = generator.tokenizer
    assert tokenizer.convert_tokens_to_ids("<|vision_start|>") != tokenizer.unk_token_id
    assert tokenizer.decode(tokenizer("a red ball")["input_ids"]) == "a red ball"
