"""The world envs encode every stepping env's conditioning frame in one VAE call and decode every
imagined chunk in another. Each env must still get its own scene, its own actions and its own
chunk, changed only by the batch's rounding (see ``Cosmos3Model.encode_action_conditions`` and
``benchmarks/world_batching_cpu.txt``): checked here against each env's own encode and decode,
and against single-env runs with the same seeds and actions."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from cosmos3_gym.model.tasks import Task
from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

# What batching may move (fp32, CPU): a conditioning latent, a latent after the denoising steps, a pixel.
LATENT_ROUNDING, TRAJECTORY_ROUNDING, PIXEL_ROUNDING = 1e-5, 1e-4, 1
TIER, CHUNK = 256, 8


def random_requests(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (count, 32, 32, 3), dtype=np.uint8),
            rng.uniform(-1, 1, (count, CHUNK, 2)).astype(np.float32))


def test_one_encode_for_many_frames_is_each_frames_own_encode(tiny_model):
    frames, actions = random_requests(4)
    batched = tiny_model.encode_action_conditions(Task.FORWARD_DYNAMICS, CHUNK, TIER, frames, actions)
    tiny_model.forget_conditions()
    for j, condition in enumerate(batched):
        own = tiny_model.encode_action_condition(Task.FORWARD_DYNAMICS, CHUNK, TIER, image=frames[j],
                                                 actions=actions[j])
        assert condition.clean_frames == own.clean_frames and condition.clean_actions == own.clean_actions
        torch.testing.assert_close(condition.action, own.action, rtol=0, atol=0)
        torch.testing.assert_close(condition.latent, own.latent, rtol=0, atol=LATENT_ROUNDING)
    alone = tiny_model.encode_action_conditions(Task.FORWARD_DYNAMICS, CHUNK, TIER, frames[:1], actions[:1])[0]
    own = tiny_model.encode_action_condition(Task.FORWARD_DYNAMICS, CHUNK, TIER, image=frames[0], actions=actions[0])
    torch.testing.assert_close(alone.latent, own.latent, rtol=0, atol=0)  # a batch of one is the single encode
    policy = tiny_model.encode_action_conditions(Task.POLICY, CHUNK, TIER, frames[:2])
    assert all(c.clean_actions == () and not c.action.any() for c in policy)
    with pytest.raises(ValueError, match="whole videos"):
        tiny_model.encode_action_conditions(Task.INVERSE_DYNAMICS, CHUNK, TIER, frames)
    with pytest.raises(ValueError, match="one action chunk per image"):
        tiny_model.encode_action_conditions(Task.FORWARD_DYNAMICS, CHUNK, TIER, frames, actions[:3])


def test_the_first_frames_canvas_alone_encodes_as_the_whole_clips(tiny_model):
    """The world envs build only the encoded first frame's canvas: the same latent bit for bit as the
    pipeline's canvas of all ``CHUNK + 1`` frames (the last frame repeated), first frame taken."""
    from cosmos3_gym.model import diffusers_private as private

    frames, _ = random_requests(4, seed=1)
    clips = [[frame] for frame in frames]
    whole, content = tiny_model.action_canvases(clips, TIER, CHUNK + 1)
    assert whole.shape[2] == CHUNK + 1
    expected = private.crop_action_latent(tiny_model.pipeline,
                                          private.encode_video(tiny_model.pipeline, whole[:, :, :1]).float(), content)
    latent = tiny_model.encode_action_clips(clips, TIER, CHUNK + 1, given=1)
    torch.testing.assert_close(latent, expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="given=0: encode at least one frame"):
        tiny_model.encode_action_clips(clips, TIER, CHUNK + 1, given=0)


CANVAS_CASES = [  # (clips, frames, height, width, num_frames): what the pipeline's padding does to each
    (4, 1, 32, 32, CHUNK + 1),  # replicate padding, the last frame repeated (the world envs' conditions)
    (3, 9, 96, 96, 5),  # frames after num_frames dropped (gym-pusht's frames)
    (2, 3, 200, 200, 4),  # reflect padding
    (2, 2, 320, 288, 3),  # larger than the bin: bicubic antialiased downscale, then padding
]


