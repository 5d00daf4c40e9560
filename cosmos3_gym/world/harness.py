"""How far can the dream be trusted? An imagined world scored against its ground-truth twin.

Given an imagined world ``W`` (``Cosmos3World-v0``) and a twin ``R`` with the same spaces whose
``reset(seed=s)`` starts the same episode (``ProceduralWorld-v0``), three measurements:

* **action sensitivity** (:func:`action_sensitivity`): one open-loop action sequence per episode
  runs in ``R``; ``W`` starts from the same seed and is fed (a) the same actions, (b) another
  episode's actions (shuffled, a derangement: no episode keeps its own) and (c) zero actions. The
  error between ``W``'s and ``R``'s observation after each step comes from ``error_fn`` (default
  :func:`centre_error`: the distance in pixels between the colour-mass centres the procedural world's
  detector reads from the two frames). ``ratio`` = median error under the true actions / median
  error under the shuffled ones: 0 when ``W`` follows the actions exactly, about 1 when it ignores
  them; ``zero_ratio`` the same against zero actions. Per step of the horizon (``per_step``) the
  median and mean error of each condition: the drift curve.
* **policy evaluation** (:func:`evaluate_policies`): every policy runs in both worlds from the same
  seeds (its random generator seeded alike in both), closed loop on each world's own observations.
  Mean return and success with percentile-bootstrap confidence intervals (:func:`bootstrap_ci`),
  and across policies Pearson r, Spearman rho and MMRV (:func:`rank_agreement`).
* **exploit rate**: every imagined success's exact action sequence is replayed open loop in ``R``
  from the same reset seed; an exploit is one that does not succeed there (at any step of the
  replay: an episode that succeeds sooner or later than imagined is no exploit). The rate is exploits /
  imagined successes (pooled over policies, and per policy); ``None`` when ``W`` had no success.
  How near a miss each one was: ``error_fn`` between the imagined observation that succeeded and
  the replay's at the same step (the *gap*), beside the same gap for the successes that hold: an
  exploit whose gap is about the model's usual error is a near miss of the goal, a large one an
  imagined event.

:func:`evaluate_world` runs all three and returns one JSON-serialisable record (:func:`pool_records`
joins the records of runs over disjoint seeds); :func:`markdown_report` and :func:`plot_report` turn it
into a table and a figure. Everything runs
on single ``gym.Env`` s (no vector env needed); success is ``info["success"]`` where a step reports
it, else ``terminated``. Policies are ``policy(obs, info, rng) -> action`` callables or anything
with ``.predict(obs, deterministic=True)`` (a Stable-Baselines3 model); :func:`scripted_policies`
builds the procedural world's reference set (greedy toward the goal at several noise levels, half
speed, slow, half a push, late, random, still, away from the goal).

    from cosmos3_gym.world.harness import evaluate_world, markdown_report, plot_report
    record = evaluate_world(gym.make("Cosmos3World-v0", num_steps=4), gym.make("ProceduralWorld-v0"),
                            episodes=12)
    print(markdown_report(record)); plot_report(record, "world_eval.png")
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..rollout.procedural_world import GOALS, MAX_SPEED, locate

Policy = Callable[[Any, dict, np.random.Generator], np.ndarray]
ErrorFn = Callable[[Any, Any], float]
LostFn = Callable[[Any], bool]
ActionSampler = Callable[[np.random.Generator, Any, int], np.ndarray]


# --- errors between an imagined and a true observation ----------------------------------
def object_centre(frame: np.ndarray) -> tuple[float, float] | None:
    """The colour-mass centre ``(x, y)`` in pixels of the main object of a uint8 ``[H, W, 3]``
    frame (the procedural world's :func:`~cosmos3_gym.rollout.procedural_world.locate`, the
    detector its reward reads), or None where it finds no object."""
    found = locate(np.asarray(frame))
    if found is None:
        return None
    height, width = frame.shape[:2]
    return found[0] * width, found[1] * height


def object_lost(frame: np.ndarray) -> bool:
    """Whether the detector finds no object in ``frame`` (an imagined world can lose it: the frame
    fades to the background, and stays so, since the next chunk is conditioned on it)."""
    return object_centre(frame) is None


def centre_error(imagined: np.ndarray, true: np.ndarray) -> float:
    """Distance in pixels between the object centres of two frames (:func:`object_centre`).

    A frame with no object found counts as maximally wrong, the frame's diagonal, unless neither
    has one (0): the error stays finite, so means and medians do too."""
    a, b = object_centre(imagined), object_centre(true)
    if a is None or b is None:
        return 0.0 if a is None and b is None else float(np.hypot(*np.asarray(true).shape[:2]))
    return float(np.hypot(a[0] - b[0], a[1] - b[1]))


# --- statistics --------------------------------------------------------------------------
def bootstrap_ci(values: Sequence[float], confidence: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the mean of ``values`` (numpy, a fixed seed:
    the same values give the same interval). ``(nan, nan)`` for no values."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, (resamples, values.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson's correlation; nan when either side is constant (or has fewer than two values)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"pearson: {x.shape} and {y.shape} values; they must pair up")
    if x.size < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    scale = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return math.nan if scale == 0.0 else float((dx * dy).sum() / scale)


def ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing the mean of their places (``scipy.stats.rankdata``'s ``average``)."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="stable")
    out = np.empty(values.size)
    sorted_values = values[order]
    start = 0
    while start < values.size:
        end = start
        while end + 1 < values.size and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        out[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the average ranks (as ``scipy.stats.spearmanr``,
    which this venv does not have); nan when either side is constant."""
    return pearson(ranks(x), ranks(y))


