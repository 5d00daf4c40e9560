"""The world-evaluation harness on stand-in worlds whose answers are known, and its statistics on
hand-made numbers.

* a copy of the truth (a world running its own ``ProceduralWorld-v0``): ratio 0, rho 1, MMRV 0,
  exploit rate 0;
* a world that pushes the object onto the goal whatever the agent commands (ignores actions, every
  episode an imagined success at step 1): ratio 1, and exactly the replays that fail in the truth
  are exploits;
* a world frozen on its reset frame (ignores actions, never succeeds): ratio 1, no exploit rate,
  MMRV in closed form;
* a world that draws the true object a pixel a step nearer the goal and reads success from that
  frame: its exploits are near misses, each as far from the truth as its drift at that step.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from cosmos3_gym.rollout.procedural_world import GOALS, MAX_SPEED, SUCCESS_RADIUS, PushTask, draw, push, \
    task_reward
from cosmos3_gym.world import harness
from cosmos3_gym.world.envs import ProceduralWorldEnv

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
EPISODES = 12
SEEDS = list(range(EPISODES))


class CopyWorld(gym.Env):
    """The imagined world IS the truth: its own ProceduralWorldEnv, stepped as given."""

    def __init__(self):
        self.inner = ProceduralWorldEnv()
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space
        self.horizon = self.inner.horizon

    def reset(self, *, seed=None, options=None):
        return self.inner.reset(seed=seed, options=options)

    def step(self, action):
        return self.inner.step(action)


class GoalPushWorld(CopyWorld):
    """Ignores the agent's actions: every step pushes the object with the command that carries it
    onto the goal's centre (so every episode is an imagined success after one step)."""

    def step(self, action):
        inner = self.inner
        target = np.array(GOALS[inner.task.goal]) * inner.size
        command = np.clip((target - np.array(inner.position)) / (MAX_SPEED * inner.chunk), -1, 1)
        return inner.step(np.tile(command, (inner.chunk, 1)).astype(np.float32))


class FrozenWorld(CopyWorld):
    """Ignores the agent's actions: the reset frame forever, reward 0, never a success."""

    def reset(self, *, seed=None, options=None):
        self.frame, info = self.inner.reset(seed=seed, options=options)
        self.t, self.prompt = 0, info["prompt"]
        return self.frame.copy(), info

    def step(self, action):
        self.t += 1
        frames = np.repeat(self.frame[None], self.inner.chunk, axis=0)
        return self.frame.copy(), 0.0, False, self.t >= self.horizon, {
            "prompt": self.prompt, "frames": frames, "success": False}


class NearMissWorld(CopyWorld):
    """The true dynamics, the frame after step ``t`` drawn ``t`` pixels toward the goal's side along x
    (``DRIFT`` = -1: away from it), and reward and success read from those frames: a model that drifts
    a pixel a step and calls success a little early (late)."""

    DRIFT = 1.0

    def reset(self, *, seed=None, options=None):
        _, info = self.inner.reset(seed=seed, options=options)
        self.task, self.position, self.t = self.inner.task, self.inner.position, 0
        self.frame = self.draw()
        return self.frame.copy(), info

    def draw(self):
        dx = self.DRIFT * self.t * np.sign(GOALS[self.task.goal][0] - 0.5)
        return draw(self.task, (self.position[0] + dx, self.position[1]), self.inner.size)

    def step(self, action):
        self.position = tuple(push(self.task, self.position, action, self.inner.size)[-1])
        self.t += 1
        before, self.frame = self.frame, self.draw()
        reward, success = task_reward(before, self.frame[None], self.task.goal)
        return self.frame.copy(), reward, success, self.t >= self.horizon and not success, {
            "prompt": self.task.prompt, "success": success}


@pytest.fixture(scope="module")
def truth():
    return ProceduralWorldEnv()


@pytest.fixture(scope="module")
def copy_record(truth):
    return harness.evaluate_world(CopyWorld(), truth, episodes=EPISODES, progress=False, label="copy")


