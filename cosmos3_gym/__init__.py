"""cosmos3_gym: NVIDIA Cosmos 3 as a Gymnasium reinforcement-learning environment.

Importing the package registers one env id per preset in ``envs/`` (e.g.
``"Cosmos3Rollout-v0"``), for ``gym.make`` and ``gym.make_vec``.
"""

import gymnasium as gym

from .engine import RolloutEngine
from .env import Cosmos3RolloutEnv
from .generator import Cosmos3Generator
from .presets import Preset, all_presets, load_preset
from .sde import SDEStep, sde_step
from .trajectory import Trajectory

__version__ = "0.1.0"


def _register_presets() -> list[str]:
    ids = []
    for preset in all_presets():
        if preset.id not in gym.registry:
            gym.register(
                id=preset.id,
                entry_point="cosmos3_gym.env:Cosmos3RolloutEnv",
                vector_entry_point="cosmos3_gym.vector_env:Cosmos3RolloutVectorEnv",
                kwargs={"preset": preset.id},
            )
        ids.append(preset.id)
    return ids


ENV_IDS = _register_presets()

__all__ = [
    "ENV_IDS", "Cosmos3Generator", "Cosmos3RolloutEnv", "Preset", "RolloutEngine", "SDEStep", "Trajectory",
    "load_preset", "sde_step",
]