def mmrv(true: Sequence[float], imagined: Sequence[float]) -> float:
    """Mean maximum rank violation of the imagined scores against the true ones.

    For policies ``i, j`` the rank violation is ``|true_i - true_j|`` when the two worlds order them
    differently, ``(imagined_i > imagined_j) != (true_i > true_j)``, and 0 otherwise; MMRV is the mean
    over ``i`` of the largest violation over ``j``. This is SIMPLER's definition (Li et al. 2024,
    "Evaluating Real-World Robot Manipulation Policies in Simulation"), used by the papers that
    evaluate policies in world models (WorldGym and others): strict comparisons, so a tie in one
    world where the other has an order counts, weighted by the true gap (a tie in the truth weighs
    0). 0 = the imagined ranking loses nothing that matters; in the units of the scores (a success
    rate: a fraction). nan for no policies.
    """
    true, imagined = np.asarray(true, dtype=float), np.asarray(imagined, dtype=float)
    if true.shape != imagined.shape:
        raise ValueError(f"mmrv: {true.shape} and {imagined.shape} values; they must pair up")
    if true.size == 0:
        return math.nan
    disagree = (imagined[:, None] > imagined[None, :]) != (true[:, None] > true[None, :])
    gaps = np.abs(true[:, None] - true[None, :]) * disagree
    return float(gaps.max(axis=1).mean())


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    """The probability that a random positive scores above a random negative (ties count half): the
    area under the ROC curve of the score as a detector of positives; None without both kinds."""
    if not len(positives) or not len(negatives):
        return None
    p, n = np.asarray(positives, float)[:, None], np.asarray(negatives, float)[None, :]
    return float(np.mean((p > n) + 0.5 * (p == n)))


def rank_agreement(true: Sequence[float], imagined: Sequence[float]) -> dict:
    """``{"pearson", "spearman", "mmrv"}`` of per-policy scores (None where undefined)."""
    return {"pearson": _finite(pearson(true, imagined)), "spearman": _finite(spearman(true, imagined)),
            "mmrv": _finite(mmrv(true, imagined))}


# --- policies ------------------------------------------------------------------------------
def goal_of(info: dict) -> str:
    """The goal corner (a key of :data:`~cosmos3_gym.rollout.procedural_world.GOALS`) that
    ``info["prompt"]`` names."""
    prompt = info.get("prompt", "") if isinstance(info, Mapping) else ""
    for goal in sorted(GOALS, key=len, reverse=True):
        if prompt.endswith(goal):
            return goal
    raise ValueError(f"the procedural world's scripted policies read the goal from info['prompt'], "
                     f"and {prompt!r} names none of {list(GOALS)}")


def greedy_heading(obs: np.ndarray, info: dict, chunk: int) -> np.ndarray:
    """The per-frame command ``(dx, dy)`` that carries the object seen in ``obs`` onto the goal's
    centre in one chunk (unclipped; zeros where no object is seen)."""
    centre = object_centre(obs)
    if centre is None:
        return np.zeros(2)
    size = np.array(obs.shape[1::-1], dtype=float)  # (width, height)
    target = np.array(GOALS[goal_of(info)]) * size
    return (target - np.array(centre)) / (MAX_SPEED * chunk)


def scripted_policies(chunk: int = 8, noise_levels: Sequence[float] = (0.0, 1.0, 2.0, 4.0, 8.0),
                      late_start: int = 4) -> dict[str, Policy]:
    """The procedural world's reference policies, ``name -> policy(obs, info, rng)``. They read the
    object from the frame (:func:`object_centre`) and the goal from ``info["prompt"]``, so in an
    imagined world they act on what it imagines; a policy counts its steps from the infos (a reset's
    info has no ``frames``).

    ``greedy`` (and ``greedy noise s`` for each non-zero level of ``noise_levels``: Gaussian noise of
    standard deviation ``s`` on every frame's command): the command that carries the object onto the
    goal's centre in one chunk, clipped to [-1, 1]; ``half speed``: the same clipped to [-0.5, 0.5];
    ``slow``: 0.15 of it (reaches the goal within the horizon from some starts only); ``half push``:
    half of it for one step, then still (stops about one success radius short of the goal);
    ``late``: still for ``late_start`` steps, then greedy (success only if the world has not drifted
    meanwhile); ``random``: uniform commands; ``still``: zeros; ``away``: the greedy command
    reversed. True-world success over seeds 0-199 (chunk 8, horizon 8, seed 0's generators):
    greedy, noise 1, half speed, late 1.00; noise 2 0.92, noise 4 0.66, noise 8 0.50, slow 0.61,
    random 0.12, half push 0.015, still and away 0.
    """
    def make(gain: float = 1.0, noise: float = 0.0, limit: float = 1.0, steps=None):
        def policy(obs, info, rng):
            step = policy.step = 0 if "frames" not in info else policy.step + 1
            heading = gain * greedy_heading(obs, info, chunk)
            if steps is not None and step not in steps:
                heading = np.zeros(2)
            commands = np.tile(heading, (chunk, 1)) + (rng.normal(0.0, noise, (chunk, 2)) if noise else 0.0)
            return np.clip(commands, -limit, limit).astype(np.float32)
        policy.step = 0
        return policy

    policies: dict[str, Policy] = {}
    for noise in noise_levels:
        policies["greedy" if noise == 0 else f"greedy noise {noise:g}"] = make(noise=float(noise))
    policies["half speed"] = make(limit=0.5)
    policies["slow"] = make(gain=0.15)
    policies["half push"] = make(gain=0.5, steps={0})
    policies["late"] = make(steps=range(late_start, 1 << 30))
    policies["random"] = lambda obs, info, rng: rng.uniform(-1.0, 1.0, (chunk, 2)).astype(np.float32)
    policies["still"] = lambda obs, info, rng: np.zeros((chunk, 2), np.float32)
    policies["away"] = make(gain=-1.0)
    return policies


