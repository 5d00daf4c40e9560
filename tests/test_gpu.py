"""GPU code paths (FlexAttention, compiled vision pathway, bf16): run only where CUDA is."""

import numpy as np
import pytest
import torch

from cosmos3_gym.bench import random_model
from cosmos3_gym.model.packing import RowSpec
from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv

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


@pytest.mark.parametrize("attention", ["flex", "sdpa"])
def test_bf16_replay_in_env_order_is_exact_at_a_real_size(attention):
    """Edge size, both attention backends: the unconditional rows (one negative prompt) attend as
    one batch, the conditional rows of a shared prompt as another; the replay repeats it exactly."""
    model = random_model("edge", "cuda", torch.bfloat16, compile=False)
    model.attention = attention
    model.install_processors()
    venv = Cosmos3RolloutVectorEnv(4, num_frames=9, height=256, width=256, num_steps=2, reward="none", model=model,
                                   prompts=("a big red ball slides to the right",), array_type="torch")
    venv.reset(seed=0)
    for _ in range(2):
        _, _, _, _, info = venv.step(torch.tensor(venv.default_action, device="cuda").repeat(4, 1))
    trajectories = list(info["trajectory"])
    rollout = torch.stack([t.log_probs for t in trajectories]).cuda()
    assert torch.equal(venv.engine.replay_log_probs(trajectories), rollout)


def test_leading_frames_encode_alone_on_the_wan22_vae():
    """On the GPU, in bf16, at a real VAE's size: the first frame encoded alone gives the clean
    latent frame of the whole padded clip that Cosmos3OmniPipeline encodes, bit for bit."""
    import numpy as np

    model = random_model("edge", "cuda", torch.bfloat16, compile=False)
    image = np.random.default_rng(0).integers(0, 256, (480, 832, 3), dtype=np.uint8)
    condition = model.encode_condition(17, 480, 832, image=image)
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _preprocess_conditioning_image

    frame = _preprocess_conditioning_image(image, height=480, width=832).to("cuda", torch.bfloat16)
    whole = frame.unsqueeze(2).expand(-1, -1, 17, -1, -1).contiguous()
    reference = model.pipeline._encode_video(whole).float()[0]
    assert condition.clean_frames == (0,)
    assert torch.equal(condition.latent[:, 0], reference[:, 0])


def test_an_action_batch_reaches_the_transformer_without_waiting_for_the_device():
    """The trainer's batch, its packing and the transformer's inputs copy from the host asynchronously:
    under sync debug mode "error" any blocking copy or read-back raises. The inputs keep their values."""
    from cosmos3_gym.model.packing import to_device
    from cosmos3_gym.model.tiny_model import build_tiny_components
    from cosmos3_gym.train.world_model import ActionPool, TrainArgs, trainable_model, training_batch

    model = trainable_model(build_tiny_components(0), "cuda")
    args = TrainArgs(device="cuda", batch=8, action_pool=8)
    pools = {"dynamics": ActionPool.build(model, 8, {"turn": 1.0}, 1, args.resolution_tier, "cuda")}
    rng, timesteps = np.random.default_rng(0), [100.0 * (i + 1) for i in range(8)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        rows, x0, generated = training_batch(model, "forward_dynamics", args, None, rng, {}, pools)
        packed = model.pack(rows)
        kwargs = packed.transformer_kwargs({"video": [x.unsqueeze(0) for x in x0["video"]],
                                            "action": list(x0["action"])}, timesteps, torch.float32)
        sigma = to_device(torch.tensor(timesteps) / 1000, "cuda")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    reference = model.pack(rows)  # the same packing, outside sync debug mode
    assert torch.equal(kwargs["input_ids"], reference.input_ids.to("cuda"))
    assert torch.equal(sigma.cpu(), torch.tensor(timesteps) / 1000)
    per_row = reference.noisy_lengths
    assert torch.equal(kwargs["vision_timesteps"].cpu(),
                       torch.tensor(timesteps).repeat_interleave(torch.tensor(per_row)))
    assert not generated["video"][:, :, 0].any() and generated["video"][:, :, 1:].all()
