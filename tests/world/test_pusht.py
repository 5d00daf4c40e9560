"""PushT: Cosmos3PushT-v0 (imagined) and PushT-Twin-v0 (gym-pusht in chunks), scored against gym-pusht itself."""

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

gym_pusht = pytest.importorskip("gym_pusht")

import gymnasium as gym  # noqa: E402
from gymnasium import spaces  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

from cosmos3_gym.world import pusht_coverage as pc  # noqa: E402
from cosmos3_gym.world.pusht import (  # noqa: E402
    PUSHT_CHECKPOINT, Cosmos3PushTVectorEnv, PushTTwinEnv, _play_out, checkpoint_action_frame, default_horizon,
    model_actions,
)
from cosmos3_gym.world.pusht_data import Pusher, generate  # noqa: E402

ACTION_BOX = spaces.Box(0.0, 512.0, (8, 2), np.float32)


@pytest.fixture(scope="module")
def reference():
    """gym-pusht as LeRobot registers it, with pixel observations."""
    env = gym.make("gym_pusht/PushT-v0", obs_type="pixels")
    yield env
    env.close()


@pytest.fixture
def dream(stand_in_model):
    def make(**kwargs):
        kwargs.setdefault("num_steps", 2)
        return gym.make("Cosmos3PushT-v0", model=stand_in_model, **kwargs)
    return make


def _chunks(seed, count, chunk=8):
    return np.random.default_rng(seed).uniform(0, 512, (count, chunk, 2)).astype(np.float32)


def test_spaces_are_gym_pushts_pixels_and_a_chunk_of_its_actions(reference, dream):
    twin, imagined = gym.make("PushT-Twin-v0"), dream()
    assert reference.observation_space == spaces.Box(0, 255, (96, 96, 3), np.uint8)
    for env in (twin, imagined):
        assert env.observation_space == reference.observation_space
        assert env.action_space == ACTION_BOX
        assert env.action_space.low.min() == reference.action_space.low.min() == 0
        assert env.action_space.high.max() == reference.action_space.high.max() == 512
    assert gym.make("PushT-Twin-v0", chunk=4).action_space == spaces.Box(0.0, 512.0, (4, 2), np.float32)
    assert twin.unwrapped.horizon == imagined.unwrapped.vector.horizon == default_horizon(8) == 38  # 300 steps
    with pytest.raises(ValueError, match="multiple of 4"):
        gym.make("PushT-Twin-v0", chunk=6)


def test_reset_is_gym_pushts_reset_bit_for_bit(reference, dream, stand_in_model):
    twin, imagined = gym.make("PushT-Twin-v0"), dream()
    for seed in (0, 1, 7, 12345):
        expected, info = reference.reset(seed=seed)
        for env in (twin, imagined):
            obs, _ = env.reset(seed=seed)
            assert obs.dtype == np.uint8
            np.testing.assert_array_equal(obs, expected)
    vector = Cosmos3PushTVectorEnv(3, num_steps=2, model=stand_in_model)  # env i: gym-pusht's reset(seed=s + i)
    obs, infos = vector.reset(seed=20)
    for i in range(3):
        np.testing.assert_array_equal(obs[i], reference.reset(seed=20 + i)[0])
    assert infos["seed"].tolist() == [20, 21, 22]


def _play_frames():
    """Frames from gym-pusht with its own coverage: random play, the scripted pusher, and pushes of
    a block placed near the goal (where coverage matters)."""
    env = pc.make_pusht()
    frames, coverages, poses = [], [], []
    rng = np.random.default_rng(0)
    for episode in range(12):
        kind = episode % 3
        options = None
        if kind == 2:  # near the goal: coverages up to 1
            block = pc.GOAL_POSE + rng.uniform(-1, 1, 3) * [12.0, 12.0, 0.2] * (episode / 12)
            options = {"reset_to_state": pc.reset_state((60.0, 450.0), block)}
        env.reset(seed=episode, options=options)
        pusher, target = Pusher(rng, noise=10.0 * (kind == 1)), np.array(env.agent.position)
        for t in range(20):
            if kind == 0:
                target = np.clip(target + rng.normal(0, 40, 2), 0, 512)
            else:
                target = pusher(np.array(env.agent.position), np.array([*env.block.position, env.block.angle]))
            obs, _, _, _, info = env.step(target.astype(np.float32))
            frames.append(obs)
            coverages.append(info["coverage"])
            poses.append(info["block_pose"])
    env.close()
    return np.stack(frames), np.array(coverages), np.stack(poses)