def as_policy(policy) -> Policy:
    """``policy(obs, info, rng)`` from a callable of that form or from anything with
    ``.predict(obs, deterministic=True)`` (a Stable-Baselines3 model: its action, state ignored)."""
    if hasattr(policy, "predict"):
        return lambda obs, info, rng: np.asarray(policy.predict(obs, deterministic=True)[0])
    if callable(policy):
        return policy
    raise TypeError(f"{policy!r} is not a policy: pass policy(obs, info, rng) -> action or a model with "
                    ".predict(obs, deterministic=True)")


# --- running episodes ---------------------------------------------------------------------
def _success(info: dict, terminated: bool) -> bool:
    return bool(info["success"]) if isinstance(info, Mapping) and "success" in info else bool(terminated)


def run_episode(env, seed: int, act: Callable[[Any, dict, int], Any], max_steps: int | None = None) -> dict:
    """One episode from ``env.reset(seed=seed)``; ``act(obs, info, step) -> action`` (None ends the
    episode early). Returns ``{"observations": [the obs after each step], "actions", "rewards",
    "disagreement" (each step's ``info["disagreement"]``, where the env reports one), "return",
    "success", "success_step" (the index in ``observations`` of the first success, or None), "steps"}``;
    success is whether a step reported one."""
    obs, info = env.reset(seed=int(seed))
    out = {"observations": [], "actions": [], "rewards": [], "disagreement": [], "success": False,
           "success_step": None}
    step = 0
    while max_steps is None or step < max_steps:
        action = act(obs, info, step)
        if action is None:
            break
        obs, reward, terminated, truncated, info = env.step(action)
        out["observations"].append(obs)
        out["actions"].append(np.asarray(action))
        out["rewards"].append(float(reward))
        if isinstance(info, Mapping) and info.get("disagreement") is not None:
            out["disagreement"].append(float(info["disagreement"]))
        step += 1
        if _success(info, terminated) and not out["success"]:
            out["success"], out["success_step"] = True, step - 1
        if terminated or truncated:
            break
    out["return"], out["steps"] = float(sum(out["rewards"])), step
    return out


def replay(env, seed: int, actions: Sequence[np.ndarray]) -> dict:
    """``actions`` played open loop from ``env.reset(seed=seed)`` (until they run out or the episode ends)."""
    return run_episode(env, seed, lambda obs, info, k: actions[k] if k < len(actions) else None)


def horizon_of(env) -> int:
    """The episode length limit: ``env.unwrapped.horizon`` (the procedural worlds) or the spec's
    ``max_episode_steps``."""
    horizon = getattr(env.unwrapped, "horizon", None) or getattr(getattr(env, "spec", None), "max_episode_steps", None)
    if not horizon:
        raise ValueError("pass horizon=...: the env has neither .horizon nor spec.max_episode_steps")
    return int(horizon)


# --- action sensitivity ---------------------------------------------------------------------
def procedural_actions(rng: np.random.Generator, action_space, horizon: int) -> np.ndarray:
    """``[horizon, chunk, 2]`` commands for the procedural world, each chunk a random heading that
    turns once mid-chunk, with noise: the kind of chunk Cosmos 3's forward dynamics was trained on
    (:func:`~cosmos3_gym.rollout.procedural_world.action_chunks`), so the object really moves."""
    chunk = action_space.shape[0]
    out = []
    for _ in range(horizon):
        turn = int(rng.integers(1, chunk)) if chunk > 1 else 1
        commands = np.concatenate([np.tile(rng.uniform(-1, 1, 2), (turn, 1)),
                                   np.tile(rng.uniform(-1, 1, 2), (chunk - turn, 1))])
        out.append(np.clip(commands + rng.normal(0.0, 0.1, commands.shape), -1, 1))
    return np.stack(out).astype(action_space.dtype)


def uniform_actions(rng: np.random.Generator, action_space, horizon: int) -> np.ndarray:
    """``[horizon, *action_space.shape]`` uniform in a bounded Box: a sampler for any twin."""
    return rng.uniform(action_space.low, action_space.high,
                       (horizon, *action_space.shape)).astype(action_space.dtype)


