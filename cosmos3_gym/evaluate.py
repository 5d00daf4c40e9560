"""Prompt adherence of an env's generations, measured with the world's detector.

``cosmos3-gym evaluate`` generates videos for captions of the procedural world
(:mod:`cosmos3_gym.world`) with the env's default actions, reads each video back with
:func:`~cosmos3_gym.world.detect`, and reports colour and direction accuracy against what
the caption asked for (chance: 25 % each).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .vector_env import Cosmos3RolloutVectorEnv
from .world import dataset, detect


def adherence(env_id: str = "Cosmos3Rollout-v0", samples: int = 128, seed: int = 2024, batch: int = 32,
              **overrides) -> dict:
    """Generate ``samples`` videos for world captions; return accuracies and per-sample rows."""
    from tqdm import tqdm

    _, scenes = dataset(seed, samples)
    venv = Cosmos3RolloutVectorEnv(batch, env_id, **overrides)
    actions = np.tile(venv.default_action, (batch, 1))
    rows = []
    for start in tqdm(range(0, samples, batch), desc="generating"):
        chunk = scenes[start:start + batch]
        prompts = [s.caption for s in chunk] + [chunk[0].caption] * (batch - len(chunk))
        venv.reset(seed=seed + start, options={"prompt": prompts})
        terminated = np.zeros(batch, dtype=bool)
        while not terminated.all():
            _, rewards, terminated, _, info = venv.step(actions)
        for scene, video, reward in zip(chunk, info["frames"], rewards.tolist()):
            found = detect(video)
            rows.append({"caption": scene.caption, "color": scene.color, "direction": scene.direction,
                         "detected_color": found.color, "detected_direction": found.direction, "reward": reward})
    color = float(np.mean([r["color"] == r["detected_color"] for r in rows]))
    direction = float(np.mean([r["direction"] == r["detected_direction"] for r in rows]))
    return {"env_id": env_id, "samples": len(rows), "seed": seed, "overrides": overrides,
            "color_accuracy": color, "direction_accuracy": direction,
            "mean_reward": float(np.mean([r["reward"] for r in rows])),
            "confusions": Counter((r["color"], r["detected_color"]) for r in rows if r["color"] != r["detected_color"]),
            "rows": rows}


def report(result: dict) -> str:
    lines = [f"env {result['env_id']} {result['overrides'] or ''}, {result['samples']} samples, "
             f"captions from cosmos3_gym.world.dataset(seed={result['seed']})",
             f"color_accuracy: {result['color_accuracy']:.1%}   (target >= 80 %, chance 25 %)",
             f"direction_accuracy: {result['direction_accuracy']:.1%}   (target >= 70 %, chance 25 %)",
             f"mean reward (the preset's): {result['mean_reward']:.3f}",
             "colour confusions (asked, seen): " + (", ".join(f"{k}: {v}" for k, v in
                                                              result["confusions"].most_common()) or "none")]
    return "\n".join(lines)
