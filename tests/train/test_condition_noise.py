"""Forward dynamics' conditions noised in training (``--condition-noise``): in closed loop the world env
conditions the model on frames it imagined, so the trainer can corrupt the clean condition latent.
The frames the model generates (the loss's targets) and every other task stay exactly as they were."""

import numpy as np
import pytest
import torch

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.tiny_model import TINY_CHECKPOINT
from cosmos3_gym.train.world_model import ActionPool, TrainArgs, training_batch

SCALE, CLIPS = 0.5, 256


@pytest.fixture(scope="module")
def model_and_pools():
    model = Cosmos3Model.from_pretrained(TINY_CHECKPOINT, device="cpu")
    pool = ActionPool.build(model, 8, {"turn": 1.0, "uniform": 1.0}, 5, 256, "cpu")
    return model, {"dynamics": pool, "expert": pool}


def _batch(model_and_pools, task, condition_noise):
    model, pools = model_and_pools
    args = TrainArgs(device="cpu", batch=CLIPS, condition_noise=condition_noise)
    return training_batch(model, task, args, None, np.random.default_rng(0), {}, pools)


def test_the_condition_gets_noise_of_the_drawn_scales_and_the_targets_none(model_and_pools):
    """The same draws with and without noise pick the same clips: the generated latent frames are
    equal bit for bit, and each clip's condition differs by Gaussian noise whose standard deviation,
    measured per clip, lies in [0, SCALE] and averages SCALE / 2 (the mean of U(0, SCALE))."""
    rows, clean, generated = _batch(model_and_pools, "forward_dynamics", 0.0)
    noisy_rows, noisy, _ = _batch(model_and_pools, "forward_dynamics", SCALE)
    assert [row.input_ids for row in rows] == [row.input_ids for row in noisy_rows]
    mask = generated["video"][0, 0, :, 0, 0]
    assert mask.tolist() == [False] + [True] * (len(mask) - 1)  # latent frame 0 is the condition
    torch.testing.assert_close(noisy["video"][:, :, 1:], clean["video"][:, :, 1:], rtol=0, atol=0)
    torch.testing.assert_close(noisy["action"], clean["action"], rtol=0, atol=0)
    difference = (noisy["video"][:, :, :1] - clean["video"][:, :, :1]).double().flatten(1)
    stds = difference.std(dim=1)
    assert difference.mean(dim=1).abs().max() < 0.1
    assert stds.min() > 0 and stds.max() < SCALE * 1.1
    # one level per clip, spread over [0, SCALE] (one per element would give every clip about SCALE / sqrt(3))
    assert stds.min() < 0.2 * SCALE and stds.max() > 0.8 * SCALE
    spread = SCALE / np.sqrt(12 * CLIPS)  # the standard error of the mean of CLIPS uniform draws
    assert abs(stds.mean().item() - SCALE / 2) < 4 * spread + 0.01


@pytest.mark.parametrize("task", ["inverse_dynamics", "policy"])
def test_other_tasks_are_left_clean(model_and_pools, task):
    _, clean, _ = _batch(model_and_pools, task, 0.0)
    _, noisy, _ = _batch(model_and_pools, task, SCALE)
    for name in clean:
        torch.testing.assert_close(noisy[name], clean[name], rtol=0, atol=0)