def test_coverage_read_from_pixels_matches_gym_pushts():
    frames, coverages, poses = _play_frames()
    # the geometry: gym-pusht's coverage of its own block pose, exactly
    exact = np.array([pc.coverage_of_pose(p) for p in poses])
    np.testing.assert_allclose(exact, coverages, atol=1e-9)
    # from the pixels alone
    read = pc.chunk_coverages(frames)
    errors = np.abs(read - coverages)
    print(f"coverage from pixels over {len(frames)} frames ({(coverages > 0).sum()} with coverage > 0, up to "
          f"{coverages.max():.3f}): max error {errors.max():.4f}, mean {errors.mean():.4f}")
    assert (coverages > 0.5).sum() >= 20 and (coverages == 0).sum() >= 20
    assert errors.max() <= 0.02
    assert errors.mean() <= 0.005


def test_the_segmentation_uses_gym_pushts_constants(reference):
    env = reference.unwrapped
    reference.reset(seed=0)
    assert env.success_threshold == pc.SUCCESS_THRESHOLD
    np.testing.assert_array_equal(env.goal_pose, pc.GOAL_POSE)
    assert (env.observation_width, env.observation_height) == (pc.SIZE, pc.SIZE)
    # the T: gym-pusht's keypoints are the corners of our two rectangles
    keypoints = env.get_keypoints(env._block_shapes)
    corners = np.concatenate(pc.t_polygons(env._get_info()["block_pose"]))
    for point in keypoints:
        assert np.min(np.linalg.norm(corners - point, axis=1)) < 1e-6
    # a frame without a T (empty, or the placeholder model's noise) covers nothing
    blank, noise = np.full((96, 96, 3), 255, np.uint8), np.random.default_rng(0).integers(0, 256, (96, 96, 3), np.uint8)
    assert pc.frame_coverage(blank) == pc.frame_coverage(noise) == 0.0
    # the harness's error between two frames: the block centroids' distance in pixels
    frame = reference.reset(seed=0)[0]
    info = env._get_info()
    centre = Pusher.centroid(info["block_pose"]) * 96 / 512
    assert np.hypot(*(np.array(pc.block_centre(frame)) - centre)) < 0.5
    assert pc.block_error(frame, frame) == 0.0 and pc.block_error(blank, blank) == 0.0
    assert pc.block_error(frame, blank) == pytest.approx(np.hypot(96, 96))


def test_errors_name_the_pusht_envs_and_their_arguments(dream):
    """The dream's sampler errors name Cosmos3PushT-v0 (not the procedural world it is built on), its reset
    error says where PushT's start comes from, and a keyword neither the twin nor gym-pusht takes is named
    with gym-pusht's own list (not a TypeError from inside gym-pusht)."""
    with pytest.raises(ValueError, match=r"preset 'Cosmos3PushT-v0': num_steps=0 is invalid"):
        dream(num_steps=0)
    env = dream()
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['prompt'\]; allowed: \[\]; the start is "
                                         r"gym-pusht's reset\(seed=...\)$"):
        env.reset(options={"prompt": "x"})
    for keyword in ("num_steps", "obs_type"):
        with pytest.raises(TypeError, match=rf"unknown keyword\(s\) \['{keyword}'\]: PushT-Twin-v0 takes chunk, "
                                            r"horizon and render_mode, and passes the rest to gym-pusht's PushTEnv, "
                                            r"which takes \['block_cog', 'damping'"):
            gym.make("PushT-Twin-v0", **{keyword: 1})
    assert gym.make("PushT-Twin-v0", damping=0.5).unwrapped.pusht.damping == 0.5
    # Cosmos3World-v0's success rule is not PushT's: its attributes are absent, not a silent 0 and 0.15
    for name in ("success_margin", "success_radius"):
        assert not hasattr(env.unwrapped.vector, name)
        with pytest.raises(AttributeError, match=rf"Cosmos3PushT-v0 has no {name} .*threshold=0.95"):
            getattr(env.unwrapped.vector, name)
    with pytest.raises(TypeError, match="success_margin"):
        dream(success_margin=1.0)
    # gym-pusht's obs_type: why the dream has none, not a "did you mean 'dtype'?" (single env and vector env)
    note = r"got an unexpected keyword argument 'obs_type' \(the observation is always gym-pusht's obs_type='pixels'"
    with pytest.raises(TypeError, match=note):
        dream(obs_type="pixels_agent_pos")
    with pytest.raises(TypeError, match=note):
        gym.make_vec("Cosmos3PushT-v0", num_envs=2, vectorization_mode="vector_entry_point", obs_type="pixels")
    with pytest.raises(TypeError, match=r"argument 'foo' \(and \['obs_type'\]\); 'obs_type': the observation is always"):
        dream(obs_type="pixels", foo=1)  # noted though another unknown keyword comes first


