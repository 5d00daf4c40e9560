"""GPU code paths (FlexAttention, compiled vision pathway, bf16): run only where CUDA is."""

import pytest
import torch

from cosmos3_gym.bench import random_model
from cosmos3_gym.packing import RowSpec
from cosmos3_gym.vector_env import Cosmos3RolloutVectorEnv

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_flex_rows_equal_sdpa_rows_at_a_real_head_size():
    generator = random_model("edge", "cuda", torch.bfloat16, compile=False)
    shape = generator.latent_shape(9, 256, 256)
    rows = [RowSpec(tuple(generator.tokenize(p, "", 9, 256, 256, 24.0)[0]), *shape[1:], 24.0)
            for p in ("a red ball", "a much longer prompt about a green square sliding to the left")]
    latents = [torch.randn(1, *shape, device="cuda") for _ in rows]
    flex = generator.velocity(generator.pack(rows), {"video": latents}, [900.0, 300.0])
    generator.attention = "sdpa"
    sdpa = generator.velocity(generator.pack(rows), {"video": latents}, [900.0, 300.0])
    for a, b in zip(flex, sdpa):
        a, b = a["video"], b["video"]
        assert (a - b).abs().max() <= 0.05 * b.abs().max()  # bf16 rounding of different kernels


def test_bf16_batched_replay_is_exact_on_the_gpu():
    venv = Cosmos3RolloutVectorEnv(4, num_steps=3, device="cuda")
    venv.reset(seed=0)
    for _ in range(3):
        _, _, _, _, info = venv.step(torch.tensor(venv.default_action, device="cuda").repeat(4, 1))
    trajectories = list(info["trajectory"])
    rollout = torch.stack([t.log_probs for t in trajectories]).cuda()
    assert torch.equal(venv.engine.replay_log_probs(trajectories), rollout)
