"""Prompt adherence of an env's generations, measured with the world's detector.

``cosmos3-gym evaluate`` generates videos for captions of the procedural world
(:mod:`cosmos3_gym.rollout.procedural_world`) with the env's default actions, reads each video back with
:func:`~cosmos3_gym.rollout.procedural_world.detect`, and reports colour and direction accuracy against what
the caption asked for (chance: 25 % each). For the action rollouts it scores the world model
against the action world's ground truth (:func:`action_accuracy`): forward dynamics by the
object's position and colour in the imagined frames, inverse dynamics by the cosine between
inferred and true actions, the policy by the success of its actions executed in the true world.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .env.vector_env import Cosmos3RolloutVectorEnv
from .model.tasks import ROBOT_TASKS, Task
from .rollout.procedural_world import MAX_SPEED, action_chunks, dataset, detect, push, succeeds


def adherence(env_id: str = "Cosmos3Rollout-v0", samples: int = 128, seed: int = 2024, batch: int = 32,
              **overrides) -> dict:
    """Generate ``samples`` videos for world captions; return accuracies and per-sample rows."""
    _, scenes = dataset(seed, samples)
    venv = Cosmos3RolloutVectorEnv(batch, env_id, **overrides)
    rows = []
    still = venv.preset.num_frames == 1  # one frame: the caption without the motion

    def caption(scene):
        return scene.image_caption if still else scene.caption

    def options(idx: list[int]) -> dict:
        return {"prompt": [caption(scenes[i]) for i in idx]}

    for idx, info, rewards in generations(venv, samples, seed, options, "generating"):
        for scene, video, reward in zip([scenes[i] for i in idx], info["frames"], rewards.tolist()):
            found = detect(video)
            rows.append({"caption": caption(scene), "color": scene.color, "direction": scene.direction,
                         "detected_color": found.color, "detected_direction": found.direction, "reward": reward})
    color = float(np.mean([r["color"] == r["detected_color"] for r in rows]))
    direction = float(np.mean([r["direction"] == r["detected_direction"] for r in rows]))
    return {"env_id": env_id, "samples": len(rows), "seed": seed, "overrides": overrides,
            "num_frames": venv.preset.num_frames,
            "color_accuracy": color, "direction_accuracy": direction,
            "mean_reward": float(np.mean([r["reward"] for r in rows])),
            "confusions": Counter((r["color"], r["detected_color"]) for r in rows if r["color"] != r["detected_color"]),
            "rows": rows}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-8))


def generations(venv, samples: int, seed: int, options, desc: str):
    """``venv``'s episodes for tasks ``0 .. samples - 1``, a batch of ``venv.num_envs`` at a time, each
    reset with ``options(task indices)`` and seed ``seed + first index`` and stepped with the default
    action to its end: yields ``(task indices, last info, last rewards)``, a partial last batch padded
    with the last task and the padding left out of the indices."""
    from tqdm import tqdm

    batch = venv.num_envs
    actions = np.tile(venv.default_action, (batch, 1))
    for start in tqdm(range(0, samples, batch), desc=desc):
        idx = [min(start + j, samples - 1) for j in range(batch)]
        venv.reset(seed=seed + start, options=options(idx))
        terminated = np.zeros(batch, dtype=bool)
        while not terminated.all():
            _, rewards, terminated, _, info = venv.step(actions)
        yield idx[: samples - start], info, rewards


def action_accuracy(env_id: str, samples: int = 64, seed: int = 2024, batch: int = 16, **overrides) -> dict:
    """The world model against the action world, on ``samples`` tasks drawn from ``seed``.

    Forward dynamics: the median distance (pixels) between the object detected in each imagined
    frame and its true centre under the same commands, and the fraction of imagined frames whose
    object keeps the task's colour (the position alone cannot see an object that changes colour),
    with the colours seen instead (a world model that maps each colour to another one shows here).
    Inverse dynamics: the mean cosine between the inferred and the true command chunk. Policy:
    the fraction of tasks whose generated chunk, executed in the true world, ends with the object
    in its goal (and the same for the noisy expert that the training data came from, and for
    uniform random commands)."""
    venv = Cosmos3RolloutVectorEnv(batch, env_id, **overrides)
    mode, chunk, size = venv.preset.conditioning, venv.preset.num_frames - 1, venv.preset.height
    if mode not in ROBOT_TASKS:
        raise ValueError(f"{env_id} is not an action rollout; use adherence() for it")
    kind = "expert" if mode == Task.POLICY else "turn"
    tasks, frames, commands = action_chunks(np.random.default_rng(seed), samples, chunk, kind,
                                            size=size)

    def options(idx: list[int]) -> dict:
        given = {"prompt": [tasks[i].prompt for i in idx]}
        if mode == Task.INVERSE_DYNAMICS:
            given["video"] = frames[idx]
        else:
            given["image"] = frames[idx, 0]
        if mode == Task.FORWARD_DYNAMICS:
            given["actions"] = commands[idx]
        return given

    values, kept, confusions = [], [], Counter()
    for idx, info, _ in generations(venv, samples, seed, options, f"evaluating {mode}"):
        for j, i in enumerate(idx):
            task = tasks[i]
            if mode == Task.FORWARD_DYNAMICS:
                truth = push(task, task.start, commands[i], size)
                for k in range(chunk):
                    found = detect(info["frames"][j][k + 1][None])
                    values.append(float(np.hypot(*(np.array(found.position) * size - truth[k])))
                                  if found.color is not None else float(size))
                    kept.append(found.color == task.color)
                    if found.color != task.color:
                        confusions[(task.color, found.color)] += 1
            elif mode == Task.INVERSE_DYNAMICS:
                a, b = info["actions"][j].ravel(), commands[i].ravel()
                values.append(_cosine(a, b))
            else:
                values.append(succeeds(task, info["actions"][j], size))
    result = {"env_id": env_id, "mode": mode, "samples": samples, "seed": seed, "overrides": overrides}
    if mode == Task.FORWARD_DYNAMICS:
        result["median_position_error_px"] = float(np.median(values))
        result["color_kept"] = float(np.mean(kept))
        result["confusions"] = confusions
    elif mode == Task.INVERSE_DYNAMICS:
        result["mean_action_cosine"] = float(np.mean(values))
        # a reference: the commands read off each frame's true motion (over MAX_SPEED; nothing while
        # a wall stops the object, so only a guess of the hidden push could score higher)
        seen = [np.diff(np.vstack([t.start, push(t, t.start, c, size)]), axis=0).ravel() / MAX_SPEED
                for t, c in zip(tasks, commands)]
        result["mean_action_cosine_perfect_vision"] = float(np.mean([_cosine(a, c.ravel())
                                                                     for a, c in zip(seen, commands)]))
    else:
        rng = np.random.default_rng(seed + 1)
        baselines = {
            "expert": [succeeds(t, c, size) for t, c in zip(tasks, commands)],
            "random": [succeeds(t, rng.uniform(-1, 1, (chunk, 2)), size) for t in tasks]}
        result["success_rate"] = float(np.mean(values))
        result.update({f"success_rate_{name}": float(np.mean(v)) for name, v in baselines.items()})
    return result


def report(result: dict) -> str:
    if "mode" in result:  # an action rollout
        metrics = {k: v for k, v in result.items()
                   if k not in ("env_id", "mode", "samples", "seed", "overrides", "confusions")}
        lines = [f"env {result['env_id']} {result['overrides'] or ''}, {result['samples']} tasks of the action "
                 f"world (seed {result['seed']})"] + [f"{k}: {v:.3f}" for k, v in metrics.items()]
        if "confusions" in result:
            lines.append("colour confusions (task, seen) over imagined frames: " + _confusions(result["confusions"]))
        return "\n".join(lines)
    lines = [f"env {result['env_id']} {result['overrides'] or ''}, {result['samples']} samples, "
             f"captions from cosmos3_gym.rollout.procedural_world.dataset(seed={result['seed']})"
             + ("" if result.get("num_frames", 2) > 1 else " (image captions: no motion)"),
             f"color_accuracy: {result['color_accuracy']:.1%}   (target >= 80 %, chance 25 %)",
             f"direction_accuracy: {result['direction_accuracy']:.1%}   (target >= 70 %, chance 25 %)"
             if result.get("num_frames", 2) > 1 else "direction_accuracy: - (one frame: no motion to read)",
             f"mean reward (the preset's): {result['mean_reward']:.3f}",
             "colour confusions (asked, seen): " + _confusions(result["confusions"])]
    return "\n".join(lines)


def _confusions(counts: Counter) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.most_common()) or "none"
