"""The PushT harness pieces (cosmos3_gym.world.pusht_eval), checked against gym-pusht's own state,
and the harness run on a stand-in imagined world that is gym-pusht itself (its answers are known)."""

import numpy as np
import pytest

pytest.importorskip("gym_pusht")

import gymnasium as gym  # noqa: E402

from cosmos3_gym.world import harness  # noqa: E402
from cosmos3_gym.world.pusht import CHUNK, PushTTwinEnv  # noqa: E402
from cosmos3_gym.world.pusht_coverage import SIZE, make_pusht  # noqa: E402
from cosmos3_gym.world.pusht_data import Pusher, generate  # noqa: E402
from cosmos3_gym.world.pusht_eval import (  # noqa: E402
    WALK_STEP, agent_position, block_iou, clone_policy, coverage_error, pusht_harness_kwargs, pusht_policies,
    random_walk_targets, state_error,
)

SCALE = SIZE / 512.0


@pytest.fixture(scope="module")
def starts():
    """gym-pusht's reset frames and states for seeds 0-7."""
    env = make_pusht()
    out = [env.reset(seed=s) for s in range(8)]
    env.close()
    return out


def test_the_agent_is_read_where_gym_pusht_has_it(starts):
    for frame, info in starts:
        np.testing.assert_allclose(agent_position(frame), info["pos_agent"], atol=2.0)


def test_state_error_is_the_mean_of_the_agents_and_the_blocks_distances(starts):
    """Against gym-pusht's state: the agent's position and the T's area centroid (Pusher.centroid)."""
    (a, info_a), (b, info_b) = starts[0], starts[1]
    assert state_error(a, a) == 0.0 and block_iou(a, a) == 1.0 and coverage_error(a, a) == 0.0
    agent = np.linalg.norm(np.subtract(info_a["pos_agent"], info_b["pos_agent"])) * SCALE
    block = np.linalg.norm(Pusher.centroid(info_a["block_pose"]) - Pusher.centroid(info_b["block_pose"])) * SCALE
    assert state_error(a, b) == pytest.approx(0.5 * (agent + block), abs=1.0)
    far = [(f, i) for f, i in starts[1:] if np.linalg.norm(Pusher.centroid(i["block_pose"])
                                                          - Pusher.centroid(info_a["block_pose"])) > 200]
    assert far and block_iou(a, far[0][0]) < 0.02  # blocks 200 units apart: a stray edge pixel at most


def test_a_blurred_frame_keeps_its_positions(starts):
    """Imagined frames come out blurred; the positions are colour masses, so blur moves them little."""
    frame = starts[2][0].astype(np.float64)
    for _ in range(3):  # a 3x3 box blur, three times (edges padded)
        padded = np.pad(frame, ((1, 1), (1, 1), (0, 0)), mode="edge")
        frame = sum(padded[i:i + SIZE, j:j + SIZE] for i in range(3) for j in range(3)) / 9.0
    blurred = frame.round().astype(np.uint8)
    assert 0.0 < state_error(blurred, starts[2][0]) < 1.5


def test_random_walk_targets_walk_in_steps_of_walk_step_and_reflect_at_the_walls():
    space, rng, steps, points = PushTTwinEnv().action_space, np.random.default_rng(0), [], []
    for _ in range(50):
        walk = random_walk_targets(rng, space, 8)
        assert walk.shape == (8, CHUNK, 2) and all(space.contains(chunk) for chunk in walk)
        points.append(walk.reshape(-1, 2))
        steps.append(np.diff(points[-1], axis=0))
    steps, points = np.concatenate(steps), np.concatenate(points)
    # a reflection shortens the step that crosses a wall, and only that one: the spread stays WALK_STEP's
    assert len(steps) > 2000 and np.std(steps) == pytest.approx(WALK_STEP, rel=0.05)
    assert np.abs(steps.mean(0)).max() < 2.0  # no drift
    on_a_wall = ((points == 0) | (points == 512)).any(1).mean()
    assert on_a_wall == 0.0  # a clipped walk left about a quarter of its targets on a wall
    near = ((points < 25) | (points > 487)).any(1).mean()  # the band of one step along the walls: about
    assert 0.05 < near < 0.25  # its share of the canvas (18 %), not a pile-up


def test_the_clone_replays_the_nearest_push_relative_to_the_agent():
    clips = generate(8, seed=4, mix={"push": 1.0}, clips_per_episode=2, progress=False)
    policy = clone_policy(clips)
    for i in (0, 3):
        chunk = policy(clips.frames[i, 0], {}, np.random.default_rng(0))
        expected = np.clip(clips.actions[i] - clips.agent_positions[i, 0] + agent_position(clips.frames[i, 0]), 0, 512)
        np.testing.assert_allclose(chunk, expected, atol=1e-3)
        np.testing.assert_allclose(chunk, clips.actions[i], atol=2.5)  # the agent is read within 2 units
    with pytest.raises(ValueError, match="scripted pushes"):
        clone_policy(generate(2, seed=4, mix={"still": 1.0}, progress=False))


def test_the_pusher_beats_standing_still_in_gym_pusht():
    """Acting on pixels alone, the scripted pusher raises the goal coverage where standing still cannot."""
    policies = pusht_policies(noise_levels=(0.0,))
    twin = gym.make("PushT-Twin-v0", horizon=12)
    runs = {name: [harness.run_episode(twin, s, lambda o, i, k, p=policies[name], r=np.random.default_rng(s):
                                       p(o, i, r)) for s in range(4)] for name in ("pusher", "still")}
    twin.close()
    assert np.mean([r["return"] for r in runs["pusher"]]) > np.mean([r["return"] for r in runs["still"]]) + 0.5


def test_a_world_that_is_gym_pusht_scores_as_gym_pusht():
    """The harness with PushT's pieces on an imagined world that is a second gym-pusht: it follows the
    actions exactly (ratio 0), its blocks overlap the truth's (IoU 1, coverage error 0), every policy
    scores the same in both (Spearman 1 on return) and no success is an exploit."""
    truth, copy = gym.make("PushT-Twin-v0", horizon=2), gym.make("PushT-Twin-v0", horizon=2)
    record = harness.evaluate_world(copy, truth, pusht_policies(noise_levels=(0.0, 20.0)), episodes=3,
                                    progress=False, **pusht_harness_kwargs())
    sens = record["sensitivity"]
    assert sens["ratio"] == 0.0 and sens["median_error"]["shuffled"] > 5.0
    assert sens["metrics"]["block IoU"]["mean"] == 1.0 and sens["metrics"]["coverage error"]["mean"] == 0.0
    assert sens["metrics"]["block IoU"]["per_step"]["count"] == [3, 3]
    for row in record["policies"]:
        assert row["true"]["returns"] == row["imagined"]["returns"] and row["exploits"] == 0
    assert record["agreement"]["return"]["spearman"] == pytest.approx(1.0)
    hold = pusht_harness_kwargs()["zero_action"]
    assert hold.shape == truth.action_space.shape and truth.action_space.contains(hold)
    # the report calls PushT's "zero actions" what they are: the target held at the centre
    report = harness.markdown_report(record)
    assert "held-action ratio" in report and "(true / shuffled / held actions)" in report and "zero" not in report