def test_a_copy_of_the_truth_is_trusted_exactly(copy_record):
    sens = copy_record["sensitivity"]
    assert sens["ratio"] == 0.0 and sens["zero_ratio"] == 0.0
    assert all(e == 0.0 for episode in sens["errors"]["true"] for e in episode)
    assert sens["pairs"]["true"] > EPISODES  # episodes ran several steps, not one
    assert sens["lost"] == {"true": 0.0, "shuffled": 0.0, "zero": 0.0}
    assert sens["median_error"]["shuffled"] > 2.0 and sens["median_error"]["zero"] > 2.0  # pixels
    assert all(m > 0 for m in sens["per_step"]["shuffled"]["median"] if m is not None)
    assert sorted(sens["shuffle"]) == SEEDS and all(i != j for i, j in enumerate(sens["shuffle"]))
    rows = copy_record["policies"]
    assert len(rows) >= 10
    for row in rows:
        assert row["true"] == row["imagined"], row["name"]
    true_success = [r["true"]["success"] for r in rows]
    assert max(true_success) == 1.0 and min(true_success) == 0.0  # the policies span the range
    for metric in ("success", "return"):
        assert copy_record["agreement"][metric] == {"pearson": pytest.approx(1.0), "spearman": pytest.approx(1.0),
                                                     "mmrv": 0.0}
    assert copy_record["exploit"]["rate"] == 0.0 and copy_record["exploit"]["imagined_successes"] > 0


def test_a_world_that_pushes_to_the_goal_whatever_the_agent_does(truth):
    record = harness.evaluate_world(GoalPushWorld(), truth, episodes=EPISODES, progress=False)
    sens = record["sensitivity"]
    # The imagined trajectory depends on the seed only, so the three conditions compare the same
    # imagined frames with the same true ones: the ratios are 1 exactly, not merely near it.
    assert sens["ratio"] == pytest.approx(1.0) and sens["zero_ratio"] == pytest.approx(1.0)
    assert sens["errors"]["true"] == sens["errors"]["shuffled"] == sens["errors"]["zero"]
    assert sens["median_error"]["true"] > 2.0
    exploits = 0
    for row in record["policies"]:
        assert row["imagined"]["successes"] == [True] * EPISODES and row["imagined"]["steps"] == [1] * EPISODES
        # The imagined episode is one step whose action the policy chose from the reset frame, as in
        # the truth: its replay succeeds exactly where the true episode succeeded at step 1.
        won_at_once = [s and n == 1 for s, n in zip(row["true"]["successes"], row["true"]["steps"])]
        assert row["exploits"] == EPISODES - sum(won_at_once), row["name"]
        assert row["exploit_rate"] == pytest.approx(row["exploits"] / EPISODES)
        exploits += row["exploits"]
    by_name = {row["name"]: row for row in record["policies"]}
    assert by_name["still"]["exploit_rate"] == 1.0 and by_name["away"]["exploit_rate"] == 1.0
    assert by_name["greedy"]["exploit_rate"] == 0.0
    # A success that holds has both objects (as the detector reads them) within the success radius of
    # the goal, so at most two radii apart; an exploit's true object is outside it: never a zero gap.
    radius = SUCCESS_RADIUS * truth.size
    for row in record["policies"]:
        for gap in row["gaps"]:
            assert gap["gap"] > 0 if gap["exploit"] else gap["gap"] <= 2 * radius + 1e-9, (row["name"], gap)
    total = EPISODES * len(record["policies"])
    gaps = record["exploit"].pop("gap")
    assert gaps["exploits"] > gaps["held"]
    assert record["exploit"] == {"rate": pytest.approx(exploits / total), "exploits": exploits,
                                 "imagined_successes": total, "disagreement_auroc": None}
    assert record["agreement"]["success"]["spearman"] is None  # imagined success is 1 for every policy


