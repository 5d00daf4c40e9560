"""The procedural trainer's dynamics loss weighted on the object (``--latent-foreground-weight``): the
object is a few percent of a 32x32 frame, and where it ends up is what the world's success reads."""

import json

import numpy as np
import pytest
import torch

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.tiny_model import TINY_CHECKPOINT
from cosmos3_gym.rollout.procedural_world import action_chunks
from cosmos3_gym.train.world_model import ActionPool, TrainArgs, main, training_batch

MIX, SEED, WEIGHT = {"turn": 1.0, "uniform": 1.0}, 5, 9.0


@pytest.fixture(scope="module")
def model():
    return Cosmos3Model.from_pretrained(TINY_CHECKPOINT, device="cpu")


def test_the_pool_weighs_the_latent_cells_that_see_the_object(model):
    """Against numpy loops over the same clips: a latent element weighs 1 + W where any pixel of its
    frames (frame 0 alone, then groups of four) and of its 4x4 cell is the object (brighter than 90 in
    some channel), else 1; the latents are those of a pool without weights."""
    pool = ActionPool.build(model, 4, MIX, SEED, 256, "cpu", foreground_weight=WEIGHT)
    plain = ActionPool.build(model, 4, MIX, SEED, 256, "cpu")
    assert plain.weights is None and torch.equal(pool.latents, plain.latents)
    frames = action_chunks(np.random.default_rng(SEED), 4, 8, mix=MIX)[1]
    step, cell = model.temporal_compression, model.spatial_compression
    groups = [[0]] + [list(range(1 + step * t, 1 + step * (t + 1))) for t in range((frames.shape[1] - 1) // step)]
    pixels = frames.max(axis=-1) > 90
    expected = np.ones(pool.weights.shape, dtype=np.float32)
    for b in range(len(frames)):
        for t, group in enumerate(groups):
            for i in range(frames.shape[2] // cell):
                for j in range(frames.shape[3] // cell):
                    if pixels[b, group, i * cell:(i + 1) * cell, j * cell:(j + 1) * cell].any():
                        expected[b, 0, t, i, j] = 1.0 + WEIGHT
    np.testing.assert_array_equal(pool.weights.numpy(), expected)
    assert pool.weights.shape[2:] == pool.latents.shape[2:]
    assert 0.0 < (expected > 1).mean() < 0.5  # the object, not the background


def test_forward_dynamics_batches_carry_the_weights_on_the_generated_frames(model):
    pool = ActionPool.build(model, 4, MIX, SEED, 256, "cpu", foreground_weight=WEIGHT)
    args = TrainArgs(device="cpu", batch=6, uncond_prob=0.0)
    _, x0, generated = training_batch(model, "forward_dynamics", args, None, np.random.default_rng(1), {},
                                      {"dynamics": pool})
    for row in range(args.batch):
        (clip,) = [j for j in range(len(pool.latents)) if torch.equal(pool.latents[j], x0["video"][row])]
        weights = generated["video"][row]
        assert (weights[:, 0] == 0).all()  # the condition frame is given, not generated
        torch.testing.assert_close(weights[:, 1:], pool.weights[clip][:, 1:].expand_as(weights[:, 1:]),
                                   rtol=0, atol=0)


def _one_step(tmp_path, *flags) -> tuple[float, torch.Tensor]:
    from safetensors.torch import load_file

    main(["--device", "cpu", "--init-from", str(TINY_CHECKPOINT), "--vae-steps", "0", "--steps", "1", "--batch", "2",
          "--data-workers", "0", "--action-pool", "4", "--task-weights", "forward_dynamics=1", "--log-every", "1",
          "--out", str(tmp_path), *flags])
    loss = json.loads((tmp_path / "training.json").read_text())["log"][-1]["loss"]
    return loss, load_file(tmp_path / "transformer" / "diffusion_pytorch_model.safetensors")["proj_out.weight"]


def test_the_flag_reaches_the_loss(tmp_path):
    """The same one-step run with and without the weight: the same batch (seeds), another loss, other weights."""
    plain_loss, plain = _one_step(tmp_path / "plain")
    weighted_loss, weighted = _one_step(tmp_path / "weighted", "--latent-foreground-weight", "20")
    assert weighted_loss != plain_loss and not torch.equal(weighted, plain)
    assert json.loads((tmp_path / "weighted" / "training.json").read_text())["args"]["latent_foreground_weight"] == 20
