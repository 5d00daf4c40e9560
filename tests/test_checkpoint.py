"""The embedded checkpoint: a real diffusers layout, the builder's architecture, trained weights."""

import json

import torch
from safetensors.torch import load_file

from cosmos3_gym.generator import Cosmos3Generator
from cosmos3_gym.tiny_model import TINY_CHECKPOINT, build_tiny_checkpoint


def test_shipped_checkpoint_is_the_builders_model_trained(tmp_path):
    build_tiny_checkpoint(tmp_path)
    for component in ("transformer", "vae"):
        shipped = load_file(TINY_CHECKPOINT / component / "diffusion_pytorch_model.safetensors")
        untrained = load_file(tmp_path / component / "diffusion_pytorch_model.safetensors")
        assert shipped.keys() == untrained.keys()
        assert all(shipped[k].shape == untrained[k].shape for k in shipped)
        changed = sum(not torch.equal(shipped[k], untrained[k]) for k in shipped)
        assert changed > 0.9 * len(shipped)  # trained, not the initial weights
    assert (TINY_CHECKPOINT / "text_tokenizer" / "tokenizer.json").read_text() == \
        (tmp_path / "text_tokenizer" / "tokenizer.json").read_text()
    record = json.loads((TINY_CHECKPOINT / "training.json").read_text())
    assert record["command"].startswith("python -m cosmos3_gym.train_world_model")
    assert record["args"]["data_seed"] == 0
    losses = [r["loss"] for r in record["log"] if r["stage"] == "transformer"]
    assert losses[-1] < 0.5 * losses[0]
    vae_config = json.loads((TINY_CHECKPOINT / "vae" / "config.json").read_text())
    assert vae_config["latents_std"] != [1.0] * 4  # normalisation fitted to the data


def test_loads_through_the_checkpoint_loader(tmp_path):
    build_tiny_checkpoint(tmp_path)
    generator = Cosmos3Generator.from_pretrained(tmp_path, device="cpu")
    assert type(generator.transformer).__name__ == "Cosmos3OmniTransformer"
    assert type(generator.vae).__name__ == "AutoencoderKLWan"
    assert generator.dtype == torch.float32
    tokenizer = generator.tokenizer
    assert tokenizer.convert_tokens_to_ids("<|vision_start|>") != tokenizer.unk_token_id
    assert tokenizer.decode(tokenizer("a red ball")["input_ids"]) == "a red ball"


def test_trainer_runs_and_its_output_loads(tmp_path):
    from cosmos3_gym.train_world_model import main

    main(["--device", "cpu", "--vae-steps", "2", "--steps", "2", "--batch", "2", "--vae-batch", "2",
          "--out", str(tmp_path)])
    record = json.loads((tmp_path / "training.json").read_text())
    assert [r["stage"] for r in record["log"]] == ["vae", "vae", "transformer", "transformer"]
    assert (tmp_path / "training_curve.png").stat().st_size > 1000
    generator = Cosmos3Generator.from_pretrained(tmp_path, device="cpu")
    assert generator.vae.config.latents_mean != [0.0] * 4
