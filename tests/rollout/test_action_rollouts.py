"""Action and sound rollouts: policy, forward and inverse dynamics, text-to-video with sound.

Clean elements stay bit-identical to the encoded conditioning; the log-prob covers the generated
elements of every stream and nothing else; replay, isolation, state and files hold per stream.
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from cosmos3_gym.rollout.streams import LOG_PROB_INFO, OBS_KEYS
from cosmos3_gym.rollout.trajectory import Trajectory
from cosmos3_gym.rollout.transition import replay_log_probs
from cosmos3_gym.rollout.procedural_world import render, sample_scene

MODES = {"policy": "Cosmos3PolicyRollout-v0", "forward_dynamics": "Cosmos3ForwardDynamicsRollout-v0",
         "inverse_dynamics": "Cosmos3InverseDynamicsRollout-v0", "sound": "Cosmos3RolloutAV-v0"}
CHUNK, RAW_DIM, ACTION_DIM = 8, 2, 8  # the embedded model: pusht actions padded to 8 channels


def clip(seed: int) -> np.ndarray:
    return render(sample_scene(np.random.default_rng(seed)), num_frames=CHUNK + 1)


def actions(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (CHUNK, RAW_DIM)).astype(np.float32)


def options_for(mode: str, seed: int = 0) -> dict:
    return {"policy": {"image": clip(seed)[0], "prompt": "push the ball to the left"},
            "forward_dynamics": {"image": clip(seed)[0], "actions": actions(seed)},
            "inverse_dynamics": {"video": clip(seed)},
            "sound": {"prompt": "a red ball bounces to the right"}}[mode]


def encoded(model, mode: str, options: dict):
    if mode == "sound":
        return None
    return model.encode_action_condition(mode, CHUNK, 256, image=options.get("image"), video=options.get("video"),
                                         actions=options.get("actions"))


@pytest.fixture
def make(tiny_model, make_env):
    def build(mode, **kwargs):
        kwargs.setdefault("num_steps", 3)
        return make_env(MODES[mode], model=tiny_model, **kwargs)
    return build


def noisy_counts(mode: str, latent_shape, sound_shape=None) -> dict:
    """Generated elements per stream, from what the mode gives and what it asks for."""
    c, t, h, w = latent_shape
    video = {"policy": c * (t - 1) * h * w, "forward_dynamics": c * (t - 1) * h * w, "inverse_dynamics": 0,
             "sound": c * t * h * w}[mode]
    counts = {"video": video}
    if mode in ("policy", "inverse_dynamics"):
        counts["action"] = CHUNK * RAW_DIM  # the padded channels are not generated
    elif mode == "forward_dynamics":
        counts["action"] = 0  # the actions are given
    else:
        counts["sound"] = math.prod(sound_shape)
    return counts


@pytest.mark.parametrize("mode", MODES)
def test_clean_elements_equal_the_encoded_conditioning_at_every_step(make, tiny_model, mode):
    env = make(mode)
    options = options_for(mode)
    obs, _ = env.reset(seed=1, options=options)
    condition = encoded(tiny_model, mode, options)
    moved = False
    for _ in range(3):
        previous = obs
        obs, _, _, _, info = env.step(env.unwrapped.default_action)
        if condition is not None:
            clean = list(condition.clean_frames)
            assert torch.equal(torch.from_numpy(obs["latent"][:, clean]), condition.latent[:, clean])
            action = torch.from_numpy(obs["action_latent"])
            if mode == "forward_dynamics":
                assert torch.equal(action, condition.action)  # given actions, zero-padded, never touched
            else:
                assert torch.equal(action[:, RAW_DIM:], torch.zeros(CHUNK, ACTION_DIM - RAW_DIM))
        moved |= any(np.abs(obs[k] - previous[k]).max() > 1e-3 for k in obs if k.endswith("latent"))
    assert moved
    if mode == "forward_dynamics":
        np.testing.assert_array_equal(info["actions"], options["actions"])
    if mode in ("policy", "inverse_dynamics"):
        assert info["actions"].shape == (CHUNK, RAW_DIM) and info["actions"].dtype == np.float32
        np.testing.assert_array_equal(info["actions"], obs["action_latent"][:, :RAW_DIM])
    if mode == "sound":
        rate, hop = tiny_model.sound_tokenizer.config.sampling_rate, tiny_model.sound_tokenizer._hop_size
        assert info["waveform"].shape == (1, obs["sound_latent"].shape[1] * hop) and rate == 800
        assert np.abs(info["waveform"]).max() <= 1.0 and info["waveform"].std() > 0


@pytest.mark.parametrize("mode", MODES)
def test_log_prob_is_the_float64_density_of_the_noisy_elements(make, mode):
    env = make(mode, action_mode="noise", kind="sde", reward="none")
    obs, _ = env.reset(seed=2, options=options_for(mode))
    counts = noisy_counts(mode, obs["latent"].shape, obs.get("sound_latent", np.zeros(0)).shape)
    rng = np.random.default_rng(0)
    streams = [key for key in obs if key.endswith("latent")]
    sigmas = env.unwrapped.engine.episode(0).sigmas.double().numpy()
    level = env.unwrapped.preset.noise_level
    for k in range(3):
        noise = {key: rng.standard_normal(obs[key].shape).astype(np.float32) for key in streams}
        action = noise if len(streams) > 1 else noise["latent"]
        before = obs
        obs, _, _, _, info = env.step(action)
        # The SDE's scale is the same for every element: std(sigma) * sqrt(sigma - sigma_next), in float64.
        sigma, sigma_next = sigmas[k], sigmas[k + 1]
        sigma_safe = sigmas[1] if sigma == 1.0 else sigma
        scale = float(level) * math.sqrt(sigma / (1 - sigma_safe)) * math.sqrt(sigma - sigma_next)
        total, total_count = 0.0, 0
        for stream, count in counts.items():
            key = OBS_KEYS[stream]
            moved = obs[key] != before[key]
            assert int(moved.sum()) == count  # exactly the generated elements change
            eps = noise[key].astype(np.float64)[moved]
            expected = float(np.sum(-0.5 * eps**2 - math.log(scale) - 0.5 * math.log(2 * math.pi)))
            assert info[LOG_PROB_INFO[stream]] == pytest.approx(expected, rel=1e-5, abs=1e-3)
            total, total_count = total + expected, total_count + count
        assert info["log_prob_sum"] == pytest.approx(total, rel=1e-5)
        assert info["log_prob"] == pytest.approx(total / total_count, rel=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_replay_reproduces_every_mode_and_survives_a_file(make, tiny_model, mode, tmp_path):
    env = make(mode, reward="none")
    env.reset(seed=3, options=options_for(mode))
    terminated = False
    while not terminated:
        _, _, terminated, _, info = env.step(env.unwrapped.default_action)
    trajectory = info["trajectory"]
    assert set(trajectory.streams) == {"video", "action" if mode != "sound" else "sound"}
    sums = trajectory.log_prob_sums_video + (trajectory.log_prob_sums_sound if mode == "sound"
                                             else trajectory.log_prob_sums_action)
    torch.testing.assert_close(sums, trajectory.log_prob_sums, rtol=1e-6, atol=1e-3)
    path = tmp_path / "episode.safetensors"
    trajectory.save(path)
    loaded = Trajectory.load(path, expect={"action_mode": "" if mode == "sound" else mode})
    for source in (trajectory, loaded):
        ratio = torch.exp(replay_log_probs(tiny_model, source) - source.log_probs)
        assert (ratio - 1).abs().max() < 1e-6
    for name in trajectory.streams:  # one stream at a time: its stored exact log-density
        stored = getattr(trajectory, f"log_prob_sums_{name}")
        torch.testing.assert_close(replay_log_probs(tiny_model, trajectory, reduction="sum", streams=[name]),
                                   stored, rtol=1e-6, atol=1e-4)
    with pytest.raises(ValueError, match="streams=\\['lidar'\\] must be a non-empty list"):
        replay_log_probs(tiny_model, trajectory, streams=["lidar"])
    assert loaded.domain == ("" if mode == "sound" else "pusht")
    assert loaded.stream_shapes() == trajectory.stream_shapes()
    for name in ("latents", "sound_latents", "action_latents", "sound_noises", "action_noises"):
        a, b = getattr(loaded, name), getattr(trajectory, name)
        assert (a is None and b is None) or torch.equal(a, b)


def test_five_mixed_policy_envs_equal_the_single_env(tiny_model):
    """Env i of a batch of 5 (different images and prompts) equals a single env with its inputs."""
    prompts = ["push left", "push the ball up", "x", "move the square to the right", "stay"]
    images = np.stack([clip(10 + i)[0] for i in range(5)])
    venv = gym.make_vec("Cosmos3PolicyRollout-v0", num_envs=5, vectorization_mode="vector_entry_point",
                        model=tiny_model, num_steps=3, reward="none")
    obs, _ = venv.reset(seed=[20 + i for i in range(5)], options={"image": images, "prompt": prompts})
    log_probs = []
    for k in range(3):
        obs, _, _, _, infos = venv.step(np.tile([[3.0 + k, 0.6]], (5, 1)).astype(np.float32))
        log_probs.append(infos["log_prob"])
    for i in range(5):
        env = gym.make("Cosmos3PolicyRollout-v0", model=tiny_model, num_steps=3, reward="none")
        single, _ = env.reset(seed=20 + i, options={"image": images[i], "prompt": prompts[i]})
        for k in range(3):
            single, _, _, _, info = env.step(np.array([3.0 + k, 0.6], dtype=np.float32))
            assert info["log_prob"] == pytest.approx(log_probs[k][i], abs=1e-6)
        for key in ("latent", "action_latent"):
            np.testing.assert_allclose(obs[key][i], single[key], rtol=0, atol=1e-5)
    assert np.abs(obs["action_latent"][0] - obs["action_latent"][1]).max() > 0.1


def test_fork_and_state_hold_the_action_stream(tiny_model):
    venv = gym.make_vec("Cosmos3PolicyRollout-v0", num_envs=3, vectorization_mode="vector_entry_point",
                        model=tiny_model, num_steps=3, reward="none")
    venv.reset(seed=0, options={"image": clip(0)[0]})
    act = np.tile([[4.0, 0.7]], (3, 1)).astype(np.float32)
    venv.step(act)
    venv.unwrapped.fork(0, [1, 2], seeds=[None, 5])
    state = venv.unwrapped.get_state()
    first, _, _, _, _ = venv.step(act)
    np.testing.assert_array_equal(first["action_latent"][0], first["action_latent"][1])  # same generator
    assert np.abs(first["action_latent"][0] - first["action_latent"][2]).max() > 1e-3  # reseeded child
    venv.unwrapped.set_state(state)
    again, _, _, _, _ = venv.step(act)
    for key in ("latent", "action_latent"):
        np.testing.assert_array_equal(again[key], first[key])


@pytest.mark.parametrize("mode,options,match", [
    ("policy", {"image": np.zeros((16, 16, 3), np.uint8)}, r"options\['image'\] has frames of shape \(16, 16, 3\)"),
    ("policy", {"image": np.zeros((32, 32, 3), np.float32)}, r"options\['image'\] has dtype float32"),
    ("policy", {"actions": np.zeros((8, 2), np.float32)}, r"options\['actions'\] is not an input .*conditioning="
                                                           r"'policy'"),
    ("forward_dynamics", {"actions": np.zeros((8, 3), np.float32)}, r"options\['actions'\] .* shape \(8, 3\); "
                                                                     r"expected \(8, 2\)"),
    ("forward_dynamics", {"actions": np.zeros((8,), np.float32)}, r"options\['actions'\] has shape \(8,\); expected "
                                                                  r"one float32 array of shape \(8, 2\)$"),
    ("forward_dynamics", {"image": np.zeros((32, 32), np.uint8)}, r"options\['image'\] has shape \(32, 32\); expected "
                                                                  r"one uint8 array of shape \(32, 32, 3\)$"),
    ("forward_dynamics", {"actions": np.full((8, 2), np.nan, np.float32)}, r"options\['actions'\] .*NaN"),
    ("forward_dynamics", {"actions": np.zeros((8, 2), np.int64)}, r"options\['actions'\] .*dtype int64"),
    ("forward_dynamics", {"domain": "hand_pose"}, r"options\['domain'\]='hand_pose' has 57-dimensional actions; "
                                                  r"this model's action heads have action_dim=8"),
    ("forward_dynamics", {"domain": "robot"}, r"options\['domain'\]='robot' is not a Cosmos 3 embodiment"),
    ("inverse_dynamics", {"video": np.zeros((5, 32, 32, 3), np.uint8)}, r"options\['video'\] has 5 frames; "
                                                                        r"inverse dynamics infers"),
    ("sound", {"image": np.zeros((32, 32, 3), np.uint8)}, r"options\['image'\] is not an input"),
])
def test_malformed_inputs_are_named_and_change_nothing(make, mode, options, match):
    env = make(mode, reward="none")
    env.reset(seed=4, options=options_for(mode))
    env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    with pytest.raises(ValueError, match=match):
        env.reset(seed=5, options=options)
    after = env.unwrapped.get_state()["engine"]["episodes"][0]
    before = state["engine"]["episodes"][0]
    assert after.step == before.step == 1 and torch.equal(after.latents["video"], before.latents["video"])
    env.step(env.unwrapped.default_action)  # still usable


def test_a_vector_envs_actions_are_one_for_all_or_a_stack_per_env_or_per_group(tiny_model):
    venv = gym.make_vec(MODES["forward_dynamics"], num_envs=4, vectorization_mode="vector_entry_point", group_size=2,
                        num_steps=2, reward="none", model=tiny_model)
    with pytest.raises(ValueError, match=r"options\['actions'\] has shape \(3, 8, 2\); expected one float32 array of "
                                         r"shape \(8, 2\) for every env, or a stack of 4 \(one per env\) or 2 \(one per "
                                         r"group\)$"):
        venv.reset(seed=0, options={"actions": np.zeros((3, 8, 2), np.float32)})
    with pytest.raises(ValueError, match=r"options\['actions'\] holds arrays of different shapes \(\[\(8, 2\), \(7, 2\)\]\); "
                                         r"give arrays of one shape, one per env or one per group"):
        venv.reset(seed=0, options={"actions": [np.zeros((8, 2), np.float32), np.zeros((7, 2), np.float32)]})
    per_group = np.stack([np.full((8, 2), 0.5, np.float32), np.full((8, 2), -0.5, np.float32)])
    venv.reset(seed=0, options={"actions": per_group})
    for _ in range(2):
        *_, infos = venv.step(np.tile(venv.default_action, (4, 1)))
    np.testing.assert_array_equal(np.stack(infos["actions"]), per_group.repeat(2, axis=0))


@pytest.mark.parametrize("mode", ["image", "video", "policy", "inverse_dynamics"])
def test_leading_frames_encode_as_in_the_whole_padded_clip(tiny_model, mode):
    """Only the given frames are encoded (the VAE is causal in time); the clean latent frames are
    bit for bit those of the whole clip that Cosmos3OmniPipeline pads and encodes."""
    pipe, video = tiny_model.pipeline, clip(6)
    if mode in ("image", "video"):
        given = video[:1] if mode == "image" else video[:5]
        condition = tiny_model.encode_condition(9, 32, 32, **({"image": given[0]} if mode == "image" else
                                                              {"video": given}))
        if mode == "image":
            from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _preprocess_conditioning_image

            whole = _preprocess_conditioning_image(given[0], height=32, width=32).unsqueeze(2)
        else:
            whole = pipe.video_processor.preprocess_video(pil(given), height=32, width=32)
        whole = torch.cat([whole, whole[:, :, -1:].expand(-1, -1, 9 - len(given), -1, -1)], dim=2)
        reference = pipe._encode_video(whole).float()[0]
    else:
        condition = encoded(tiny_model, mode, {"image": video[0]} if mode == "policy" else {"video": video})
        frames, size, _, _ = pipe._prepare_action_video_conditioning(
            pil(video[:1] if mode == "policy" else video), 256, 9, device="cpu", dtype=torch.float32)
        reference = pipe._remove_action_video_padding_from_latent(pipe._encode_video(frames).float(), size)[0]
    clean = list(condition.clean_frames)
    assert clean == {"image": [0], "video": [0, 1], "policy": [0], "inverse_dynamics": [0, 1, 2]}[mode]
    assert torch.equal(condition.latent[:, clean], reference[:, clean])
    assert reference[:, clean].abs().max() > 0.1


def pil(frames) -> list:
    from PIL import Image

    return [Image.fromarray(frame) for frame in frames]


@pytest.mark.parametrize("mode", ["video", "policy", "inverse_dynamics"])
def test_given_frames_are_encoded_in_the_vaes_pixel_range(tiny_model, mode):
    """The clean latents decode back to the given frames: uint8 frames reach the VAE in [-1, 1],
    as PIL images do in the pipeline (numpy frames are read as [0, 1] floats by diffusers)."""
    video = clip(6)
    if mode == "video":
        condition, given = tiny_model.encode_condition(9, 32, 32, video=video[:5]), video[:5]
    else:
        condition = encoded(tiny_model, mode, {"image": video[0]} if mode == "policy" else {"video": video})
        given = video[:1] if mode == "policy" else video
    clean = list(condition.clean_frames)
    frames = tiny_model.decode(condition.latent[None, :, clean])[0]
    error = np.abs(frames.astype(float) - given[: len(frames)].astype(float)).mean()
    assert error < 12.0, f"mean error {error:.1f} of 255: the condition is not the given frames"


def test_sound_and_action_presets_refuse_a_model_without_those_heads(tiny_model):
    import copy

    from cosmos3_gym.model.model import Cosmos3Model

    with pytest.raises(ValueError, match="sound_gen=True and a sound_tokenizer"):
        bare = Cosmos3Model(copy.deepcopy(tiny_model.pipeline), "cpu", torch.float32)
        bare.sound_tokenizer = None
        gym.make("Cosmos3RolloutAV-v0", model=bare)
    with pytest.raises(ValueError, match=r"sound=.* is invalid; allowed: false for action rollouts"):
        gym.make("Cosmos3PolicyRollout-v0", model=tiny_model, sound=True)
