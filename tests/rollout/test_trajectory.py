"""Trajectories: saved as safetensors + JSON, and replayed to the rollout's log-probs."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from conftest import run_episode
from cosmos3_gym.rollout.trajectory import Trajectory


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_replayed_log_probs_match_the_rollout(make_env, tmp_path, kind):
    env = make_env(num_steps=6, kind=kind)
    actions = [np.array([g, a], dtype=np.float32) for g, a in zip(np.linspace(2, 8, 6), np.linspace(0.9, 0.3, 6))]
    _, _, infos = run_episode(env, seed=21, actions=actions)
    trajectory = infos[-1]["trajectory"]
    path = tmp_path / "episode.safetensors"
    trajectory.save(path)
    loaded = Trajectory.load(path)

    rollout = torch.tensor([info["log_prob"] for info in infos])
    torch.testing.assert_close(loaded.log_probs, rollout, rtol=0, atol=0)
    deterministic = [info["deterministic"] for info in infos]
    # Only cps's last step (sigma_next = 0) is deterministic: a point mass, log-prob 0.
    assert deterministic == [False] * 5 + [kind == "cps"]
    assert (rollout[-1] == 0) == (kind == "cps")
    replay = env.unwrapped.engine.replay_log_probs(loaded)
    ratio = torch.exp(replay.cpu() - rollout)
    assert (ratio - 1).abs().max() <= 1e-6
    torch.testing.assert_close(loaded.guidance_scales, torch.tensor(np.stack(actions)[:, 0]))


def test_replay_detects_a_tampered_step(make_env):
    env = make_env(num_steps=3)
    _, _, infos = run_episode(env, seed=4)
    trajectory = infos[-1]["trajectory"]
    trajectory.latents[2] += 2.0
    replay = env.unwrapped.engine.replay_log_probs(trajectory).cpu()
    rollout = trajectory.log_probs
    assert abs(float(replay[0] - rollout[0])) < 1e-6
    assert float(replay[1]) < float(rollout[1]) - 1.0


def test_file_is_safetensors_with_json_metadata(make_env, tmp_path):
    env = make_env(num_steps=2)
    _, _, infos = run_episode(env, seed=0, options={"prompt": "a blue ball falls down"})
    path = tmp_path / "t.safetensors"
    infos[-1]["trajectory"].save(path)
    with safe_open(str(path), framework="pt") as handle:
        meta = json.loads(handle.metadata()["cosmos3_gym.trajectory"])
        assert set(handle.keys()) >= {"latents", "log_probs", "sigmas", "timesteps", "noises"}
        assert handle.get_tensor("latents").shape[0] == 3
        assert handle.get_tensor("weights_versions").tolist() == [0, 0]
    assert meta["prompt"] == "a blue ball falls down" and meta["seed"] == 0
    assert meta["cond_ids"] and meta["uncond_ids"]


def test_a_trajectory_prints_as_one_line_of_its_facts(make_env):
    env = make_env(num_steps=2)
    _, _, infos = run_episode(env, seed=3, options={"prompt": "a blue ball falls down"})
    trajectory = infos[-1]["trajectory"]
    text = repr(trajectory)
    shape = tuple(trajectory.latents.shape)
    assert "\n" not in text and len(text) < 400
    assert text.startswith("Trajectory(prompt='a blue ball falls down', seed=3, kind='sde', num_steps=2")
    assert f"video {shape}" in text and f"log_prob_sum={trajectory.log_prob_sums.sum().item():.4f}" in text


def test_loading_a_foreign_file_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a cosmos3_gym trajectory"):
        Trajectory.load(tmp_path / "other.safetensors")


def _tampered(path, tmp_path, tensors=None, header=None):
    """A copy of the saved trajectory at ``path`` with some tensors and header fields replaced."""
    from safetensors.torch import load_file, save_file

    with safe_open(str(path), framework="pt") as handle:
        meta = json.loads(handle.metadata()["cosmos3_gym.trajectory"])
    values = {**load_file(str(path)), **(tensors or {})}
    meta.update(header or {})
    out = tmp_path / "tampered.safetensors"
    save_file(values, str(out), metadata={"cosmos3_gym.trajectory": json.dumps(meta)})
    return out


@pytest.mark.parametrize("tensors,header,match", [
    ({"log_probs": torch.zeros(3)}, None, r"'latents' has shape \(3, 4, 3, 8, 8\); a trajectory of 3 steps needs \(4, "),
    ({"latents": torch.zeros(3, 1, 1, 1)}, None, "latents/noises must be"),
    ({"noises": torch.zeros(2, 4, 3, 8, 8, dtype=torch.float64)}, None, "'noises' has dtype torch.float64"),
    ({"weights_versions": torch.zeros(2)}, None, "'weights_versions' has dtype torch.float32; expected torch.int64"),
    (None, {"kind": "euler"}, "'kind' is 'euler'"),
    (None, {"seed": "zero"}, "'seed' is 'zero'"),
    (None, {"cond_ids": ["a"]}, "token ids"),
    (None, {"surprise": 1}, r"unknown \['surprise'\]"),
    ({"latents": torch.full((3, 4, 3, 8, 8), float("nan"))}, None, "'latents' holds NaN"),
    ({"sigmas": torch.tensor([0.1, 0.5, 7.0])}, None, "'sigmas' is"),
    ({"noise_levels": torch.full((2,), 5.0)}, None, "'noise_levels' holds values outside"),
    (None, {"fps": 0}, "'fps' is 0"),
])
def test_loading_validates_every_field(make_env, tmp_path, tensors, header, match):
    env = make_env(num_steps=2)
    _, _, infos = run_episode(env, seed=0)
    path = tmp_path / "t.safetensors"
    infos[-1]["trajectory"].save(path)
    with pytest.raises(ValueError, match=match):
        Trajectory.load(_tampered(path, tmp_path, tensors, header))


def test_loading_refuses_another_configuration(make_env, tmp_path):
    env = make_env(num_steps=2)
    _, _, infos = run_episode(env, seed=0)
    path = tmp_path / "t.safetensors"
    infos[-1]["trajectory"].save(path)
    assert Trajectory.load(path, expect={"num_frames": 9, "kind": "sde"}).num_steps == 2
    with pytest.raises(ValueError, match="num_frames=9; expected num_frames=1"):
        Trajectory.load(path, expect={"num_frames": 1})


def test_a_file_saved_before_the_streams_existed_still_loads(tmp_path):
    """Video-only trajectories saved without the stream fields load as video-only episodes."""
    import json as _json

    import gymnasium as gym
    from safetensors.torch import load_file, save_file

    from cosmos3_gym.rollout.trajectory import HEADER_KEY, Trajectory

    env = gym.make("Cosmos3Rollout-v0", num_steps=2, reward="none")
    env.reset(seed=0)
    for _ in range(2):
        *_, info = env.step(env.unwrapped.default_action)
    new = tmp_path / "new.safetensors"
    info["trajectory"].save(new)
    from safetensors import safe_open

    with safe_open(str(new), framework="pt") as handle:
        header = _json.loads(handle.metadata()[HEADER_KEY])
    for key in ("action_mode", "domain", "clean_actions"):
        header.pop(key)
    tensors = load_file(str(new))
    tensors.pop("log_prob_sums_video")
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata={HEADER_KEY: _json.dumps(header)})
    loaded = Trajectory.load(old)
    assert loaded == info["trajectory"] and loaded.streams == ("video",)


def test_saving_writes_through_links_and_devices_and_never_replaces_them(make_env, tmp_path):
    """Guards Trajectory.save against write-a-temporary-then-rename over the target (safetensors'
    save_file): a symlink stays a link and its target gets the file, a character device (a private
    null device, then /dev/null) and a FIFO are written in place and stay what they are, and a
    regular file is replaced whole, keeping its permission bits and leaving no temporary behind."""
    import os
    import stat
    import threading

    from safetensors.torch import load_file

    env = make_env(num_steps=2)
    _, _, infos = run_episode(env, seed=0)
    trajectory = infos[-1]["trajectory"]

    real, link = tmp_path / "real.safetensors", tmp_path / "link.safetensors"
    real.write_bytes(b"old")
    real.chmod(0o640)
    link.symlink_to(real)
    trajectory.save(link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert Trajectory.load(real) == trajectory and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.safetensors", "real.safetensors"]

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    trajectory.save(fifo)
    reader.join(timeout=30)
    assert not reader.is_alive(), "nothing was written through the FIFO"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received[0] == real.read_bytes()  # the same bytes, whatever the target
    assert load_file(str(real)).keys() >= {"latents", "log_probs"}

    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:  # no CAP_MKNOD: the machine's /dev/null is only tried once a private one proved safe
        pytest.skip("cannot create a character device here to try before /dev/null")
    trajectory.save(device)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    trajectory.save("/dev/null")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode) and os.stat("/dev/null").st_rdev == os.makedev(1, 3)


def test_a_header_with_nan_or_infinity_is_refused_naming_the_field(make_env, tmp_path):
    """Guards Trajectory.load (and save) against JSON's NaN/Infinity, which Python's json reads: a
    header of fps=Infinity used to load and replay to other log-probs. Top-level and nested fields
    are named; an old file (no stream fields) with finite numbers still loads."""
    import math

    from safetensors.torch import load_file, save_file

    from cosmos3_gym.rollout.trajectory import HEADER_KEY

    env = make_env(num_steps=2)
    _, _, infos = run_episode(env, seed=0)
    trajectory = infos[-1]["trajectory"]
    path = tmp_path / "t.safetensors"
    trajectory.save(path)
    for header, match in (({"fps": math.inf}, r"field 'fps' is inf; the header's numbers must be finite"),
                          ({"fps": -math.inf}, r"field 'fps' is -inf"),
                          ({"extra": {"scores": [1.0, math.nan]}}, r"field 'extra'\['scores'\]\[1\] is nan")):
        tampered = _tampered(path, tmp_path, header=header)
        with pytest.raises(ValueError, match=match):
            Trajectory.load(tampered)
    # save refuses to write a header load would refuse, and writes nothing
    trajectory.extra["reward"] = math.nan
    with pytest.raises(ValueError, match=r"field 'extra'\['reward'\] is nan"):
        trajectory.save(tmp_path / "nan.safetensors")
    assert not (tmp_path / "nan.safetensors").exists()
    trajectory.extra.pop("reward")
    # written as an earlier version wrote it: no stream fields, finite numbers (a float fps)
    with safe_open(str(path), framework="pt") as handle:
        header = json.loads(handle.metadata()[HEADER_KEY])
    for key in ("action_mode", "domain", "clean_actions"):
        header.pop(key)
    header.update(fps=8.0, extra={"reward": 0.5, "scores": [1.0, 2]})
    tensors = load_file(str(path))
    tensors.pop("log_prob_sums_video")
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata={HEADER_KEY: json.dumps(header)})
    loaded = Trajectory.load(old)
    assert loaded.fps == 8.0 and loaded.extra == {"reward": 0.5, "scores": [1.0, 2]} and loaded.streams == ("video",)


def test_saving_into_a_loop_of_links_is_refused_and_the_links_stay(make_env, tmp_path):
    import os

    env = make_env(num_steps=1)
    _, _, infos = run_episode(env, seed=0)
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    with pytest.raises(ValueError, match="loop of symbolic links"):
        infos[-1]["trajectory"].save(tmp_path / "a")
    assert os.path.islink(tmp_path / "a") and os.path.islink(tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