def derangement(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random permutation of ``range(n)`` with no fixed point (``n >= 2``): episode ``i`` gets
    the actions of episode ``out[i]``, never its own."""
    if n < 2:
        raise ValueError("shuffled actions need at least 2 episodes")
    order = rng.permutation(n)
    out = np.empty(n, dtype=int)
    out[order] = np.roll(order, -1)  # a single cycle through a random order
    return out


def _curve(errors: list[list[float]], horizon: int) -> dict:
    """Per step of the horizon: median, mean and count of the errors of the episodes still running."""
    steps = [[e[k] for e in errors if k < len(e)] for k in range(horizon)]
    return {"median": [_finite(np.median(s)) if s else None for s in steps],
            "mean": [_finite(np.mean(s)) if s else None for s in steps],
            "count": [len(s) for s in steps]}


def action_sensitivity(imagined, truth, seeds: Sequence[int], *, actions: np.ndarray | None = None,
                       action_sampler: ActionSampler = procedural_actions, error_fn: ErrorFn = centre_error,
                       zero_action: np.ndarray | None = None, horizon: int | None = None, seed: int = 0,
                       lost_fn: LostFn | None = object_lost, metrics: Mapping[str, ErrorFn] | None = None,
                       zero_label: str = "zero", progress: bool = True) -> dict:
    """Imagined-vs-true error under the true, shuffled and zero actions (see the module docstring).

    ``actions``: one open-loop sequence per seed, ``[len(seeds), horizon, *action_shape]``; default
    ``action_sampler(rng, truth.action_space, horizon)`` for each (rng from ``seed``). The truth runs
    each seed's own sequence once; the imagined world runs it, another seed's (a derangement drawn
    from ``seed``) and ``zero_action`` (default zeros) repeated. A step is compared where both
    episodes still run (an episode that ends, e.g. on success, stops its comparisons). ``lost_fn``
    (None: not counted) flags an imagined observation that has lost the object. ``metrics``: more
    ``fn(imagined, true)`` measures (e.g. a mask IoU), taken under the true actions only. ``zero_label``:
    what the reports call ``zero_action`` (PushT holds its target at the centre: "held").

    Returns ``{"ratio", "zero_ratio", "median_error": {condition: e}, "mean_error", "pairs" (errors
    compared), "lost" (the share of compared imagined observations that ``lost_fn`` flags),
    "per_step": {condition: {"median", "mean", "count"}}, "errors": {condition: [[per step] per
    episode]}, "metrics": {name: {"mean", "per_step"}} (with ``metrics``), "shuffle" (the episode
    whose actions each one got), "horizon", "zero_label"}``; conditions
    ``true``, ``shuffled``, ``zero``. Ratios are None where the shuffled (zero) median is 0.
    """
    seeds = [int(s) for s in seeds]
    horizon = horizon or horizon_of(truth)
    rng = np.random.default_rng(seed)
    if actions is None:
        actions = np.stack([action_sampler(rng, truth.action_space, horizon) for _ in seeds])
    actions = np.asarray(actions)
    if len(actions) != len(seeds):
        raise ValueError(f"{len(actions)} action sequences for {len(seeds)} seeds")
    shuffle = derangement(rng, len(seeds))
    zero = np.zeros(truth.action_space.shape, truth.action_space.dtype) if zero_action is None else zero_action
    errors: dict[str, list[list[float]]] = {"true": [], "shuffled": [], "zero": []}
    lost: dict[str, list[bool]] = {"true": [], "shuffled": [], "zero": []}
    measured: dict[str, list[list[float]]] = {name: [] for name in metrics or {}}
    for e, s in enumerate(tqdm(seeds, desc="action sensitivity", disable=not progress, leave=False)):
        true_run = replay(truth, s, actions[e])
        for condition, sequence in (("true", actions[e]), ("shuffled", actions[shuffle[e]]),
                                    ("zero", [zero] * horizon)):
            dream = replay(imagined, s, sequence)
            pairs = list(zip(dream["observations"], true_run["observations"]))
            errors[condition].append([float(error_fn(a, b)) for a, b in pairs])
            if lost_fn is not None:
                lost[condition] += [bool(lost_fn(a)) for a, _ in pairs]
            if condition == "true":
                for name, fn in (metrics or {}).items():
                    measured[name].append([float(fn(a, b)) for a, b in pairs])
    return {
        "zero_label": zero_label,
        **_error_summary(errors, horizon),
        "lost": {c: float(np.mean(v)) if v else None for c, v in lost.items()} if lost_fn is not None else None,
        "metrics": {name: {"mean": _finite(np.mean([x for e in values for x in e])) if any(values) else None,
                           "per_step": _curve(values, horizon)} for name, values in measured.items()},
        "shuffle": shuffle.tolist(),
        "horizon": horizon,
    }


def _error_summary(errors: dict[str, list[list[float]]], horizon: int) -> dict:
    """The sensitivity's statistics from its per-episode errors (``errors``: condition -> episodes)."""
    flat = {c: [x for episode in errs for x in episode] for c, errs in errors.items()}
    median = {c: _finite(np.median(v)) if v else None for c, v in flat.items()}
    return {"ratio": _ratio(median["true"], median["shuffled"]),
            "zero_ratio": _ratio(median["true"], median["zero"]),
            "median_error": median,
            "mean_error": {c: _finite(np.mean(v)) if v else None for c, v in flat.items()},
            "pairs": {c: len(v) for c, v in flat.items()},
            "per_step": {c: _curve(errs, horizon) for c, errs in errors.items()},
            "errors": errors}


# --- policy evaluation and exploits ---------------------------------------------------------
def policy_rng(seed: int, name: str, episode_seed: int) -> np.random.Generator:
    """The generator a policy gets for one episode: the same in both worlds, whatever other policies run."""
    return np.random.default_rng([seed, zlib.crc32(name.encode()), episode_seed])


def _summary(runs: list[dict], seed: int, lost_fn: LostFn | None) -> dict:
    lost = None if lost_fn is None else float(np.mean([bool(r["observations"]) and bool(lost_fn(r["observations"][-1]))
                                                       for r in runs]))
    return _episodes_summary([r["return"] for r in runs], [bool(r["success"]) for r in runs],
                             [int(r["steps"]) for r in runs], lost, seed)


def _episodes_summary(returns: list[float], successes: list[bool], steps: list[int], lost: float | None,
                      seed: int) -> dict:
    """A policy's summary in one world from its episodes' returns, successes and lengths (``lost``: the
    share of episodes that end with the object lost, or None)."""
    return {"lost": lost, "return": float(np.mean(returns)), "return_ci": list(bootstrap_ci(returns, seed=seed)),
            "success": float(np.mean(successes)),
            "success_ci": list(bootstrap_ci([float(s) for s in successes], seed=seed)),
            "returns": list(returns), "successes": list(successes), "steps": list(steps)}


def _gap(imagined_run: dict, replayed: dict, error_fn: ErrorFn) -> float | None:
    """``error_fn`` between an imagined success's observation and its replay's at the imagined
    success's step, or at the replay's last step where a replay that held ended sooner (None where
    ``error_fn`` is not finite)."""
    step = min(imagined_run["success_step"], len(replayed["observations"]) - 1)
    return _finite(error_fn(imagined_run["observations"][step], replayed["observations"][step]))


def evaluate_policies(imagined, truth, policies: Mapping[str, Any], seeds: Sequence[int], *, seed: int = 0,
                      exploits: bool = True, lost_fn: LostFn | None = object_lost, error_fn: ErrorFn = centre_error,
                      progress: bool = True) -> dict:
    """Every policy of ``policies`` (name -> policy, see :func:`as_policy`) run in both worlds from
    each of ``seeds``, its generator seeded alike in both; with ``exploits``, every imagined success
    replayed in ``truth``, and ``error_fn`` between the imagined observation that succeeded and the
    replay's at the same step (its gap).

    Returns ``{"policies": [{"name", "true": summary, "imagined": summary, "imagined_successes",
    "exploits", "exploit_rate", "exploit_seeds", "gaps": [{"gap", "exploit"}]}], "agreement":
    {"success": rank_agreement, "return": rank_agreement}, "exploit": {"rate", "exploits",
    "imagined_successes", "gap": {"exploits", "held"} (median gaps)}}``, a summary
    being ``{"return", "return_ci", "success", "success_ci", "returns", "successes", "steps", "lost"}``
    (95% percentile-bootstrap intervals, resampling seeded by ``seed``; ``lost``: the share of
    episodes whose last observation ``lost_fn`` flags, None without one).
    """
    seeds = [int(s) for s in seeds]
    rows = []
    for i, (name, policy) in enumerate(policies.items(), 1):
        policy = as_policy(policy)
        runs: dict[str, list[dict]] = {"true": [], "imagined": []}
        bar = tqdm(seeds, desc=f"policy {i}/{len(policies)} {name}", disable=not progress, leave=False)
        for s in bar:
            for world, env in (("true", truth), ("imagined", imagined)):
                rng = policy_rng(seed, name, s)
                runs[world].append(run_episode(env, s, lambda obs, info, k, rng=rng: policy(obs, info, rng)))
        row = {"name": name, "true": _summary(runs["true"], seed, lost_fn),
               "imagined": _summary(runs["imagined"], seed, lost_fn)}
        won = [(s, r) for s, r in zip(seeds, runs["imagined"]) if r["success"]]
        row["imagined_successes"] = len(won)
        if exploits:
            replays = [replay(truth, s, r["actions"]) for s, r in won]
            held = [again["success"] for again in replays]
            failed = [s for (s, _), ok in zip(won, held) if not ok]
            row.update(exploits=len(failed), exploit_seeds=failed,
                       exploit_rate=len(failed) / len(won) if won else None)
            row["gaps"] = [{"gap": _gap(r, again, error_fn), "exploit": not ok}
                           for (_, r), again, ok in zip(won, replays, held)]
            # the largest disagreement of each imagined success's episode, where the env reports one
            row["disagreement"] = [{"max": max(r["disagreement"]), "exploit": not ok}
                                   for (_, r), ok in zip(won, held) if r["disagreement"]]
        rows.append(row)
    return _policies_summary(rows, exploits)


def _policies_summary(rows: list[dict], exploits: bool) -> dict:
    """The rank agreement across ``rows`` (one per policy) and, with ``exploits``, the pooled exploit rate."""
    agreement = {metric: rank_agreement([r["true"][metric] for r in rows], [r["imagined"][metric] for r in rows])
                 for metric in ("success", "return")}
    out = {"policies": rows, "agreement": agreement}
    if exploits:
        total, bad = sum(r["imagined_successes"] for r in rows), sum(r["exploits"] for r in rows)
        flagged = [d for r in rows for d in r["disagreement"]]
        gaps = {kind: [g["gap"] for r in rows for g in r["gaps"] if g["exploit"] is (kind == "exploits")
                       and g["gap"] is not None] for kind in ("exploits", "held")}
        out["exploit"] = {"rate": bad / total if total else None, "exploits": bad, "imagined_successes": total,
                          "gap": {kind: _finite(np.median(v)) if v else None for kind, v in gaps.items()},
                          "disagreement_auroc": auroc([d["max"] for d in flagged if d["exploit"]],
                                                      [d["max"] for d in flagged if not d["exploit"]])}
    return out


def evaluate_world(imagined, truth, policies: Mapping[str, Any] | None = None, *, episodes: int = 12,
                   seed: int = 0, error_fn: ErrorFn = centre_error, action_sampler: ActionSampler = procedural_actions,
                   zero_action: np.ndarray | None = None, horizon: int | None = None, label: str | None = None,
                   zero_label: str = "zero",
                   lost_fn: LostFn | None = object_lost, metrics: Mapping[str, ErrorFn] | None = None,
                   progress: bool = True) -> dict:
    """Action sensitivity, policy evaluation and exploit rate of ``imagined`` against ``truth`` over
    reset seeds ``seed .. seed + episodes - 1``: one JSON-serialisable record (``policies`` None:
    :func:`scripted_policies` for the truth's chunk; ``label`` None: :func:`worlds_label`)."""
    seeds = list(range(seed, seed + episodes))
    label = worlds_label(imagined, truth) if label is None else label
    if policies is None:
        policies = scripted_policies(chunk=truth.action_space.shape[0])
    start = time.perf_counter()
    sensitivity = action_sensitivity(imagined, truth, seeds, action_sampler=action_sampler, error_fn=error_fn,
                                     zero_action=zero_action, horizon=horizon, seed=seed, lost_fn=lost_fn,
                                     zero_label=zero_label,
                                     metrics=metrics, progress=progress)
    middle = time.perf_counter()
    evaluation = evaluate_policies(imagined, truth, policies, seeds, seed=seed, lost_fn=lost_fn, error_fn=error_fn,
                                   progress=progress)
    return {"label": label, "episodes": episodes, "seeds": seeds, "seed": seed,
            "sensitivity": sensitivity, **evaluation,
            "seconds": {"sensitivity": middle - start, "policies": time.perf_counter() - middle}}


def pool_records(records: Sequence[dict], label: str | None = None) -> dict:
    """One record from several :func:`evaluate_world` records of the same worlds and policies over
    disjoint reset seeds (a long evaluation split across processes or machines): the episodes joined in
    the order of the parts' first seeds, every statistic recomputed from them (intervals resampled with
    the first part's ``seed``). Each part drew its own actions, shuffle and policy noise from its own
    start seed, so the pool is an evaluation of all its seeds, not one run from the first seed bit for
    bit. A measure of ``metrics`` keeps its mean and per-step mean (weighted by its step pairs; None
    where a part's is); its per-step median, which the records do not keep the values for, is None.
    The records must agree on their label (the settings it names), policies, horizon and whether
    exploits were measured; what the label does not name (the checkpoint, the model's dtype, the
    disagreement's samples) is the caller's to keep the same."""
    if isinstance(records, (Mapping, str)) or not isinstance(records, Sequence) or not records:
        raise ValueError(f"records is {'an empty ' if isinstance(records, Sequence) and not records else 'a '}"
                         f"{type(records).__name__}; pass a list of one or more evaluate_world records")
    for k, record in enumerate(records):
        missing = [key for key in ("label", "seeds", "seed", "sensitivity", "policies", "seconds")
                   if not isinstance(record, Mapping) or key not in record]
        if missing:
            raise ValueError(f"records[{k}] lacks {missing}; pass records as evaluate_world returns them")
    records = sorted(records, key=lambda record: min(record["seeds"], default=0))
    first = records[0]
    names = [r["name"] for r in first["policies"]]
    seeds = [s for record in records for s in record["seeds"]]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"records share reset seeds ({sorted(s for s in set(seeds) if seeds.count(s) > 1)}); "
                         "pool evaluations of disjoint seeds (evaluate_world's seed .. seed + episodes - 1)")
    for record in records[1:]:
        if record["label"] != first["label"]:
            raise ValueError(f"records are of different settings ({first['label']!r} and {record['label']!r}); "
                             "pool runs of the same worlds and settings")
        if [r["name"] for r in record["policies"]] != names:
            raise ValueError(f"records score different policies ({names} and "
                             f"{[r['name'] for r in record['policies']]}); pool runs of the same policies")
        if record["sensitivity"]["horizon"] != first["sensitivity"]["horizon"]:
            raise ValueError(f"records have different horizons ({first['sensitivity']['horizon']} and "
                             f"{record['sensitivity']['horizon']}); pool runs of the same horizon")
        if ("exploit" in record) != ("exploit" in first):
            raise ValueError("some records measured exploits and some did not; pool runs made alike")
    parts = [record["sensitivity"] for record in records]
    horizon, offsets = first["sensitivity"]["horizon"], np.cumsum([0] + [len(r["seeds"]) for r in records])
    errors = {c: [e for part in parts for e in part["errors"][c]] for c in first["sensitivity"]["errors"]}

    def weighted(values, weights):  # None where a part with weight has none (a single run's mean would be too)
        pairs = [(v, w) for v, w in zip(values, weights) if w]
        if not pairs or any(v is None for v, _ in pairs):
            return None
        return float(np.average([v for v, _ in pairs], weights=[w for _, w in pairs]))

    sensitivity = {
        "zero_label": first["sensitivity"].get("zero_label", "zero"),
        **_error_summary(errors, horizon),
        "lost": None if first["sensitivity"]["lost"] is None else
        {c: weighted([p["lost"][c] for p in parts], [p["pairs"][c] for p in parts]) for c in errors},
        "metrics": {name: {"mean": weighted([p["metrics"][name]["mean"] for p in parts],
                                            [p["pairs"]["true"] for p in parts]),
                           "per_step": {"median": [None] * horizon,
                                        "mean": [weighted([p["metrics"][name]["per_step"]["mean"][k] for p in parts],
                                                          [p["metrics"][name]["per_step"]["count"][k] for p in parts])
                                                 for k in range(horizon)],
                                        "count": [sum(p["metrics"][name]["per_step"]["count"][k] for p in parts)
                                                  for k in range(horizon)]}}
                    for name in first["sensitivity"].get("metrics", {})},
        "shuffle": [int(i + offset) for part, offset in zip(parts, offsets) for i in part["shuffle"]],
        "horizon": horizon,
    }
    rows = []
    for k, name in enumerate(names):
        row = {"name": name}
        for world in ("true", "imagined"):
            runs = [record["policies"][k][world] for record in records]
            lost = weighted([r["lost"] for r in runs], [len(r["successes"]) for r in runs])
            row[world] = _episodes_summary([x for r in runs for x in r["returns"]],
                                           [x for r in runs for x in r["successes"]],
                                           [x for r in runs for x in r["steps"]], lost, first["seed"])
        parts_k = [record["policies"][k] for record in records]
        row["imagined_successes"] = sum(p["imagined_successes"] for p in parts_k)
        if "exploits" in parts_k[0]:
            row["exploits"] = sum(p["exploits"] for p in parts_k)
            row["exploit_seeds"] = [s for p in parts_k for s in p["exploit_seeds"]]
            row["exploit_rate"] = row["exploits"] / row["imagined_successes"] if row["imagined_successes"] else None
            row["gaps"] = [g for p in parts_k for g in p["gaps"]]
            row["disagreement"] = [d for p in parts_k for d in p["disagreement"]]
        rows.append(row)
    return {"label": first["label"] if label is None else label, "episodes": len(seeds), "seeds": seeds,
            "seed": first["seed"], "sensitivity": sensitivity, **_policies_summary(rows, "exploits" in rows[0]),
            "seconds": {key: sum(record["seconds"][key] for record in records) for key in first["seconds"]}}