def test_check_env_passes_on_both(dream):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checker's warnings fail the test
        check_env(gym.make("PushT-Twin-v0").unwrapped)
        check_env(dream(render_mode="rgb_array").unwrapped)


def test_the_twin_replays_exactly_and_ends_at_gym_pushts_success():
    runs = []
    for _ in range(2):
        env = PushTTwinEnv()
        obs, _ = env.reset(seed=3)
        run = [obs]
        for chunk in _chunks(1, 3):
            obs, reward, terminated, truncated, info = env.step(chunk)
            run += [info["frames"], reward, info["coverages"]]
        runs.append(run)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    # the chunk's frames are gym-pusht's, one per action, with its summed reward
    reference = pc.make_pusht()
    env = PushTTwinEnv()
    chunk = _chunks(2, 1)[0]
    env.reset(seed=5)
    reference.reset(seed=5)
    _, reward, _, _, info = env.step(chunk)
    steps = [reference.step(a) for a in chunk]
    np.testing.assert_array_equal(info["frames"], np.stack([s[0] for s in steps]))
    assert reward == pytest.approx(sum(s[1] for s in steps))
    # a block placed on the goal: success on the first action, the rest of the chunk not played
    env.reset(seed=5)
    env.pusht.reset(seed=5, options={"reset_to_state": pc.reset_state((60.0, 450.0), pc.GOAL_POSE)})
    agent = np.array(env.pusht.agent.position, dtype=np.float32)
    obs, reward, terminated, truncated, info = env.step(np.tile(agent, (8, 1)))
    assert terminated and info["success"] and info["is_success"] and info["played"] == 1 and not truncated
    assert reward == pytest.approx(1.0) and info["coverage"] > pc.SUCCESS_THRESHOLD
    assert (info["frames"] == obs).all()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.tile(agent, (8, 1)))


def test_an_imagined_world_that_imagines_the_truth_scores_as_the_truth(stand_in_model):
    """The imagined env's reward, success and episode end, read from pixels, against the twin's, read
    from gym-pusht's state: the model replaced by gym-pusht itself (a perfect world model)."""
    start = {"reset_to_state": pc.reset_state((100.0, 460.0), (262.0, 266.0, np.pi / 4 + 0.05))}  # near the goal

    class Perfect(Cosmos3PushTVectorEnv):
        class Trajectory:
            log_prob_sums = np.zeros(1)

        def _imagine(self, slots, tasks, frames, actions, rngs):
            targets = (actions + 1.0) * 256.0  # model_actions, inverted
            imagined = np.stack([[self.truth.step(a)[0] for a in chunk] for chunk in targets])
            return imagined, [self.Trajectory()] * len(slots), None  # no disagreement asked for

    perfect, twin = Perfect(1, num_steps=1, model=stand_in_model), PushTTwinEnv()
    perfect.truth = pc.make_pusht()
    perfect.reset(seed=0)
    twin.reset(seed=0)
    for env in (perfect.truth, twin.pusht):
        env.reset(seed=0, options=start)
    pusher, coverages = Pusher(np.random.default_rng(0)), []
    for _ in range(4):
        chunk = np.tile(pusher(np.array(twin.pusht.agent.position), np.array([*twin.pusht.block.position,
                                                                               twin.pusht.block.angle])), (8, 1))
        _, rewards, terminated, _, infos = perfect.step(chunk[None].astype(np.float32))
        _, reward, twin_terminated, _, info = twin.step(chunk.astype(np.float32))
        np.testing.assert_allclose(infos["coverages"][0], info["coverages"], atol=0.02)
        assert rewards[0] == pytest.approx(reward, abs=8 * 0.02 / 0.95)
        if np.abs(info["coverages"] - pc.SUCCESS_THRESHOLD).min() > 0.02:  # else a read within 0.02 may flip it
            assert bool(terminated[0]) == twin_terminated and infos["played"][0] == info["played"]
        coverages += list(info["coverages"])
        if twin_terminated:
            break
    assert max(coverages) > 0.5