def test_a_frozen_world_ignores_actions_and_never_succeeds(truth):
    record = harness.evaluate_world(FrozenWorld(), truth, episodes=EPISODES, progress=False)
    sens = record["sensitivity"]
    assert sens["ratio"] == pytest.approx(1.0) and sens["zero_ratio"] == pytest.approx(1.0)
    assert sens["pairs"]["true"] > 3 * EPISODES
    assert record["exploit"] == {"rate": None, "exploits": 0, "imagined_successes": 0, "disagreement_auroc": None,
                                 "gap": {"exploits": None, "held": None}}
    true = np.array([r["true"]["success"] for r in record["policies"]])
    # every imagined score ties: each policy's worst violation is its true lead over the worst policy
    assert record["agreement"]["success"]["mmrv"] == pytest.approx(float(np.mean(true - true.min())))
    assert record["agreement"]["success"]["pearson"] is None


def test_a_near_miss_is_as_far_from_the_truth_as_the_model_is_off(truth):
    """Every imagined success, exploit or not, is compared with its replay at the step it succeeded
    at, so each gap is that step's drift in pixels; some of the early calls are exploits."""
    # noiseless policies: noisy ones push the object into the wall, where the shifted drawing is cut
    policies = {name: policy for name, policy in harness.scripted_policies().items()
                if name in ("greedy", "half speed")}
    record = harness.evaluate_world(NearMissWorld(), truth, policies, episodes=EPISODES, progress=False)
    gaps, steps = [], []
    for row in record["policies"]:
        gaps += row["gaps"]
        steps += [n for n, won in zip(row["imagined"]["steps"], row["imagined"]["successes"]) if won]
    assert len(gaps) == record["exploit"]["imagined_successes"] > 0 and len(set(steps)) > 1
    assert [gap["gap"] for gap in gaps] == pytest.approx(steps, abs=1e-6)
    exploits = [n for gap, n in zip(gaps, steps) if gap["exploit"]]
    held = [n for gap, n in zip(gaps, steps) if not gap["exploit"]]
    assert 0 < len(exploits) < len(gaps)
    assert record["exploit"]["gap"] == {"exploits": pytest.approx(np.median(exploits)),
                                        "held": pytest.approx(np.median(held))}
    assert (f"{np.median(exploits):.2f} for the exploits, {np.median(held):.2f} for the successes that hold"
            in harness.markdown_report(record))


@pytest.fixture(scope="module")
def pool_parts(truth):
    """A NearMissWorld evaluation over seeds 0-11 with noiseless policies, and the same as two parts
    (seeds 0-4 and 5-11), as read back from JSON."""
    policies = {name: policy for name, policy in harness.scripted_policies().items()
                if name in ("greedy", "half speed", "slow", "still")}
    run = lambda seed, episodes: json.loads(json.dumps(harness.evaluate_world(  # noqa: E731  (as from disk)
        NearMissWorld(), truth, policies, episodes=episodes, seed=seed, progress=False)))
    return run(0, EPISODES), [run(0, 5), run(5, EPISODES - 5)]


def test_records_of_disjoint_seeds_pool_into_the_record_of_all_of_them(pool_parts):
    """Halves of an evaluation, pooled, equal the whole run wherever the parts' generators do not
    enter: noiseless policies' episodes, exploits and gaps, and the statistics taken over them. The
    sensitivity's actions come from each part's start seed, so its pooled numbers are checked against
    numpy over the parts' joined errors."""
    whole, parts = pool_parts
    pooled = harness.pool_records(parts)
    assert harness.pool_records(parts[::-1]) == pooled  # in the order of their seeds, however given
    assert pooled["seeds"] == SEEDS and pooled["episodes"] == EPISODES
    assert pooled["policies"] == whole["policies"] and pooled["agreement"] == whole["agreement"]
    assert pooled["exploit"] == whole["exploit"] and 0 < whole["exploit"]["exploits"]
    sens = pooled["sensitivity"]
    for condition in ("true", "shuffled", "zero"):
        joined = [e for part in parts for e in part["sensitivity"]["errors"][condition]]
        assert sens["errors"][condition] == joined
        assert sens["median_error"][condition] == pytest.approx(np.median([x for e in joined for x in e]))
    assert sens["ratio"] == pytest.approx(sens["median_error"]["true"] / sens["median_error"]["shuffled"])
    assert sens["shuffle"] == parts[0]["sensitivity"]["shuffle"] + [5 + i for i in parts[1]["sensitivity"]["shuffle"]]
    assert all(i != j for i, j in enumerate(sens["shuffle"]))  # still no episode keeps its own actions
    # a measure one part could not take (None) leaves the pooled one None, as one run's would be
    metric = lambda mean: {"iou": {"mean": mean, "per_step": {"median": [None] * 8, "mean": [mean] * 8,  # noqa: E731
                                                             "count": [5] * 8}}}
    with_metric = [{**part, "sensitivity": {**part["sensitivity"], "metrics": metric(m)}}
                   for part, m in zip(parts, (None, 0.5))]
    assert harness.pool_records(with_metric)["sensitivity"]["metrics"]["iou"]["mean"] is None
    assert harness.pool_records([with_metric[1]])["sensitivity"]["metrics"]["iou"]["mean"] == 0.5