# --- reports --------------------------------------------------------------------------------
def worlds_label(imagined, truth) -> str:
    """``"Cosmos3World-v0 (success_margin=2.5) vs ProceduralWorld-v0"``: each env's id and the plain
    keywords it was made with (a dream's margin or sampler settings show in its report), from
    ``gym.make``'s spec; an env made without ``gym.make`` by its class name."""
    def describe(env) -> str:
        inner = getattr(env, "unwrapped", env)
        spec = getattr(inner, "spec", None)  # the unwrapped env's: a wrapper's spec property deep-copies a model keyword
        if spec is None:
            return type(inner).__name__
        plain = {k: v.item() if isinstance(v, np.generic) else v for k, v in spec.kwargs.items()
                 if isinstance(v, (bool, int, float, str, np.generic)) or v is None}
        return spec.id + (f" ({', '.join(f'{k}={v!r}' for k, v in plain.items())})" if plain else "")
    return f"{describe(imagined)} vs {describe(truth)}"


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def _ratio(a, b) -> float | None:
    return None if a is None or b is None or b == 0 else float(a / b)


def _fmt(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def key_numbers(record: dict) -> dict:
    """The headline numbers of a record: sensitivity ratios, median errors, rank agreement on
    success and return, the exploit rate."""
    sens, agree = record["sensitivity"], record["agreement"]
    return {"ratio": sens["ratio"], "zero_ratio": sens["zero_ratio"], "median_error": sens["median_error"],
            "success": agree["success"], "return": agree["return"],
            "exploit_rate": record.get("exploit", {}).get("rate"),
            "disagreement_auroc": record.get("exploit", {}).get("disagreement_auroc")}


def markdown_report(record: dict, heading: bool = True) -> str:
    """The record as markdown: its label as a heading (``heading``; the CLI writes a fuller one), the
    policies' table (true and imagined success and return with 95% bootstrap intervals; exploits /
    imagined successes; the share of imagined episodes that end with the object lost) and the key
    numbers beneath it."""
    lines = [f"### {record['label']}", ""] if heading and record.get("label") else []
    lines += ["| policy | true success | imagined success | true return | imagined return | exploits | object lost |",
             "|---|---|---|---|---|---|---|"]
    for row in record["policies"]:
        t, i = row["true"], row["imagined"]
        exploit = f"{row['exploits']}/{row['imagined_successes']}" if "exploits" in row else "-"
        lines.append(f"| {row['name']} | {t['success']:.2f} [{_fmt(t['success_ci'][0])}, {_fmt(t['success_ci'][1])}] "
                     f"| {i['success']:.2f} [{_fmt(i['success_ci'][0])}, {_fmt(i['success_ci'][1])}] "
                     f"| {t['return']:.2f} [{_fmt(t['return_ci'][0])}, {_fmt(t['return_ci'][1])}] "
                     f"| {i['return']:.2f} [{_fmt(i['return_ci'][0])}, {_fmt(i['return_ci'][1])}] | {exploit} "
                     f"| {_fmt(i.get('lost'))} |")
    sens, agree = record["sensitivity"], record["agreement"]
    med, pairs, zero = sens["median_error"], sens["pairs"], sens.get("zero_label", "zero")
    lines += ["",
              f"- action sensitivity: ratio **{_fmt(sens['ratio'])}** (median error true / shuffled actions: "
              f"{_fmt(med['true'])} / {_fmt(med['shuffled'])} px; 0 = follows the actions, 1 = ignores them), "
              f"{zero}-action ratio {_fmt(sens['zero_ratio'])} ({zero} actions: {_fmt(med['zero'])} px); "
              f"{pairs['true']} / {pairs['shuffled']} / {pairs['zero']} step pairs"
              + ("" if not sens.get("lost") else "; imagined frames with the object lost: "
                 + " / ".join("n/a" if sens["lost"][c] is None else f"{100 * sens['lost'][c]:.0f}%"
                              for c in ("true", "shuffled", "zero"))),
              f"- drift, median error per step (true / shuffled / {zero} actions): "
              + "; ".join(f"{k + 1}: {_fmt(a, 1)} / {_fmt(b, 1)} / {_fmt(c, 1)}" for k, (a, b, c) in enumerate(zip(
                  *(sens["per_step"][c]["median"] for c in ("true", "shuffled", "zero"))))),
              *(f"- {name} under the true actions: mean {_fmt(m['mean'], 3)}; per step "
                + "; ".join(f"{k + 1}: {_fmt(v, 3)}" for k, v in enumerate(m["per_step"]["mean"]))
                for name, m in sens.get("metrics", {}).items()),
              f"- across {len(record['policies'])} policies, success: Pearson r {_fmt(agree['success']['pearson'])}, "
              f"Spearman rho {_fmt(agree['success']['spearman'])}, MMRV {_fmt(agree['success']['mmrv'], 3)}; "
              f"return: Pearson r {_fmt(agree['return']['pearson'])}, Spearman rho "
              f"{_fmt(agree['return']['spearman'])}, MMRV {_fmt(agree['return']['mmrv'], 3)}"]
    if "exploit" in record:
        ex = record["exploit"]
        rate = "n/a" if ex["rate"] is None else f"{100 * ex['rate']:.0f}%"
        auc = ex.get("disagreement_auroc")
        gap = ex.get("gap") or {}
        lines.append(f"- exploit rate: **{rate}** ({ex['exploits']} of {ex['imagined_successes']} imagined "
                     "successes fail when their actions are replayed in the true world)"
                     + ("" if gap.get("exploits") is None and gap.get("held") is None else
                        f"; imagined vs true at the imagined success, median (px): {_fmt(gap.get('exploits'))} for the "
                        f"exploits, {_fmt(gap.get('held'))} for the successes that hold")
                     + ("" if auc is None else f"; the episode's largest `info['disagreement']` tells exploits "
                        f"from real successes with AUROC **{auc:.2f}** (0.5: no better than chance)"))
    return "\n".join(lines)


def plot_report(records: dict | Mapping[str, dict], path: str | Path, metric: str = "success") -> None:
    """A PNG (matplotlib, Agg) of one record or of several (``{label: record}``, the same policies):
    true and imagined ``metric`` (``"success"`` or ``"return"``) per policy as paired bars with 95%
    bootstrap intervals (left), and the
    median imagined-vs-true error per step of the horizon under the true, shuffled and zero actions
    (right; a line style per record)."""
    if metric not in ("success", "return"):
        raise ValueError(f"metric={metric!r} is invalid; use 'success' or 'return'")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if "policies" in records:
        records = {records.get("label") or "imagined": records}
    first = next(iter(records.values()))
    names = [r["name"] for r in first["policies"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, min(9.0, 0.15 * len(names) * (len(records) + 1) + 1.8)),
                                      gridspec_kw={"width_ratios": [1.1, 1]})
    bars = [("true", "true world", first)] + [("imagined", label, record) for label, record in records.items()]
    height = 0.8 / len(bars)
    y = np.arange(len(names))
    for n, (world, label, record) in enumerate(bars):
        rows = {r["name"]: r[world] for r in record["policies"]}
        value = np.array([rows[name][metric] for name in names])
        ci = np.array([rows[name][f"{metric}_ci"] for name in names], dtype=float).T
        if world == "imagined":
            label += f" (Spearman {_fmt(record['agreement'][metric]['spearman'])})"
        left.barh(y + (n - (len(bars) - 1) / 2) * height, value, height, xerr=np.abs(ci - value), capsize=2,
                  color="0.55" if world == "true" else f"C{n - 1}", label=label, error_kw={"lw": 0.8})
    left.set_yticks(y, names, fontsize=8)
    left.invert_yaxis()
    if metric == "success":
        left.set_xlim(0, 1.05)
    left.set(xlabel="success rate" if metric == "success" else "mean return",
             title=f"{metric} per policy (95% bootstrap CI)")
    left.legend(fontsize=7, loc="lower right")
    styles = ["-", "--", ":", "-."]
    for n, (label, record) in enumerate(records.items()):
        sens = record["sensitivity"]
        for condition, color in (("true", "C2"), ("shuffled", "C3"), ("zero", "C7")):
            curve = [np.nan if v is None else v for v in sens["per_step"][condition]["median"]]
            right.plot(np.arange(1, len(curve) + 1), curve, styles[n % len(styles)], color=color, marker=".",
                       label=f"{label}: {sens.get('zero_label', 'zero') if condition == 'zero' else condition} "
                             "actions" + (f" (ratio {_fmt(sens['ratio'])})"
                                                                 if condition == "true" else ""))
    right.set(xlabel="step of the horizon", ylabel="median imagined-vs-true error (px)",
              title="drift: error per step")
    right.set_ylim(bottom=0)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
