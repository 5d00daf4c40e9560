"""``cosmos3_gym.evaluate.action_accuracy`` on forward dynamics, scored against a stand-in world
model whose imagined frames are known: the true world's own frames, some of them recoloured."""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from cosmos3_gym import evaluate
from cosmos3_gym.rollout.procedural_world import BACKGROUND, COLORS, action_chunks

SAMPLES, SEED, CHUNK = 12, 2024, 8


class _TrueWorldAsModel:
    """A forward-dynamics vector env that imagines exactly what the true world does under the
    given commands (the task found by its start frame), except that it draws the object of the
    first ``recolour`` tasks in another colour."""

    def __init__(self, num_envs, recolour):
        self.num_envs = num_envs
        self.preset = SimpleNamespace(conditioning="forward_dynamics", num_frames=CHUNK + 1, height=32)
        self.default_action = np.zeros(1, dtype=np.float32)
        tasks, self.truth, self.commands = action_chunks(np.random.default_rng(SEED), SAMPLES, CHUNK)
        self.imagined = self.truth.copy()
        for task, video in zip(tasks[:recolour], self.imagined[:recolour]):
            other = next(name for name in COLORS if name != task.color)
            video[(video != BACKGROUND).any(axis=-1)] = COLORS[other]

    def reset(self, seed, options):
        self.tasks = [next(i for i in range(SAMPLES) if np.array_equal(self.truth[i, 0], image))
                      for image in options["image"]]
        assert all(np.array_equal(self.commands[i], a) for i, a in zip(self.tasks, options["actions"]))

    def step(self, actions):
        info = {"frames": [self.imagined[i] for i in self.tasks]}
        return None, np.zeros(self.num_envs), np.ones(self.num_envs, dtype=bool), None, info


@pytest.fixture
def true_world_as_model(monkeypatch):
    def use(recolour):
        monkeypatch.setattr(evaluate, "Cosmos3RolloutVectorEnv",
                            lambda num_envs, env_id, **overrides: _TrueWorldAsModel(num_envs, recolour))
    return use


def test_forward_dynamics_scores_position_and_colour_against_the_true_world(true_world_as_model):
    """Frames drawn by the true world itself are within the detector's sub-pixel error of the true
    centres and keep every colour; recolouring the object of 3 of the 12 tasks moves no centre
    but keeps the colour in exactly 9 / 12 of the imagined frames, and names the colour each of the
    3 was imagined in for each of its 8 frames. A batch of 5 leaves a partial last batch."""
    scores = {}
    for recolour in (0, 3):
        true_world_as_model(recolour)
        scores[recolour] = evaluate.action_accuracy("Cosmos3ForwardDynamicsRollout-v0", samples=SAMPLES, seed=SEED,
                                                    batch=5)
    assert scores[0]["color_kept"] == 1.0 and scores[3]["color_kept"] == 9 / 12
    assert scores[0]["median_position_error_px"] == scores[3]["median_position_error_px"] < 1.0
    tasks = action_chunks(np.random.default_rng(SEED), SAMPLES, CHUNK)[0]
    recoloured = Counter((t.color, next(name for name in COLORS if name != t.color)) for t in tasks[:3])
    assert scores[0]["confusions"] == Counter()
    assert scores[3]["confusions"] == Counter({pair: CHUNK * n for pair, n in recoloured.items()})
    assert "colour confusions (task, seen) over imagined frames: none" in evaluate.report(scores[0])
    pair, count = scores[3]["confusions"].most_common(1)[0]
    assert f"{pair}: {count}" in evaluate.report(scores[3])