@pytest.mark.parametrize("change, message", [
    (lambda a, b: [a, a], r"share reset seeds \(\[0, 1, 2, 3, 4\]\)"),
    (lambda a, b: [a, {**b, "label": "num_steps=4"}], "different settings"),
    (lambda a, b: [a, {**b, "policies": b["policies"][:2]}], "different policies"),
    (lambda a, b: [a, {**b, "sensitivity": {**b["sensitivity"], "horizon": 3}}], r"different horizons \(8 and 3\)"),
    (lambda a, b: [a, {k: v for k, v in b.items() if k != "exploit"}], "measured exploits and some did not"),
    (lambda a, b: [a, {k: v for k, v in b.items() if k != "policies"}], r"records\[1\] lacks \['policies'\]"),
    (lambda a, b: [], "records is an empty list; pass a list"),
    (lambda a, b: {"a": a}, "records is a dict; pass a list"),
])
def test_records_that_do_not_pool_are_refused(pool_parts, change, message):
    with pytest.raises(ValueError, match=message):
        harness.pool_records(change(*pool_parts[1]))


def test_pool_world_eval_pools_world_eval_files_and_refuses_what_does_not_pool(pool_parts, tmp_path, capsys):
    """benchmarks/pool_world_eval.py: world-eval's files pooled as pool_records pools their records, its figure
    beside them; runs of other flags, PushT runs, non-JSON, and a --out that is a run, a file, unwritable, empty or
    holds any world-eval file (its figure alone too) refused, one line each, before the report prints."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pool_world_eval", BENCHMARKS / "pool_world_eval.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    parts = pool_parts[1]

    def write(folder, part, **args):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "world_eval.json").write_text(json.dumps(
            {"args": {"seed": part["seed"], "device": "cpu", "success_margin": 0.0, **args}, "records": {"m": part}}))
        return str(tmp_path / folder)

    a, b = write("a", parts[0]), write("b", parts[1], dtype="float32")  # "" or no dtype: the CPU's float32
    assert script.main([b, a, "--out", str(tmp_path / "pooled")]) == 0
    out = capsys.readouterr().out
    assert "## m, seeds 0-11 pooled from 2 runs" in out and "the flags they share: device='cpu', dtype='float32'" in out
    assert (tmp_path / "pooled" / "world_eval.md").read_text().rstrip("\n") == out.rstrip("\n")
    saved = json.loads((tmp_path / "pooled" / "world_eval.json").read_text())
    assert saved["records"]["m"] == harness.pool_records(parts) and saved["args"]["dtype"] == "float32"
    assert (tmp_path / "pooled" / "world_eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # as world-eval's
    assert script.seed_ranges([0, 1, 2, 7, 8, 10]) == "0-2, 7-8, 10"
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "figure_only").mkdir()
    (tmp_path / "figure_only" / "world_eval.png").write_text("an earlier run's figure")
    for argv, message in (([a, write("c", parts[1], success_margin=2.0)], "other flags than"),
                          ([a, write("d", parts[1], world="pusht")], "is a --world pusht run"),
                          ([a, str(tmp_path / "a_file")], "is not JSON"),
                          ([a, a], "share reset seeds"),
                          ([a, b, "--out", a], "is one of the runs"),
                          ([a, b, "--out", str(tmp_path / "a_file")], "is a file"),
                          ([a, b, "--out", str(tmp_path / "pooled")],
                           "already holds world_eval.json, world_eval.md, world_eval.png; add --overwrite"),
                          ([a, b, "--out", str(tmp_path / "figure_only")], "already holds world_eval.png; add"),
                          ([a, b, "--out", ""], "argument --out: '' names no folder; name one"),
                          ([a, b, "--out", str(tmp_path / "a_file" / "sub")], "--out: cannot write to folder"),
                          ([str(tmp_path / "nothing")], "no world_eval.json at")):
        with pytest.raises(SystemExit) as exit_:
            script.main(argv)
        out, err = capsys.readouterr()
        assert exit_.value.code == 2 and message in err and "Traceback" not in err, (argv, err)
        assert out == ""  # refused before the report, not after it
    assert json.loads((tmp_path / "a" / "world_eval.json").read_text())["records"]["m"] == parts[0]  # untouched
    assert (tmp_path / "figure_only" / "world_eval.png").read_text() == "an earlier run's figure"


class LateWorld(NearMissWorld):
    DRIFT = -2.0  # two pixels a step away from the goal's side: enough to be a step late now and then


def test_a_success_imagined_late_is_compared_where_the_truth_succeeded():
    """Imagination that drifts away from the goal succeeds later than the truth: the replay ends at
    its own success, and the gap is that step's drift, less than the imagined success's."""
    policies = {name: policy for name, policy in harness.scripted_policies().items()
                if name in ("greedy", "half speed")}
    record = harness.evaluate_policies(LateWorld(), ProceduralWorldEnv(), policies, SEEDS, progress=False)
    pairs = [(gap["gap"] / -LateWorld.DRIFT, n) for row in record["policies"] for gap, n in zip(
        row["gaps"], [n for n, won in zip(row["imagined"]["steps"], row["imagined"]["successes"]) if won])]
    # the gap in steps of drift: a whole number, at most the imagined success's step, sometimes less
    assert pairs and all(k == pytest.approx(round(k), abs=1e-6) and 1 <= round(k) <= n for k, n in pairs)
    assert any(round(k) < n for k, n in pairs)


def test_a_pessimistic_copy_of_the_truth_never_exploits_and_succeeds_no_sooner(truth):
    """The truth with a success margin (what ``Cosmos3World-v0``'s ``success_margin`` asks of a dream,
    and what benchmarks/world_eval_error_bound.py's stand-ins take): the same episodes, a success
    called only nearer the goal, so never an exploit and never a success before the truth's."""
    world = ProceduralWorldEnv()
    world.success_radius = SUCCESS_RADIUS - 2.5 / world.size
    record = harness.evaluate_world(world, truth, episodes=EPISODES, progress=False)
    assert record["exploit"]["exploits"] == 0 and record["exploit"]["imagined_successes"] > 0
    counts = np.zeros(2, int)
    for row in record["policies"]:
        true, imagined = row["true"], row["imagined"]
        for won, steps, imagined_won, imagined_steps in zip(true["successes"], true["steps"],
                                                            imagined["successes"], imagined["steps"]):
            assert won or not imagined_won, row["name"]
            assert not imagined_won or steps <= imagined_steps, row["name"]
            counts += won, imagined_won
    assert counts[1] < counts[0]  # the margin turns some true successes into imagined failures or later ones


def test_the_verdict_judges_each_target_and_says_na_where_a_record_has_none(copy_record, truth):
    from cosmos3_gym.world_eval import verdict

    assert verdict(copy_record) == ("against the targets of this world: sensitivity ratio 0.00 (<= 0.20: met); "
                                    "Spearman rho on success 1.00 (>= 0.95: met); exploit rate 0.0% (<= 5.0%: met)")
    frozen = harness.evaluate_world(FrozenWorld(), truth, episodes=2, progress=False)
    assert verdict(frozen, "pusht", "return").endswith(
        "sensitivity ratio 1.00 (<= 0.30: missed); Spearman rho on return n/a (>= 0.90); exploit rate n/a (<= 10.0%)")


def test_the_record_is_json_and_renders(copy_record, tmp_path):
    text = json.dumps(copy_record, allow_nan=False)
    assert json.loads(text)["sensitivity"]["ratio"] == 0.0
    table = harness.markdown_report(copy_record)
    assert all(f"| {row['name']} |" in table for row in copy_record["policies"])
    assert "ratio **0.00**" in table and "exploit rate: **0%**" in table
    # no exploit, yet the gaps of the successes that hold are reported (0: the copy is exact)
    assert "median (px): n/a for the exploits, 0.00 for the successes that hold" in table
    harness.plot_report({"copy": copy_record, "again": copy_record}, tmp_path / "eval.png")
    assert (tmp_path / "eval.png").read_bytes()[:4] == b"\x89PNG"


def test_a_record_is_labelled_with_how_its_worlds_were_made():
    """Without ``label``, the record names each world's id and the plain keywords ``gym.make`` got (so a
    pessimistic dream's report says its margin), a world made without ``gym.make`` by its class; the
    report opens with it unless the caller writes its own heading."""
    policies = {name: policy for name, policy in harness.scripted_policies().items() if name == "greedy"}
    dream = gym.make("ProceduralWorld-v0", horizon=2, goal="top left")
    record = harness.evaluate_world(dream, ProceduralWorldEnv(horizon=2, goal="top left"), policies, episodes=2,
                                    progress=False)
    assert record["label"] == "ProceduralWorld-v0 (horizon=2, goal='top left') vs ProceduralWorldEnv"
    report = harness.markdown_report(record)
    assert report.startswith(f"### {record['label']}\n\n| policy |")
    assert harness.markdown_report(record, heading=False).startswith("| policy |")
    assert harness.evaluate_world(dream, dream, policies, episodes=2, label="mine", progress=False)["label"] == "mine"
    # numpy numbers are plain numbers; an object (a model, a callable) is left out, never copied

    class Model:
        copies = 0

        def __deepcopy__(self, memo):
            Model.copies += 1
            return Model()

    model = Model()
    dream = gym.make("ProceduralWorld-v0", horizon=np.int64(2), goal=None, render_mode=None)
    dream.unwrapped.spec.kwargs["model"] = model  # what gym.make("Cosmos3World-v0", model=m) records
    assert harness.worlds_label(dream, dream) == ("ProceduralWorld-v0 (horizon=2, goal=None, render_mode=None) vs "
                                                  "ProceduralWorld-v0 (horizon=2, goal=None, render_mode=None)")
    assert Model.copies == 0


def test_policies_can_be_callables_or_models_with_predict(truth):
    class Model:  # what SB3 offers: predict(obs, deterministic=True) -> (action, state)
        def predict(self, obs, deterministic=False):
            assert deterministic
            return np.full((8, 2), -1.0, np.float32), None

    record = harness.evaluate_policies(CopyWorld(), truth, {"model": Model(),
                                       "callable": lambda obs, info, rng: np.zeros((8, 2), np.float32)},
                                       SEEDS[:3], progress=False)
    assert [r["name"] for r in record["policies"]] == ["model", "callable"]
    assert record["policies"][0]["true"]["returns"] != record["policies"][1]["true"]["returns"]
    with pytest.raises(TypeError, match="not a policy"):
        harness.as_policy(42)


def test_each_policys_bar_says_how_many_policies_remain(truth, capsys):
    still = lambda obs, info, rng: np.zeros((8, 2), np.float32)  # noqa: E731
    harness.evaluate_policies(CopyWorld(), truth, {"first": still, "second": still}, SEEDS[:1], progress=True)
    bars = capsys.readouterr().err
    assert "policy 1/2 first" in bars and "policy 2/2 second" in bars


# --- closed forms -----------------------------------------------------------------------------
def test_pearson_and_spearman_on_hand_made_numbers():
    assert harness.pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(9 / math.sqrt(84))  # cov 3, var 2 and 14/3
    assert harness.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)  # 1 - 6 * 4 / (5 * 24)
    assert harness.spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert harness.spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)  # monotone, not linear
    np.testing.assert_array_equal(harness.ranks([3.0, 1.0, 3.0, 2.0]), [3.5, 1.0, 3.5, 2.0])
    assert harness.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)  # ranks 1.5, 1.5, 3
    assert math.isnan(harness.pearson([1, 1, 1], [1, 2, 3])) and math.isnan(harness.spearman([2, 2], [1, 2]))