def test_imagined_steps_report_what_they_read():
    assert _play_out(np.array([0.2, 0.5, 0.96, 0.99]), 0.95) == (3, pytest.approx((0.2 + 0.5) / 0.95 + 1.0), True)
    assert _play_out(np.zeros(4), 0.95) == (4, 0.0, False)
    np.testing.assert_array_equal(model_actions(np.array([[0.0, 512.0], [256.0, 128.0]])), [[-1, 1], [0, -0.5]])


def test_agent_frame_actions_are_the_targets_from_where_the_agent_is_seen(reference):
    """The agent frame against gym-pusht's own state: each target minus the agent's true position
    (``info["pos_agent"]``), over 512, within the colour mass's error (2 canvas units); every chunk
    measured from its own frame; the canvas centre where a frame shows no agent."""
    chunks = _chunks(3, 3)
    frames, truths = [], []
    for seed in range(3):
        frame, info = reference.reset(seed=seed)
        frames.append(frame)
        truths.append(np.asarray(info["pos_agent"]))
    expected = (chunks - np.stack(truths)[:, None]) / 512.0
    np.testing.assert_allclose(model_actions(chunks, np.stack(frames)), expected, atol=2.0 / 512)
    np.testing.assert_allclose(model_actions(chunks[0], frames[0]), expected[0], atol=2.0 / 512)
    table = np.full((96, 96, 3), 255, np.uint8)
    np.testing.assert_array_equal(model_actions(chunks[:1], table[None]), (chunks[:1] - 256.0) / 512.0)


def test_the_dream_measures_actions_in_its_checkpoints_frame(dream, stand_in_model, tmp_path, monkeypatch):
    """The frame comes from the checkpoint's record (canvas for the shipped model, for one without a
    record and with ``model=``), or from ``action_frame=``; each step conditions the model on its chunk
    in that frame, measured from the frame the env is in at that step; a bad frame or record is refused
    before a model loads."""
    from cosmos3_gym.model import model as model_module

    assert checkpoint_action_frame(PUSHT_CHECKPOINT) == "canvas" and checkpoint_action_frame(str(tmp_path)) == "canvas"
    assert dream().unwrapped.vector.action_frame == "canvas"
    loaded = []
    monkeypatch.setattr(model_module.Cosmos3Model, "from_pretrained",
                        lambda checkpoint, **kwargs: loaded.append(checkpoint) or stand_in_model)
    record = tmp_path / "training.json"
    record.write_text('{"args": {"action_frame": "agent"}}')
    env = Cosmos3PushTVectorEnv(1, checkpoint=str(tmp_path), num_steps=1, exact_coverage=False)
    assert env.action_frame == "agent" and loaded == [str(tmp_path)]
    seen = []
    imagine = env._imagine
    env._imagine = lambda slots, tasks, frames, actions, rngs: seen.append(actions) or imagine(slots, tasks, frames,
                                                                                               actions, rngs)
    obs, _ = env.reset(seed=2)
    frames = [obs[0]]
    for chunk in _chunks(0, 2):
        obs, *_ = env.step(chunk[None])
        frames.append(obs[0])
    for j, chunk in enumerate(_chunks(0, 2)):
        np.testing.assert_array_equal(seen[j][0], model_actions(chunk, frames[j]))
    with pytest.raises(ValueError, match=r"action_frame='relative' is invalid; use one of \('canvas', 'agent'\)"):
        Cosmos3PushTVectorEnv(1, checkpoint=str(tmp_path), action_frame="relative")
    for text, message in (('{"args": {"action_frame": "agnet"}}', r"args.action_frame='agnet' is not one of"),
                          ('{"args": null}', r"args.action_frame=None is not one of"), ("[1]", "JSON object"),
                          ("{", "not valid JSON")):
        record.write_text(text)
        with pytest.raises(ValueError, match=message):
            Cosmos3PushTVectorEnv(1, checkpoint=str(tmp_path))
    assert loaded == [str(tmp_path)]  # none of the refused ones loaded a model
    with pytest.raises(ValueError, match=r"frames has shape \(1, 96, 96, 3\); chunks of shape \(2, 8, 2\)"):
        model_actions(_chunks(0, 2), np.stack(frames[:1]))