def per_clip_canvases(model, clips, num_frames):
    """The pipeline's own path, a clip at a time: float [0, 1] frames divided on the host."""
    from cosmos3_gym.model import diffusers_private as private
    from cosmos3_gym.model.conditions import unit_frames

    canvases = [private.action_canvas(model.pipeline, unit_frames(clip), TIER, num_frames, model.device, model.vae.dtype)
                for clip in clips]
    return torch.cat([canvas for canvas, *_ in canvases]), canvases[0][1]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA")])])
@pytest.mark.parametrize("count,frames,height,width,num_frames", CANVAS_CASES)
def test_batched_canvases_are_the_pipelines_per_clip_canvases(tiny_model, device, count, frames, height, width,
                                                              num_frames):
    """``action_canvases`` pads a whole batch at once on the device: the canvases and size record of
    the pipeline padding each clip alone from host-divided frames, bit for bit (on a GPU in bf16,
    the VAE's dtype there)."""
    from cosmos3_gym.model.model import Cosmos3Model

    model = tiny_model if device == "cpu" else Cosmos3Model.embedded(device="cuda", dtype=torch.bfloat16)
    clips = np.random.default_rng(count).integers(0, 256, (count, frames, height, width, 3), dtype=np.uint8)
    canvas, content = model.action_canvases(clips, TIER, num_frames)
    expected, expected_content = per_clip_canvases(model, clips, num_frames)
    assert canvas.shape == expected.shape and canvas.shape[2] == num_frames and canvas.dtype == model.vae.dtype
    assert torch.equal(canvas, expected) and torch.equal(content, expected_content)


def test_a_batched_step_is_each_envs_single_run(tiny_model):
    """Four envs stepped together against each env run alone (seed ``s + i``, its actions), and each
    imagined chunk against its own decode of its trajectory's last latent. One step: from the second on,
    a conditioning frame may already differ by the first step's pixel rounding."""
    n = 4
    actions = random_requests(n, seed=1)[1]
    venv = Cosmos3WorldVectorEnv(n, num_steps=2, model=tiny_model)
    venv.reset(seed=30)
    obs, rewards, _, _, infos = venv.step(actions)
    for i in range(n):
        alone = Cosmos3WorldVectorEnv(1, num_steps=2, model=tiny_model)
        alone.reset(seed=30 + i)
        obs_1, rewards_1, _, _, infos_1 = alone.step(actions[i: i + 1])
        trajectory = infos["trajectory"][i]
        torch.testing.assert_close(trajectory.latents, infos_1["trajectory"][0].latents, rtol=0,
                                   atol=TRAJECTORY_ROUNDING)
        assert np.abs(infos["frames"][i].astype(int) - infos_1["frames"][0]).max() <= PIXEL_ROUNDING
        assert np.abs(obs[i].astype(int) - obs_1[0]).max() <= PIXEL_ROUNDING
        assert rewards_1[0] == pytest.approx(rewards[i], abs=0.05)
        own_decode = tiny_model.decode(trajectory.latents[-1:])[0, 1:]
        assert np.abs(infos["frames"][i].astype(int) - own_decode).max() <= PIXEL_ROUNDING
        np.testing.assert_array_equal(obs[i], infos["frames"][i, -1])


def test_a_step_refused_at_the_batched_encode_changes_nothing(tiny_model):
    """Another thread holding the model refuses the step at its first model call (the batched
    encode); the envs stay as they were, and the next step is the one a fresh env takes."""
    actions = random_requests(2, seed=2)[1]
    venv, fresh = (Cosmos3WorldVectorEnv(2, num_steps=2, model=tiny_model) for _ in range(2))
    venv.reset(seed=5)
    fresh.reset(seed=5)
    before = venv.frames.copy(), venv.t.copy()
    inside, release = threading.Event(), threading.Event()

    def hold():
        with tiny_model.exclusive("a test's hold"):
            inside.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(30)
        with pytest.raises(RuntimeError, match="in use by another thread"):
            venv.step(actions)
    finally:
        release.set()
        holder.join(30)
    np.testing.assert_array_equal(venv.frames, before[0])
    np.testing.assert_array_equal(venv.t, before[1])
    np.testing.assert_array_equal(venv.step(actions)[0], fresh.step(actions)[0])