def test_mmrv_on_hand_made_numbers():
    true = [0.1, 0.4, 0.5, 0.9]
    assert harness.mmrv(true, true) == 0.0
    assert harness.mmrv(true, [x ** 2 for x in true]) == 0.0  # only the order matters
    # reversed: every pair disagrees, so each policy's worst is its largest true gap: 0.8, 0.5, 0.4, 0.8
    assert harness.mmrv(true, true[::-1]) == pytest.approx((0.8 + 0.5 + 0.4 + 0.8) / 4)
    assert harness.mmrv([0.0, 0.5, 1.0], [0.5, 0.0, 1.0]) == pytest.approx(1 / 3)  # one swap, gap 0.5, twice
    assert harness.mmrv([0.0, 1.0], [0.3, 0.3]) == pytest.approx(0.5)  # an imagined tie hides a true order
    assert harness.mmrv([0.3, 0.3], [0.0, 1.0]) == 0.0  # a true tie weighs nothing
    # all imagined tied: each policy's worst is its true lead over the worst one (0, 0.2, 1.0), not its
    # gap to the best (1.0, 0.8, 0: what a ">=" in the imagined comparison would give, 0.6)
    assert harness.mmrv([0.0, 0.2, 1.0], [0.5] * 3) == pytest.approx(0.4)
    agreement = harness.rank_agreement(true, true[::-1])
    assert agreement["spearman"] == pytest.approx(-1.0) and agreement["mmrv"] == pytest.approx(0.625)


