"""cosmos3_gym: NVIDIA Cosmos 3 as a Gymnasium reinforcement-learning environment.

Importing the package registers one env id per preset in ``envs/`` (e.g.
``"Cosmos3Rollout-v0"``), for ``gym.make`` and ``gym.make_vec``. The ids are read from the
TOML files and registered with entry-point strings, so ``import cosmos3_gym`` (and
``cosmos3-gym --help``) does not import torch or diffusers; the public classes below are
imported on first attribute access (PEP 562).
"""

from importlib import import_module, resources

import gymnasium as gym

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

__version__ = "0.1.0"

_LAZY = {
    "Cosmos3Model": "model.model", "Cosmos3RolloutEnv": "env.rollout_env", "Preset": "env.presets",
    "load_preset": "env.presets", "all_presets": "env.presets", "RolloutEngine": "rollout.engine",
    "SDEStep": "rollout.sde", "sde_step": "rollout.sde", "Trajectory": "rollout.trajectory",
    "replay_log_probs": "rollout.transition",
}


def preset_tables() -> dict[str, dict]:
    """The raw (unvalidated) TOML of each ``envs/*.toml`` (package data), by env id, in file-name order.

    Reads TOML only, so that registering the ids and building the CLI's parser need no torch."""
    folder = resources.files(f"{__name__}.env") / "envs"
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name)
    tables = [tomllib.loads(p.read_text()) for p in files]
    return {table["id"]: table for table in tables}


def _register_presets() -> list[str]:
    ids = list(preset_tables())
    for env_id in ids:
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="cosmos3_gym.env.rollout_env:Cosmos3RolloutEnv",
                vector_entry_point="cosmos3_gym.env.ray_env:make_vector_env",  # num_workers=W: on Ray
                kwargs={"preset": env_id},
                # Gymnasium's passive checker marks its first reset as done before running it, so a
                # first reset that raises (a bad option) breaks the first step of the next episode.
                # The envs run Gymnasium's full check_env in the test suite instead.
                disable_env_checker=True,
            )
    return ids


ENV_IDS = _register_presets()


def _register_in(module: str, worlds: dict[str, tuple[str, str | None]]) -> list[str]:
    """Register ``{env_id: (env class, vector entry point or None)}`` of ``module`` (by name: nothing is imported)."""
    for env_id, (entry, vector) in worlds.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=f"{module}:{entry}",
                         vector_entry_point=vector and f"{module}:{vector}", disable_env_checker=True)
    return list(worlds)


def _register_worlds() -> list[str]:
    """The world as an environment: the ground truth and Cosmos 3 imagining it (same spaces)."""
    return _register_in("cosmos3_gym.world.envs", {"ProceduralWorld-v0": ("ProceduralWorldEnv", None),
                                                   "Cosmos3World-v0": ("Cosmos3WorldEnv", "make_world_vector_env")})


WORLD_ENV_IDS = _register_worlds()


def _register_pusht() -> list[str]:
    """PushT (gym-pusht; how to install it: ``cosmos3_gym.world.pusht_coverage.PUSHT_INSTALL``): Cosmos 3
    imagining it, and gym-pusht as its twin.

    Registered everywhere; where gym-pusht is missing, making one says what to install."""
    return _register_in("cosmos3_gym.world.pusht", {"Cosmos3PushT-v0": ("Cosmos3PushTEnv", "make_pusht_vector_env"),
                                                    "PushT-Twin-v0": ("PushTTwinEnv", None)})


# Registered whether or not gym-pusht is installed (making one without it says what to install); whether it
# is: importlib.util.find_spec("gym_pusht") is not None.
PUSHT_ENV_IDS = _register_pusht()


def __getattr__(name: str):
    """Import a public class or function on first use: torch loads only when it is needed."""
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ENV_IDS", "PUSHT_ENV_IDS", "WORLD_ENV_IDS", "Cosmos3Model", "Cosmos3RolloutEnv", "Preset", "RolloutEngine",
    "SDEStep", "Trajectory", "__version__", "all_presets", "load_preset", "preset_tables", "replay_log_probs",
    "sde_step",
]
