"""The procedural world, its detector and the rewards built on them."""

import numpy as np
import pytest

from cosmos3_gym.env.rewards import REWARDS
from cosmos3_gym.rollout.procedural_world import (
    ACTION_KINDS, COLORS, DIRECTIONS, GOALS, MAX_SPEED, action_chunks, chunk_commands, dataset, detect, goal_distance, locate,
    parse_prompt, push, render, sample_scene, sample_task)


def test_dataset_is_deterministic_and_varied():
    a, scenes_a = dataset(7, 40)
    b, scenes_b = dataset(7, 40)
    c, _ = dataset(8, 40)
    assert np.array_equal(a, b) and scenes_a == scenes_b and not np.array_equal(a, c)
    assert a.shape == (40, 9, 32, 32, 3) and a.dtype == np.uint8
    assert {s.color for s in scenes_a} == set(COLORS) and {s.direction for s in scenes_a} == set(DIRECTIONS)


def test_detector_reads_back_every_rendered_scene():
    videos, scenes = dataset(3, 200)
    for video, scene in zip(videos, scenes):
        found = detect(video)
        assert found.color == scene.color and found.direction == scene.direction, scene.caption


def test_locate_is_the_detectors_position_without_its_colour_vote():
    """The reward's object centre (``locate``, one frame) is the centre ``detect`` reports for that
    frame, and None exactly where ``detect`` finds no object; frames of every density, from none to
    every pixel bright (a random-weight model's imaginings), and of a non-square size."""
    rng = np.random.default_rng(0)
    videos, _ = dataset(4, 20)
    frames = list(videos[:, -1])
    for density in (0.0, 1 / 2048, 0.01, 0.3, 1.0):
        for shape in ((32, 32, 3), (48, 64, 3)):
            bright = rng.random(shape[:2]) < density
            frames.append(np.where(bright[..., None], rng.integers(91, 256, shape), rng.integers(0, 91, shape))
                          .astype(np.uint8))
    missing = 0
    for frame in frames:
        found, reference = locate(frame), detect(frame[None])
        if reference.color is None:
            missing += 1
            assert found is None
        else:
            assert found == reference.position
    assert 0 < missing < len(frames)


def test_objects_stay_in_frame():
    rng = np.random.default_rng(0)
    for _ in range(100):
        video = render(sample_scene(rng))
        assert all((frame.max(axis=-1) > 90).sum() > 4 for frame in video)


def test_detector_on_an_empty_video():
    found = detect(np.zeros((9, 32, 32, 3), dtype=np.uint8))
    assert found.color is None and found.direction is None


@pytest.mark.parametrize("prompt,expected", [
    ("a big red ball slides to the right", {"color": "red", "direction": "right", "position": None}),
    ("a small blue ball rises", {"color": "blue", "direction": "up", "position": None}),
    ("a green square falls down", {"color": "green", "direction": "down", "position": None}),
    ("a yellow triangle on the left", {"color": "yellow", "direction": None, "position": (0.25, 0.5)}),
])
def test_parse_prompt(prompt, expected):
    assert parse_prompt(prompt) == expected


def test_adherence_rewards_separate_right_from_wrong_prompts():
    videos, scenes = dataset(11, 16)
    right = [s.caption for s in scenes]
    flip = {"left": "right", "right": "left", "up": "down", "down": "up"}
    wrong = [f"a {s.size} {'blue' if s.color == 'red' else 'red'} {s.shape} moves {flip[s.direction]}"
             .replace("moves right", "moves to the right").replace("moves left", "moves to the left")
             for s in scenes]
    for name in ("color_adherence", "direction_adherence"):
        np.testing.assert_allclose(REWARDS[name](videos, right), 1.0, atol=1e-3)  # bounces tilt the motion a hair
        np.testing.assert_allclose(REWARDS[name](videos, wrong), 0.0, atol=1e-3)
    total_right, total_wrong = REWARDS["prompt_adherence"](videos, right), REWARDS["prompt_adherence"](videos, wrong)
    assert (total_right > 0.9).all() and (total_wrong < 0.25).all()


def test_position_adherence():
    video = np.full((1, 1, 32, 32, 3), 16, dtype=np.uint8)
    video[0, 0, 4:10, 13:19] = COLORS["red"]  # top centre
    top, bottom = REWARDS["position_adherence"](video, ["a red square at the top"]), \
        REWARDS["position_adherence"](video, ["a red square at the bottom"])
    assert top[0] > 0.9 and bottom[0] < top[0] - 0.4


def test_a_one_frame_render_is_the_first_frame_of_the_video():
    import numpy as np

    from cosmos3_gym.rollout.procedural_world import render, sample_scene

    for seed in range(20):  # every verb, "falls" included
        scene = sample_scene(np.random.default_rng(seed))
        np.testing.assert_array_equal(render(scene, num_frames=1)[0], render(scene)[0])