def test_imagined_step_infos(dream):
    env = dream()
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(_chunks(0, 1)[0])
    assert env.observation_space.contains(obs)
    assert info["frames"].shape == (8, 96, 96, 3) and info["coverages"].shape == (8,)
    assert 1 <= info["played"] <= 8 and np.isfinite(info["log_prob_sum"])
    assert reward == pytest.approx(sum(pc.pusht_reward(c) for c in info["coverages"][:info["played"]]))
    np.testing.assert_array_equal(obs, info["frames"][-1])
    with pytest.raises(ValueError, match="512"):
        env.step(np.full((8, 2), 600.0, np.float32))


def test_registration_imports_neither_gym_pusht_nor_torch():
    code = ("import sys, cosmos3_gym, gymnasium as gym; "
            "assert {'Cosmos3PushT-v0', 'PushT-Twin-v0'} <= set(gym.registry), cosmos3_gym.PUSHT_ENV_IDS; "
            "print(sorted(m for m in ('torch', 'gym_pusht', 'pygame', 'pymunk') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_data_generator_clips():
    clips = generate(16, chunk=4, seed=0, clips_per_episode=4, progress=False)
    again = generate(16, chunk=4, seed=0, clips_per_episode=4, progress=False)
    assert clips.frames.shape == (16, 5, 96, 96, 3) and clips.frames.dtype == np.uint8
    assert clips.actions.shape == (16, 4, 2) and clips.actions.dtype == np.float32
    assert ((clips.actions >= 0) & (clips.actions <= 512)).all()
    np.testing.assert_array_equal(clips.frames, again.frames)
    # consecutive clips of an episode join: clip j + 1 starts where clip j ends
    for j in range(len(clips) - 1):
        if clips.episodes[j] == clips.episodes[j + 1]:
            np.testing.assert_array_equal(clips.frames[j, -1], clips.frames[j + 1, 0])
    summary = clips.summary()
    assert 0.0 <= summary["block_moved"] <= 1.0 and summary["clips"] == 16
    still = generate(4, chunk=4, mix={"still": 1.0}, near_goal=0.0, progress=False)
    assert not still.block_moved.any()


def test_the_twin_takes_numpy_seeds_and_keeps_the_dreams_pixels():
    """As the dream: reset(seed=np.int64(s)) is reset(seed=s) (gym-pusht itself takes Python ints only), and
    gym-pusht's observation size stays 96x96, the space Cosmos3PushT-v0 imagines."""
    twin = gym.make("PushT-Twin-v0")
    frame, info = twin.reset(seed=np.int64(3))
    again, info_again = gym.make("PushT-Twin-v0").reset(seed=3)
    np.testing.assert_array_equal(frame, again)
    assert info["coverage"] == info_again["coverage"]
    for keyword in ("observation_width", "observation_height"):
        with pytest.raises(TypeError, match=rf"unknown keyword\(s\) \['{keyword}'\]: .*always obs_type='pixels' at "
                                            r"96x96, the space Cosmos3PushT-v0 imagines"):
            gym.make("PushT-Twin-v0", **{keyword: 64})


def test_a_checkpoint_trained_for_the_other_world_is_refused_before_it_loads(monkeypatch):
    """Each checkpoint's training.json names its trainer: PushT's model in Cosmos3World-v0 (or the procedural
    world's in Cosmos3PushT-v0) would imagine the wrong world without a word, so both are refused, saying which
    env the checkpoint is for."""
    from cosmos3_gym.model.model import Cosmos3Model
    from cosmos3_gym.world.pusht import PUSHT_CHECKPOINT

    monkeypatch.setattr(Cosmos3Model, "from_pretrained", lambda *a, **k: pytest.fail("a model loaded"))
    tiny = str(Path(PUSHT_CHECKPOINT).parent / "cosmos3-tiny")
    for env_id, checkpoint, world, trainer in (("Cosmos3World-v0", str(PUSHT_CHECKPOINT), "Cosmos3PushT-v0",
                                                "cosmos3_gym.train_pusht"),
                                               ("Cosmos3PushT-v0", tiny, "Cosmos3World-v0",
                                                "cosmos3_gym.train.world_model")):
        with pytest.raises(ValueError, match=rf"was trained for {world} \(.*training.json: python -m {trainer}\), not "
                                             rf"for {env_id}; use gym.make\('{world}', checkpoint=...\)"):
            gym.make(env_id, checkpoint=checkpoint)
