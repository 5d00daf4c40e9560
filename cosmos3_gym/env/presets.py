"""Presets: the declarative env definitions in ``envs/*.toml``, validated.

Each TOML file defines one env id. Every field can be overridden as a ``gym.make``
keyword; an unknown keyword raises ``TypeError`` (as Python does) and an invalid value
``ValueError``, each naming it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

from ..model.tasks import CONDITIONING_TASKS, ROBOT_TASKS, Task, task_of
from ..rollout.schedule import NUM_TRAIN_TIMESTEPS, SigmaGrid, explicit_grid, flow_shift_grid, serving_grid
from ..rollout.sde import KINDS

ACTION_MODES = ("control", "noise")
# What reset() is given: nothing (text-to-video), a first frame, leading frames, or an action task's
# inputs (policy: a frame; forward dynamics: a frame and actions; inverse dynamics: the whole video).
CONDITIONINGS = ("none", *CONDITIONING_TASKS)  # how a preset names its task (model/tasks.py)
SIGMA_GRIDS = ("serving", "flow_shift", "explicit")
# The keys of rewards.REWARDS (which checks this at import), spelled out so that validating a preset
# does not import the reward functions and the toy world they score against.
REWARD_NAMES = ("colorfulness", "brightness", "temporal_smoothness", "color_adherence", "direction_adherence",
                "position_adherence", "prompt_adherence", "none")
# An episode of more steps than the scheduler's training timesteps would repeat timesteps.
MAX_STEPS = NUM_TRAIN_TIMESTEPS
INT_FIELDS = ("num_frames", "height", "width", "num_steps", "max_prompt_tokens", "resolution_tier")
VIEW_POINTS = ("ego_view", "third_person_view", "wrist_view", "concat_view")

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = _repr.maxlong = 60


def _short(value) -> str:
    """``repr(value)``, abridged: an error message must stay readable whatever value it echoes."""
    try:
        return _repr.repr(value)
    except ValueError:  # an int with more digits than repr() allows
        return f"<{type(value).__name__} too large to print>"


def _real(value) -> bool:
    """A finite int or float, not a bool (``True`` is an ``int`` to Python, never a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
    conditioning: str = "none"
    condition_frames: int = 5
    sound: bool = False
    domain: str = "pusht"
    resolution_tier: int = 256
    view_point: str = "ego_view"
    description: str = field(default="", compare=False)

    @property
    def task(self) -> Task:
        """The :class:`~cosmos3_gym.model.tasks.Task` this preset's requests perform."""
        return task_of(self.conditioning, self.num_frames, self.sound)

    @property
    def action_task(self) -> bool:
        """Whether this is an action rollout (policy, forward or inverse dynamics)."""
        return self.conditioning in ROBOT_TASKS

    def __post_init__(self):
        def fail(name, allowed):
            raise ValueError(f"preset {_short(self.id)}: {name}={_short(getattr(self, name))} is invalid; "
                             f"allowed: {allowed}")

        for name in INT_FIELDS:
            value, steps = getattr(self, name), name == "num_steps"
            high = MAX_STEPS if steps else math.inf
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= high:
                fail(name, f"an integer in [1, {MAX_STEPS}] (the scheduler's {MAX_STEPS} training timesteps)"
                     if steps else "an integer >= 1")
        for name, allowed in (("kind", KINDS), ("action_mode", ACTION_MODES), ("sigma_grid", SIGMA_GRIDS),
                              ("reward", REWARD_NAMES), ("conditioning", CONDITIONINGS),
                              ("view_point", VIEW_POINTS)):
            if not isinstance(getattr(self, name), str) or getattr(self, name) not in allowed:
                fail(name, f"{list(allowed)}" + ("; a reward function of your own goes in reward_fn=, "
                                                 "not reward=" if name == "reward" and callable(self.reward) else ""))
        for name in ("fps", "flow_shift"):
            if not _real(getattr(self, name)) or getattr(self, name) <= 0:
                fail(name, "a finite number > 0")
        for default, name in (("guidance_scale", "guidance_bounds"), ("noise_level", "noise_level_bounds")):
            bounds, value = getattr(self, name), getattr(self, default)
            if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2 and all(map(_real, bounds))
                    and bounds[0] <= bounds[1]):
                fail(name, "[low, high]: two finite numbers with low <= high")
            if not _real(value):
                fail(default, "a finite number")
            if not bounds[0] <= value <= bounds[1]:
                raise ValueError(f"preset {_short(self.id)}: {default}={value} lies outside {name}={list(bounds)}")
        if not (0.0 <= self.noise_level_bounds[0] and self.noise_level_bounds[1] <= 1.0):
            fail("noise_level_bounds", "a sub-interval of [0, 1]")
        if self.conditioning != "none" and self.num_frames == 1:
            fail("conditioning", "'none' for a one-frame (text-to-image) env: conditioning keeps frames of a video")
        if not isinstance(self.sound, bool):
            fail("sound", "true or false")
        if self.sound and (self.action_task or self.num_frames == 1):
            fail("sound", "false for action rollouts and one-frame envs (sound goes with text-to-video)")
        if not isinstance(self.domain, str) or not self.domain:
            fail("domain", "a Cosmos 3 embodiment name, e.g. 'pusht'")
        cf = self.condition_frames
        if not isinstance(cf, int) or isinstance(cf, bool) or cf < 1 or (cf - 1) % 4 or (
                self.conditioning == "video" and cf >= self.num_frames):
            fail("condition_frames", f"1 + a multiple of 4 (whole latent frames), below num_frames={self.num_frames}")
        prompts = self.prompts
        if isinstance(prompts, str):  # iterating it would draw single letters as prompts
            fail("prompts", f"a list of strings, not one string: pass [{_short(prompts)}] for a single prompt")
        if not (isinstance(prompts, (tuple, list)) and prompts and all(isinstance(p, str) for p in prompts)):
            fail("prompts", "a non-empty list of strings")
        if not isinstance(self.negative_prompt, str):
            fail("negative_prompt", "a string ('' for none)")
        if not isinstance(self.checkpoint, (str, os.PathLike)):
            fail("checkpoint", "a folder path (a str or pathlib.Path), or '' for the embedded model")
        object.__setattr__(self, "checkpoint", os.fspath(self.checkpoint))  # a Path too, as the string it names
        if self.sigma_grid == "explicit":
            if not isinstance(self.sigmas, (tuple, list)) or len(self.sigmas) > MAX_STEPS + 1:
                fail("sigmas", f"a list of at most {MAX_STEPS + 1} numbers")
            try:
                steps = explicit_grid(self.sigmas).num_steps
            except (TypeError, ValueError) as e:
                raise ValueError(f"preset {_short(self.id)}: sigmas={_short(self.sigmas)} is invalid: {str(e)[:120]}; "
                                 f"give N + 1 values falling strictly from <= 1 to 0 (or N values: 0 is appended)"
                                 ) from None
            if steps != self.num_steps:
                raise ValueError(f"preset {_short(self.id)}: sigmas={_short(self.sigmas)} define {steps} steps "
                                 f"but num_steps={self.num_steps}; set num_steps={steps}")

    def override(self, **overrides) -> "Preset":
        """A copy with ``overrides`` applied; unknown names raise ``TypeError``, as Python does for an
        unexpected keyword (callers such as TorchRL's ``GymEnv`` retry without a keyword on exactly
        that: its message holds Python's "unexpected keyword argument 'name'")."""
        self.check_keywords(overrides)
        return dataclasses.replace(self, **_normalised(overrides))

    def check_keywords(self, keywords, env_arguments: Sequence[str] = (), notes: dict[str, str] | None = None) -> None:
        """``TypeError`` for names among ``keywords`` that are neither preset fields nor
        ``env_arguments`` (the env's own keywords, listed beside the fields): see :func:`check_keywords`."""
        names = sorted({f.name for f in dataclasses.fields(self)} - {"id"})
        check_keywords(self.id, keywords, {"preset fields are": names,
                                           "besides those, the env takes": list(env_arguments)}, notes)

    def sigma_grid_for(self, scheduler=None, use_native_flow_schedule: bool = False) -> SigmaGrid:
        """The episode grid this preset asks for (``serving`` needs the checkpoint's scheduler)."""
        if self.sigma_grid == "serving":
            return serving_grid(scheduler, self.num_steps, use_native_flow_schedule)
        if self.sigma_grid == "flow_shift":
            return flow_shift_grid(self.num_steps, self.flow_shift)
        return explicit_grid(self.sigmas)