# --- the dynamics data's action kinds ----------------------------------------------------


def _end(task, commands):
    return tuple(push(task, task.start, commands)[-1])


def test_zero_commands_leave_the_object_where_it_started():
    tasks, frames, commands = action_chunks(np.random.default_rng(0), 6, 8, "zero")
    assert not commands.any()
    assert (frames == frames[:, :1]).all()  # every frame is the first: nothing moved


def test_greedy_reaches_the_goal_and_away_leaves_it():
    rng = np.random.default_rng(1)
    for _ in range(20):
        task = sample_task(rng)
        heading = (np.array(GOALS[task.goal]) * 32 - np.array(task.start)) / (MAX_SPEED * 8)
        start = goal_distance(task.start, task.goal)
        greedy = chunk_commands(rng, task, 8, "greedy")
        assert np.allclose(greedy, np.clip(heading, -1, 1))  # the same command every frame
        if np.abs(heading).max() <= 1:  # reachable in one chunk: lands on the goal's centre (walls aside)
            assert goal_distance(_end(task, greedy), task.goal) < 0.05
        assert goal_distance(_end(task, chunk_commands(rng, task, 8, "away")), task.goal) >= start - 1e-9


def test_scaled_and_stop_are_fractions_of_the_greedy_command():
    rng = np.random.default_rng(2)
    task = sample_task(rng)
    greedy = chunk_commands(rng, task, 8, "greedy")
    for _ in range(10):
        scaled = chunk_commands(rng, task, 8, "scaled")
        factor = scaled[0] / greedy[0]  # one fraction in [0, 1] for both axes and every frame
        assert 0 <= factor[0] <= 1 and np.isclose(factor[0], factor[1]) and (scaled == scaled[0]).all()
        stop = chunk_commands(rng, task, 8, "stop")
        moving = np.abs(stop).sum(axis=1) > 0
        first_still = int(np.argmin(moving)) if not moving.all() else 8
        assert not moving[first_still:].any() and np.allclose(stop[:first_still], greedy[:first_still])


def test_uniform_commands_are_independent_per_frame_and_in_range():
    commands = action_chunks(np.random.default_rng(3), 400, 8, "uniform")[2]
    assert commands.min() >= -1 and commands.max() <= 1
    # independent frames: neighbouring frames' commands are uncorrelated (a "turn" chunk's are near 1)
    r = np.corrcoef(commands[:, :-1, 0].ravel(), commands[:, 1:, 0].ravel())[0, 1]
    assert abs(r) < 0.05
    turns = action_chunks(np.random.default_rng(3), 400, 8, "turn")[2]
    assert np.corrcoef(turns[:, :-1, 0].ravel(), turns[:, 1:, 0].ravel())[0, 1] > 0.6


def test_noisy_commands_jitter_around_the_greedy_heading_at_a_scale_drawn_per_chunk():
    rng = np.random.default_rng(5)
    task = sample_task(rng)
    heading = chunk_commands(rng, task, 64, "greedy")[0]
    chunks = np.stack([chunk_commands(rng, task, 64, "noisy") for _ in range(300)])
    assert chunks.min() >= -1 and chunks.max() <= 1
    saturated = (np.abs(chunks) == 1).mean(axis=(1, 2))  # per chunk: the share of commands at full speed
    assert saturated.min() < 0.1 and saturated.max() > 0.85  # noise 0.5 rarely clips, noise 8 nearly always
    calm = chunks[saturated < 0.05]  # noise near 0.5: unclipped, so the mean is the heading
    assert np.abs(calm.mean(axis=(0, 1)) - heading).max() < 4 * 0.6 / np.sqrt(calm.shape[0] * 64)
    wild = chunks[saturated > 0.85]  # full-speed coin flips, biased toward the goal, independent per frame
    assert np.all(np.sign(wild.mean(axis=(0, 1))) == np.sign(heading))
    assert abs(np.corrcoef(wild[:, :-1, 0].ravel(), wild[:, 1:, 0].ravel())[0, 1]) < 0.1


def test_a_mix_draws_each_kind_in_proportion():
    commands = action_chunks(np.random.default_rng(4), 600, 8, mix={"zero": 1.0, "uniform": 2.0})[2]
    still = float(np.mean([not c.any() for c in commands]))
    assert abs(still - 1 / 3) < 4 * np.sqrt(1 / 3 * 2 / 3 / 600)  # binomial, four standard deviations


def test_an_unknown_kind_is_named():
    with pytest.raises(ValueError, match=r"kind='jump'.*'turn'"):
        action_chunks(np.random.default_rng(0), 1, 8, "jump")
    assert set(ACTION_KINDS) >= {"turn", "uniform", "zero", "expert", "away"}
