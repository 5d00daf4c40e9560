"""Image- and video-conditioned rollouts: clean frames stay clean, log-probs cover the noisy elements only.

(The fidelity against Cosmos3OmniPipeline is in test_fidelity.py.)
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import run_episode
from cosmos3_gym.rollout.trajectory import Trajectory
from cosmos3_gym.rollout.transition import replay_log_probs
from cosmos3_gym.rollout.procedural_world import render, sample_scene

MODES = {"image": "Cosmos3RolloutI2V-v0", "video": "Cosmos3RolloutV2V-v0"}
CLEAN = {"image": [0], "video": [0, 1]}  # latent frames kept clean: the image; 5 frames = latent frames 0-1


def clip(seed: int) -> np.ndarray:
    return render(sample_scene(np.random.default_rng(seed)), num_frames=9)


def given(mode: str, seed: int) -> dict:
    frames = clip(seed)
    return {"image": frames[0]} if mode == "image" else {"video": frames[:5]}


@pytest.mark.parametrize("mode", MODES)
def test_clean_frames_equal_the_encoded_conditioning_at_every_step(make_env, mode):
    env = make_env(MODES[mode], num_steps=3, device="cpu")
    options = {**given(mode, 1), "prompt": "a red ball"}
    obs, _ = env.reset(seed=2, options=options)
    model = env.unwrapped.model
    condition = model.encode_condition(9, 32, 32, **given(mode, 1))
    clean = CLEAN[mode]
    assert list(condition.clean_frames) == clean
    expected = condition.latent[:, clean].numpy()
    np.testing.assert_array_equal(obs["latent"][:, clean], expected)
    for _ in range(3):
        obs, _, _, _, info = env.step(env.unwrapped.default_action)
        np.testing.assert_array_equal(obs["latent"][:, clean], expected)
    noisy = [f for f in range(3) if f not in clean]
    latents = info["trajectory"].latents
    assert (latents[-1][:, noisy] - latents[0][:, noisy]).abs().max() > 0.1  # the rest was generated
    assert info["trajectory"].clean_frames == clean


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_log_prob_covers_the_noisy_elements_only(make_env, mode, kind):
    """With known noise, the log-density is closed-form: sum over noisy elements of
    -eps^2/2 - log(scale) - log(2 pi)/2, computed here in float64 without the model."""
    env = make_env(MODES[mode], num_steps=3, kind=kind, action_mode="noise", device="cpu")
    shape = env.observation_space["latent"].shape
    noises = [np.random.default_rng(k).standard_normal(shape).astype(np.float32) for k in range(3)]
    _, _, infos = run_episode(env, seed=4, actions=noises, options=given(mode, 3))
    trajectory = infos[-1]["trajectory"]
    noisy = [f for f in range(shape[1]) if f not in CLEAN[mode]]
    count = shape[0] * len(noisy) * shape[2] * shape[3]
    level = env.unwrapped.preset.noise_level
    for k, info in enumerate(infos[:-1] if kind == "cps" else infos):
        sigma, sigma_next = float(trajectory.sigmas[k]), float(trajectory.sigmas[k + 1])
        dt = sigma_next - sigma
        if kind == "sde":
            sigma_safe = float(trajectory.sigmas[1]) if sigma == 1.0 else sigma
            scale = level * math.sqrt(sigma / (1.0 - sigma_safe)) * math.sqrt(-dt)
        else:
            scale = sigma_next * math.sin(level * math.pi / 2.0)
        eps = noises[k].astype(np.float64)[:, noisy]
        expected = float((-0.5 * eps**2).sum() - count * (math.log(scale) + 0.5 * math.log(2 * math.pi)))
        assert info["log_prob_sum"] == pytest.approx(expected, rel=1e-5)
        assert info["log_prob"] == pytest.approx(info["log_prob_sum"] / count, rel=1e-6)
    # The clean frames did not take the noise: they equal the initial (encoded) frames.
    assert torch.equal(trajectory.latents[-1][:, CLEAN[mode]], trajectory.latents[0][:, CLEAN[mode]])


@pytest.mark.parametrize("mode", MODES)
def test_replay_saved_conditioned_trajectories(make_env, tmp_path, mode):
    env = make_env(MODES[mode], num_steps=4, device="cpu")
    _, _, infos = run_episode(env, seed=6)
    trajectory = infos[-1]["trajectory"]
    trajectory.save(tmp_path / "t.safetensors")
    loaded = Trajectory.load(tmp_path / "t.safetensors")
    assert loaded.clean_frames == CLEAN[mode]
    replayed = replay_log_probs(env.unwrapped.model, loaded)
    assert (torch.exp(replayed - loaded.log_probs) - 1).abs().max() <= 1e-6


def test_five_mixed_envs_equal_the_single_env():
    prompts = ["a red ball", "a blue square falls down", "green", "a small yellow triangle rises", "x"]
    images = np.stack([clip(10 + i)[0] for i in range(5)])
    actions = [np.array([2.0 + i, 0.3 + 0.1 * i], dtype=np.float32) for i in range(5)]
    venv = gym.make_vec(MODES["image"], num_envs=5, vectorization_mode="vector_entry_point", num_steps=3,
                        device="cpu", reward="none")
    venv.reset(seed=[20 + i for i in range(5)], options={"prompt": prompts, "image": images})
    for _ in range(3):
        obs, _, _, _, vinfo = venv.step(np.stack(actions))
    single = gym.make(MODES["image"], num_steps=3, device="cpu", reward="none")
    for i in range(5):
        _, _, infos = run_episode(single, seed=20 + i, actions=[actions[i]] * 3,
                                  options={"prompt": prompts[i], "image": images[i]})
        trajectory = infos[-1]["trajectory"]
        np.testing.assert_allclose(obs["latent"][i], trajectory.latents[-1].numpy(), rtol=0, atol=1e-5)
        np.testing.assert_allclose(vinfo["trajectory"][i].log_probs.numpy(), trajectory.log_probs.numpy(),
                                   rtol=0, atol=1e-6)
    assert np.abs(obs["latent"][0] - obs["latent"][1]).max() > 0.1


def test_default_conditioning_is_a_world_scene_with_its_caption(make_env):
    venv = gym.make_vec(MODES["video"], num_envs=4, group_size=2, vectorization_mode="vector_entry_point",
                        num_steps=2, reward="none")
    obs, info = venv.reset(seed=5)
    prompts = info["prompt"].tolist()
    assert prompts[0] == prompts[1] != prompts[2] == prompts[3]
    assert all(p.startswith("a ") and p.split()[2] in ("red", "green", "blue", "yellow") for p in prompts)
    # A group shares its clip (clean frames equal), its members differ in the generated frames.
    np.testing.assert_array_equal(obs["latent"][0][:, :2], obs["latent"][1][:, :2])
    assert np.abs(obs["latent"][0][:, 2] - obs["latent"][1][:, 2]).max() > 0.1


@pytest.mark.parametrize("env_id,options,match", [
    (MODES["image"], {"image": np.zeros((32, 32, 3), dtype=np.float32)}, r"options\['image'\] has dtype float32"),
    (MODES["image"], {"image": np.zeros((16, 32, 3), dtype=np.uint8)}, r"frames of shape \(16, 32, 3\)"),
    (MODES["image"], {"image": np.zeros((2, 32, 32, 3), dtype=np.uint8)}, r"has shape \(2, 32, 32, 3\); expected one uint8 array of shape \(32, 32, 3\)$"),
    (MODES["image"], {"image": 5}, r"options\['image'\] has shape \(\)"),
    (MODES["video"], {"video": np.zeros((4, 32, 32, 3), dtype=np.uint8)}, r"options\['video'\] has 4 frames"),
    (MODES["video"], {"video": np.zeros((9, 32, 32, 3), dtype=np.uint8)}, r"has 9 frames.*fewer than num_frames"),
    (MODES["image"], {"video": np.zeros((5, 32, 32, 3), dtype=np.uint8)}, r"options\['video'\] is not an input of this env .*use Cosmos3RolloutV2V-v0"),
    ("Cosmos3Rollout-v0", {"image": np.zeros((32, 32, 3), dtype=np.uint8)}, "use Cosmos3RolloutI2V-v0"),
])
def test_malformed_conditioning_is_named_and_changes_nothing(make_env, env_id, options, match):
    env = make_env(env_id, num_steps=2)
    env.reset(seed=0)
    env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    with pytest.raises(ValueError, match=match):
        env.reset(seed=1, options=options)
    after = env.unwrapped.get_state()
    assert torch.equal(state["engine"]["episodes"][0].latents["video"], after["engine"]["episodes"][0].latents["video"])
    env.step(env.unwrapped.default_action)


@pytest.mark.parametrize("overrides,match", [
    ({"conditioning": "audio"}, "conditioning='audio'"),
    ({"conditioning": "image", "num_frames": 1}, "one-frame"),
    ({"conditioning": "video", "condition_frames": 9}, "condition_frames=9"),
    ({"conditioning": "video", "condition_frames": 4}, "condition_frames=4"),
])
def test_invalid_conditioning_presets(overrides, match):
    with pytest.raises(ValueError, match=match):
        gym.make("Cosmos3Rollout-v0", **overrides)