def test_bootstrap_ci_contains_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(1)
    small, large = rng.random(20) < 0.3, rng.random(2000) < 0.3
    (lo_s, hi_s), (lo_l, hi_l) = harness.bootstrap_ci(small), harness.bootstrap_ci(large)
    assert lo_s <= small.mean() <= hi_s and lo_l <= large.mean() <= hi_l
    assert hi_l - lo_l < (hi_s - lo_s) / 5  # width ~ 1 / sqrt(n): 100x the samples, ~10x narrower
    assert harness.bootstrap_ci(small) == (lo_s, hi_s)  # a fixed seed
    assert harness.bootstrap_ci([1.0] * 7) == (1.0, 1.0)
    assert all(math.isnan(x) for x in harness.bootstrap_ci([]))


def test_centre_error_reads_the_detector_in_pixels():
    task = PushTask(color="red", shape="square", size="big", goal="top left", start=(10.0, 10.0))
    a, b = draw(task, (10.0, 10.0)), draw(task, (13.0, 14.0))
    assert harness.centre_error(a, a) == 0.0
    assert harness.centre_error(a, b) == pytest.approx(5.0, abs=0.1)
    empty = np.full_like(a, 16)
    assert harness.centre_error(empty, a) == pytest.approx(math.hypot(32, 32))  # lost: the diagonal
    assert harness.centre_error(empty, empty) == 0.0


