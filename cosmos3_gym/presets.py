"""Presets: the declarative env definitions in ``envs/*.toml``, validated.

Each TOML file defines one env id. Every field can be overridden as a ``gym.make``
keyword; an unknown keyword or an invalid value raises ``ValueError`` naming it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from importlib import resources

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from .rewards import REWARDS
from .schedule import SigmaGrid, explicit_grid, flow_shift_grid, serving_grid
from .sde import KINDS

ACTION_MODES = ("control", "noise")
SIGMA_GRIDS = ("serving", "flow_shift", "explicit")


@dataclass(frozen=True)
class Preset:
    """One env definition. See ``envs/cosmos3_rollout_v0.toml`` for each field's meaning."""

    id: str
    checkpoint: str = ""
    num_frames: int = 9
    height: int = 32
    width: int = 32
    fps: float = 24.0
    num_steps: int = 8
    sigma_grid: str = "serving"
    flow_shift: float = 3.0
    sigmas: tuple[float, ...] = ()
    kind: str = "sde"
    action_mode: str = "control"
    guidance_scale: float = 6.0
    noise_level: float = 0.7
    guidance_bounds: tuple[float, float] = (1.0, 10.0)
    noise_level_bounds: tuple[float, float] = (0.0, 1.0)
    reward: str = "colorfulness"
    negative_prompt: str = ""
    prompts: tuple[str, ...] = ("a red ball bounces to the right",)
    max_prompt_tokens: int = 1024
    description: str = field(default="", compare=False)

    def __post_init__(self):
        def fail(name, allowed):
            raise ValueError(f"preset {self.id!r}: {name}={getattr(self, name)!r} is invalid; allowed: {allowed}")

        for name in ("num_frames", "height", "width", "num_steps", "max_prompt_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                fail(name, "an integer >= 1")
        if self.kind not in KINDS:
            fail("kind", KINDS)
        if self.action_mode not in ACTION_MODES:
            fail("action_mode", ACTION_MODES)
        if self.sigma_grid not in SIGMA_GRIDS:
            fail("sigma_grid", SIGMA_GRIDS)
        if self.reward not in REWARDS:
            fail("reward", sorted(REWARDS))
        if not (isinstance(self.fps, (int, float)) and self.fps > 0):
            fail("fps", "a number > 0")
        for default, name in (("guidance_scale", "guidance_bounds"), ("noise_level", "noise_level_bounds")):
            bounds, value = getattr(self, name), getattr(self, default)
            if len(bounds) != 2 or not all(math.isfinite(b) for b in bounds) or not bounds[0] <= bounds[1]:
                fail(name, "[low, high] with finite low <= high")
            if not bounds[0] <= value <= bounds[1]:
                raise ValueError(f"preset {self.id!r}: {default}={value} lies outside {name}={list(bounds)}")
        if not (0.0 <= self.noise_level_bounds[0] and self.noise_level_bounds[1] <= 1.0):
            fail("noise_level_bounds", "a sub-interval of [0, 1]")
        if not self.prompts or not all(isinstance(p, str) for p in self.prompts):
            fail("prompts", "a non-empty list of strings")
        if self.sigma_grid == "explicit":
            steps = explicit_grid(self.sigmas).num_steps  # raises on a bad grid
            if steps != self.num_steps:
                raise ValueError(f"preset {self.id!r}: sigmas={list(self.sigmas)} define {steps} steps "
                                 f"but num_steps={self.num_steps}")

    def override(self, **overrides) -> "Preset":
        """A copy with ``overrides`` applied; unknown names raise ``ValueError``."""
        names = {f.name for f in dataclasses.fields(self)} - {"id"}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"unknown keyword(s) {unknown} for env {self.id!r}; preset fields are {sorted(names)}")
        return dataclasses.replace(self, **_normalised(overrides))

    def sigma_grid_for(self, scheduler=None, use_native_flow_schedule: bool = False) -> SigmaGrid:
        """The episode grid this preset asks for (``serving`` needs the checkpoint's scheduler)."""
        if self.sigma_grid == "serving":
            return serving_grid(scheduler, self.num_steps, use_native_flow_schedule)
        if self.sigma_grid == "flow_shift":
            return flow_shift_grid(self.num_steps, self.flow_shift)
        return explicit_grid(self.sigmas)


def _normalised(fields: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


def preset_files():
    folder = resources.files("cosmos3_gym") / "envs"  # the repository's envs/, installed as package data
    return sorted((p for p in folder.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name)


def load_preset(name: str) -> Preset:
    """The preset of env id ``name`` (e.g. ``"Cosmos3Rollout-v0"``) or of file stem ``name``."""
    for path in preset_files():
        data = tomllib.loads(path.read_text())
        if name in (data.get("id"), path.name[: -len(".toml")]):
            return Preset(**_normalised(data))
    known = [tomllib.loads(p.read_text()).get("id") for p in preset_files()]
    raise ValueError(f"unknown preset {name!r}; known env ids: {known}")


def all_presets() -> list[Preset]:
    return [Preset(**_normalised(tomllib.loads(path.read_text()))) for path in preset_files()]
