"""What the single and the vector env share: spaces, engine construction, input checks.

Every check here raises before anything changes, so a rejected call leaves the env usable.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from ..rollout.engine import RobotRequest, RolloutEngine
from ..model.model import Cosmos3Model, checked_device
from ..model.tasks import checked_domain
from ..rollout.streams import OBS_KEYS
from .presets import Preset
from ..model.tiny_model import TINY_CHECKPOINT


def build_engine(preset: Preset, num_slots: int, device=None, dtype=None,
                 model: Cosmos3Model | None = None) -> RolloutEngine:
    """An engine for ``preset``; ``model`` reuses an already loaded model instead of loading one."""
    if model is not None and not isinstance(model, Cosmos3Model):
        raise ValueError(f"model={model!r} is not a Cosmos3Model; load one with Cosmos3Model.from_pretrained(...)")
    if model is not None and preset.checkpoint:
        raise ValueError(f"checkpoint={preset.checkpoint!r} and model= were both given; pass one: model= shares a "
                         "Cosmos3Model already loaded, checkpoint= loads one")
    if isinstance(dtype, str):
        names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if dtype not in names:
            raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(names)} or a torch.dtype")
        dtype = names[dtype]
    if dtype is not None and dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype={dtype!r} is not supported; use torch.float32, torch.bfloat16 or torch.float16")
    if model is None:
        model = Cosmos3Model.from_pretrained(preset.checkpoint or TINY_CHECKPOINT, device=device, dtype=dtype)
    else:
        check_model_placement(model, device, dtype)
    grid = preset.sigma_grid_for(model.scheduler, model.pipeline.config.use_native_flow_schedule)
    robot = None
    if preset.action_task:
        robot = RobotRequest(preset.conditioning, chunk=preset.num_frames - 1,
                             resolution_tier=preset.resolution_tier, view_point=preset.view_point)
    engine = RolloutEngine(model, num_slots, num_frames=preset.num_frames, height=preset.height,
                           width=preset.width, fps=preset.fps, grid=grid, kind=preset.kind,
                           max_prompt_tokens=preset.max_prompt_tokens, sound=preset.sound, robot=robot)
    if robot is not None:  # at construction, not at the first reset
        checked_domain(preset.domain, engine.stream_shapes["action"][1], "domain")
    return engine


def check_model_placement(model: Cosmos3Model, device, dtype) -> None:
    """A ``ValueError`` where ``device=`` or ``dtype=`` asks for another place than the given model's:
    a shared model runs where it was loaded, so a differing request would be ignored."""
    if device is not None:
        wanted = checked_device(device)
        other_card = wanted.type != "cpu" and wanted.index not in (None, model.device.index)
        if wanted.type != model.device.type or other_card:
            raise ValueError(f"device={device!r} and model= (on {model.device}) were both given; a shared model "
                             "runs where it was loaded: drop device=, or load the model on that device")
    if dtype is not None and dtype != model.dtype:
        raise ValueError(f"dtype={dtype!r} and model= (in {model.dtype}) were both given; a shared model runs in "
                         "the dtype it was loaded in: drop dtype=, or load the model in that dtype")


def _latent_boxes(stream_shapes: dict) -> dict:
    """One unbounded float32 Box per generated stream, under its observation key."""
    return {OBS_KEYS[name]: spaces.Box(-np.inf, np.inf, shape=tuple(shape), dtype=np.float32)
            for name, shape in stream_shapes.items()}


def observation_space(stream_shapes: dict, num_steps: int) -> spaces.Dict:
    return spaces.Dict({
        **_latent_boxes(stream_shapes),
        "sigma": spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32),
        "step": spaces.Box(0, num_steps, shape=(1,), dtype=np.int64),
    })


def action_space(preset: Preset, stream_shapes: dict) -> spaces.Space:
    if preset.action_mode == "noise":  # the step's noise: a Box, or a Dict of Boxes with several streams
        boxes = _latent_boxes(stream_shapes)
        return boxes["latent"] if len(boxes) == 1 else spaces.Dict(boxes)
    low = np.array([preset.guidance_bounds[0], preset.noise_level_bounds[0]], dtype=np.float32)
    high = np.array([preset.guidance_bounds[1], preset.noise_level_bounds[1]], dtype=np.float32)
    return spaces.Box(low, high, dtype=np.float32)


def default_action(preset: Preset, single_action_space: spaces.Space):
    """One env's action that samples as the preset says: its ``(guidance_scale, noise_level)`` in
    control mode; in noise mode a zero noise (the step's mean), so that a single env's
    ``env.step(env.unwrapped.default_action)`` runs in either mode (a vector env takes one per env:
    ``np.tile(venv.default_action, (n, 1))`` in control mode, ``np.stack([venv.default_action] * n)``
    in noise mode)."""
    if preset.action_mode == "noise":
        if isinstance(single_action_space, spaces.Dict):
            return {key: np.zeros(box.shape, box.dtype) for key, box in single_action_space.spaces.items()}
        return np.zeros(single_action_space.shape, single_action_space.dtype)
    return np.array([preset.guidance_scale, preset.noise_level], dtype=np.float32)


CONTROL_HINT = ("(guidance_scale, noise_level); clip it or widen the preset's guidance_bounds / "
                "noise_level_bounds")
NOISE_HINT = "(the step's noise: one standard normal draw per latent element)"


def action_hint(preset: Preset) -> str:
    """What the preset's actions mean, for :func:`checked_action`'s messages."""
    return NOISE_HINT if preset.action_mode == "noise" else CONTROL_HINT


def finite_float32(values, name: str, device="cpu") -> torch.Tensor:
    """``values`` (real numbers: a numpy array or a tensor) as a float32 tensor on ``device``, refused
    where the float32 values hold NaN or Inf: finiteness is checked after the cast, because a finite
    float64 (1e300) becomes inf in float32. The ``ValueError`` names ``name``, how many entries, and
    the first with its value as given."""
    exact = torch.as_tensor(values, device=device)
    tensor = exact.to(dtype=torch.float32)
    not_finite = ~torch.isfinite(tensor)
    if bool(not_finite.any()):
        first = tuple(not_finite.nonzero()[0].tolist())
        raise ValueError(f"{name} holds NaN or Inf in float32 ({int(not_finite.sum())} of {tensor.numel()} entries; "
                         f"the first, {name}{list(first)} = {float(exact[first].double())!r}); every entry must be "
                         f"finite (float32 holds magnitudes up to {float(torch.finfo(torch.float32).max):.4g})")
    return tensor


def checked_action(action, space: spaces.Box | spaces.Dict, batch_shape: tuple = (), device="cpu",
                   bounds_hint: str = CONTROL_HINT, name: str = "action"):
    """The action as a float32 tensor of shape ``batch_shape + space.shape`` on ``device`` (for a
    ``Dict`` space: a dict of them, one per key).

    Accepts numpy arrays, torch tensors and nested lists; raises ``ValueError`` saying what is wrong
    (``bounds_hint``: ``"(what the entries mean); how to fix an out-of-bounds one"``; a wrong shape's
    message names the meaning too; ``name``: what the messages call the action, a Dict's entries
    ``action['key']``).
    """
    if isinstance(space, spaces.Dict):
        if not isinstance(action, dict) or set(action) != set(space.spaces):
            got = sorted(action) if isinstance(action, dict) else type(action).__name__
            raise ValueError(f"action is {got}; expected a dict with keys {sorted(space.spaces)} (one noise per stream)")
        if batch_shape and all(_shape(action[key]) == box.shape for key, box in space.spaces.items()):
            n = batch_shape[0]
            shapes = ", ".join(f"{key!r}: {box.shape}" for key, box in space.spaces.items())
            raise ValueError(f"action holds one env's noise per stream ({shapes}); these {n} envs take one "
                             f"each, stacked per stream: e.g. {{key: np.stack([noise] * {n}) for key, noise in "
                             f"action.items()}}")
        return {key: checked_action(action[key], box, batch_shape, device, bounds_hint, f"action[{key!r}]")
                for key, box in space.spaces.items()}
    expected = batch_shape + space.shape
    tensor = action if isinstance(action, torch.Tensor) else None
    if tensor is None:
        try:
            array = np.asarray(action)
        except ValueError:  # ragged nested lists
            raise ValueError(f"{name} is a ragged nested sequence; expected an array of shape {expected}") from None
        if array.dtype.kind not in "fiu":
            raise ValueError(f"{name} has dtype {array.dtype}; expected real numbers (float32) of shape {expected}")
        if array.shape != expected:  # here: np.ascontiguousarray makes a 0-d array (a bare number) 1-d
            raise _shape_error(name, array.shape, space.shape, batch_shape, bounds_hint)
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    elif tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise ValueError(f"{name} has dtype {tensor.dtype}; expected real numbers (float32) of shape {expected}")
    elif tensor.is_meta or tensor.layout != torch.strided:
        raise ValueError(f"{name} is a {'meta' if tensor.is_meta else str(tensor.layout)} tensor; expected a dense "
                         f"tensor with data, of shape {expected}")
    if tuple(tensor.shape) != expected:
        raise _shape_error(name, tuple(tensor.shape), space.shape, batch_shape, bounds_hint)
    exact = tensor.to(device=device, dtype=torch.float64)  # bounds are checked before rounding to float32
    tensor = finite_float32(tensor, name, device)
    if np.isfinite(space.low).all() and np.isfinite(space.high).all():
        # copies: a space that came through pickling (a Ray worker's) holds read-only arrays
        low = torch.tensor(space.low, device=device, dtype=torch.float64)
        high = torch.tensor(space.high, device=device, dtype=torch.float64)
        outside = (exact < low) | (exact > high)
        if bool(outside.any()):
            first = tuple(outside.nonzero()[0].tolist())
            shown = tensor.tolist() if tensor.numel() <= 8 else (
                f"array ({int(outside.sum())} entries outside; the first, {name}{list(first)} = "
                f"{float(exact[first])!r})")
            uniform = space.low.min() == space.low.max() and space.high.min() == space.high.max()
            bounds = (f"[{space.low.min():g}, {space.high.max():g}] (every entry)" if uniform
                      else f"low={space.low.tolist()}, high={space.high.tolist()}")
            raise ValueError(f"{name} {shown} lies outside the action space bounds {bounds} {bounds_hint}")
    return tensor


def _shape(value) -> tuple:
    """The shape of an array, a tensor or a nested list."""
    return tuple(value.shape) if hasattr(value, "shape") else np.shape(value)


def _shape_error(name: str, shape: tuple, space_shape: tuple, batch_shape: tuple, bounds_hint: str) -> ValueError:
    """What a wrong action shape means: the entries' meaning, and for a vector env given one env's
    action, how to give one per env."""
    meaning = bounds_hint.split(";")[0]
    stack = ""
    if batch_shape and shape == space_shape:
        n = batch_shape[0]
        stack = (f"; that is one env's action: add the env axis, e.g. action[None]" if n == 1 else
                 f"; that is one env's action, and these {n} envs take one each, stacked: e.g. "
                 f"np.stack([action] * {n})")
    elif not batch_shape and len(space_shape) == 2 and shape == space_shape[1:]:
        stack = (f"; that is one row of a chunk, and a step takes {space_shape[0]}: under a Gymnasium vector env "
                 f"(SyncVectorEnv, SB3's make_vec_env) give (num_envs, {space_shape[0]}, {space_shape[1]}), one "
                 f"chunk per env")
    return ValueError(f"{name} has shape {shape}; expected {batch_shape + space_shape} {meaning}{stack}")


def checked_options(options: dict | None, allowed: tuple[str, ...], hint: str = "") -> dict:
    """A copy of ``options``; raises ``ValueError`` naming any key not in ``allowed`` (then ``hint``)."""
    if options is not None and not isinstance(options, dict):
        raise ValueError(f"options={options!r} is not a dict; allowed keys: {list(allowed)}")
    options = dict(options or {})
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown reset option(s) {unknown}; allowed: {list(allowed)}{hint}")
    return options