def test_derangement_never_keeps_an_episodes_own_actions():
    rng = np.random.default_rng(0)
    for n in (2, 3, 12):
        for _ in range(20):
            order = harness.derangement(rng, n)
            assert sorted(order) == list(range(n)) and all(i != j for i, j in enumerate(order))
    with pytest.raises(ValueError, match="at least 2"):
        harness.derangement(rng, 1)


@pytest.mark.slow
def test_the_harness_runs_on_cosmos3_world(tiny_model):
    """The shipped model end to end, tiny (2 denoising steps, 2 episodes, a horizon of 3)."""
    dream = gym.make("Cosmos3World-v0", num_steps=2, horizon=3, model=tiny_model)
    truth = ProceduralWorldEnv(horizon=3)
    policies = {name: p for name, p in harness.scripted_policies().items() if name in ("greedy", "still")}
    record = harness.evaluate_world(dream, truth, policies, episodes=2, progress=False)
    json.dumps(record, allow_nan=False)
    sens = record["sensitivity"]
    assert sens["pairs"]["true"] >= 2 and sens["median_error"]["shuffled"] is not None
    assert [r["name"] for r in record["policies"]] == ["greedy", "still"]
    assert record["policies"][0]["true"]["success"] == 1.0 and record["policies"][1]["true"]["success"] == 0.0