def check_keywords(env_id: str, keywords, allowed: dict[str, Sequence[str]], notes: dict[str, str] | None = None) -> None:
    """``TypeError`` for names among ``keywords`` in none of ``allowed``'s groups (``{"label": names}``,
    listed in the message in order): Python's wording for an unexpected keyword (TorchRL's ``GymEnv``
    retries without a keyword on exactly that), a "did you mean" where one name is close, why the env
    has none for a keyword in ``notes`` (another library's, a vector env's; also when it is the close
    name), and every keyword allowed."""
    names = [name for group in allowed.values() for name in group]
    unknown = sorted(set(keywords) - set(names))
    if not unknown:
        return
    more = f" (and {_short(unknown[1:])})" if len(unknown) > 1 else ""
    notes = notes or {}
    close = difflib.get_close_matches(unknown[0][:100], names + [n for n in notes if n not in names], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if close and close[0] in notes and close[0] not in names:  # a near miss of a keyword this env refuses
        hint += f" ({notes[close[0]]})"
    if unknown[0] in notes:
        hint = f" ({notes[unknown[0]]})"
    shown = {notes.get(unknown[0])}
    for name in unknown[1:]:  # each further keyword's note, once
        if name in notes and notes[name] not in shown:
            hint += f"; {name!r}: {notes[name]}"
            shown.add(notes[name])
    listing = "".join(f"; {label} {list(group)}" for label, group in allowed.items() if group)
    raise TypeError(f"unknown keyword(s) for env {_short(env_id)}: got an unexpected keyword argument "
                    f"{_short(unknown[0])}{more}{hint}{listing}")


# The world envs (registered by cosmos3_gym.world, a layer above), by id: how to give one to SB3, for the
# message of a world id passed where a rollout preset is expected.
WORLD_ENV_HINTS = {
    "Cosmos3World-v0": "Cosmos3SB3VecEnv.make(\"Cosmos3World-v0\", num_envs=4) (cosmos3_gym.env.sb3)",
    "Cosmos3PushT-v0": "Cosmos3SB3VecEnv.make(\"Cosmos3PushT-v0\", num_envs=4) (cosmos3_gym.env.sb3)",
    "ProceduralWorld-v0": "SB3's make_vec_env(\"ProceduralWorld-v0\", n_envs=4) (a plain Gymnasium env)",
    "PushT-Twin-v0": "SB3's make_vec_env(\"PushT-Twin-v0\", n_envs=4) (a plain Gymnasium env)",
}


def _normalised(fields: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


def preset_files():
    folder = resources.files("cosmos3_gym.env") / "envs"  # the repository's envs/, installed as package data
    return sorted((p for p in folder.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name)


def as_preset(preset) -> Preset:
    """``preset`` itself, or the preset of env id / file stem ``preset`` (see :func:`load_preset`)."""
    if isinstance(preset, Preset):
        return preset
    if isinstance(preset, str):
        return load_preset(preset)
    raise TypeError(f"preset={_short(preset)} is a {type(preset).__name__}; give an env id such as "
                    f"'Cosmos3Rollout-v0' or a Preset (cosmos3_gym.env.presets.load_preset)")


def load_preset(name: str) -> Preset:
    """The preset of env id ``name`` (e.g. ``"Cosmos3Rollout-v0"``) or of file stem ``name``."""
    for path in preset_files():
        data = tomllib.loads(path.read_text())
        if name in (data.get("id"), path.name[: -len(".toml")]):
            return _from_file(path, data)
    known = [tomllib.loads(p.read_text()).get("id") for p in preset_files()]
    world = ""
    if name in WORLD_ENV_HINTS:
        world = f" ({name} is a world env, not a rollout preset; for SB3: {WORLD_ENV_HINTS[name]})"
    raise ValueError(f"unknown preset {_short(name)}; known env ids: {known}{world}")


def all_presets() -> list[Preset]:
    return [_from_file(path, tomllib.loads(path.read_text())) for path in preset_files()]


def _from_file(path, data: dict) -> Preset:
    """A preset file's table as a :class:`Preset`; unknown keys raise ``ValueError`` naming the file."""
    names = {f.name for f in dataclasses.fields(Preset)}
    unknown = sorted(set(data) - names)
    if unknown or "id" not in data:
        raise ValueError(f"preset file {path.name}: unknown key(s) {unknown} or no 'id'; keys are {sorted(names)}")
    return Preset(**_normalised(data))