def test_auroc_counts_the_pairs_a_score_orders_rightly():
    from cosmos3_gym.world.harness import auroc

    assert auroc([3, 4], [1, 2]) == 1.0 and auroc([1, 2], [3, 4]) == 0.0 and auroc([1], [1]) == 0.5
    assert auroc([], [1]) is None and auroc([1], []) is None
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 37), rng.normal(0, 1, 41)
    pairs = [(1.0 if p > n else 0.5 if p == n else 0.0) for p in pos for n in neg]  # every pair, one by one
    assert auroc(pos, neg) == pytest.approx(sum(pairs) / len(pairs), abs=1e-12)
    # two equal normals a standard deviation apart: Phi(1 / sqrt 2) = 0.760 in the limit
    assert auroc(rng.normal(1, 1, 4000), rng.normal(0, 1, 4000)) == pytest.approx(0.760, abs=0.02)


def test_exploits_are_scored_by_the_episodes_disagreement(truth):
    """A stand-in world that makes up a success whenever the agent stands still, reporting a high
    disagreement exactly there: the AUROC is 1; reporting it on the real successes instead gives 0."""
    import gymnasium as gym

    from cosmos3_gym.world.harness import evaluate_policies, scripted_policies

    class Flagging(gym.Wrapper):
        def __init__(self, env, on_fake: bool):
            super().__init__(env)
            self.on_fake = on_fake

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            fake = not np.any(action)
            info = {**info, "success": bool(info["success"] or fake), "disagreement": float(fake == self.on_fake)}
            return obs, reward, terminated or fake, truncated, info

    policies = {k: v for k, v in scripted_policies().items() if k in ("greedy", "still")}
    for on_fake, expected in ((True, 1.0), (False, 0.0)):
        record = evaluate_policies(Flagging(gym.make("ProceduralWorld-v0"), on_fake), truth, policies, range(6),
                                   progress=False)
        ex = record["exploit"]
        assert ex["exploits"] == 6 and ex["imagined_successes"] == 12 and ex["disagreement_auroc"] == expected


def test_exploit_anatomy_counts_an_imagined_objects_pieces_and_refuses_bad_flags(monkeypatch, capsys):
    """benchmarks/exploit_anatomy.py tells a displaced dream (one piece) from a misread frame (several):
    its piece count, against masks whose pieces are drawn by hand (4-connected: a diagonal touch
    does not join two pieces)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("exploit_anatomy", BENCHMARKS / "exploit_anatomy.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "exploit_anatomy", script)  # its dataclass looks its module up there
    spec.loader.exec_module(script)
    mask = np.zeros((32, 32), bool)
    assert script.pieces(mask) == []
    mask[2:5, 3:7] = True  # a 3x4 block
    assert script.pieces(mask) == [12]
    mask[5, 7] = True  # touches the block's corner only
    mask[20:22, 0] = True  # at the edge
    assert sorted(script.pieces(mask)) == [1, 2, 12]
    mask[5, 6] = True  # now joins the corner pixel to the block
    assert sorted(script.pieces(mask)) == [2, 14]
    for flags, message in ((["--episodes", "0"], "--episodes 0 is too small; use 1 or more"),
                           (["--success-margin", "4.8"], "--success-margin 4.8: use a number of pixels in [0, 4.8)")):
        with pytest.raises(SystemExit):
            script.main(flags)
        assert message in capsys.readouterr().err
