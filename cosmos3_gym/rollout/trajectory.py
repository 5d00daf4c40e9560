"""Trajectory: everything a GRPO/PPO trainer needs from one episode, saved without pickle.

A trajectory plus the model that produced it is enough to recompute every step's
log-prob (:func:`cosmos3_gym.rollout.transition.replay_log_probs`). Loading checks every field
(dtypes, shapes, lengths, the header) before anything uses it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from safetensors.torch import save as serialize

from ..model.tasks import ROBOT_TASKS, TASKS, Task
from .streams import LATENTS, STREAMS

TENSOR_FIELDS = (
    "latents", "log_probs", "log_prob_sums", "sigmas", "timesteps", "guidance_scales", "noise_levels", "noises",
    "weights_versions", "log_prob_sums_video",
)
# The sound and action streams' tensors: present exactly when the episode generated that stream.
STREAM_TENSOR_FIELDS = {
    "sound": ("sound_latents", "sound_noises", "log_prob_sums_sound"),
    "action": ("action_latents", "action_noises", "log_prob_sums_action"),
}
OPTIONAL_TENSOR_FIELDS = tuple(name for fields_ in STREAM_TENSOR_FIELDS.values() for name in fields_)
HEADER_KEY = "cosmos3_gym.trajectory"  # the file format's key, fixed since the first release
# JSON header fields and their types.
METADATA_TYPES = {
    "seed": (int, type(None)), "prompt": str, "negative_prompt": str, "cond_ids": list, "uncond_ids": list,
    "clean_frames": list, "action_mode": str, "domain": str, "clean_actions": list,
    "kind": str, "num_frames": int, "height": int, "width": int, "fps": (int, float), "extra": dict,
}

# What an existing output path may be: written through in place (never replaced), or refused.
WRITE_THROUGH = (stat.S_ISCHR, stat.S_ISFIFO)  # /dev/null, /dev/full, named pipes
REFUSED = {stat.S_ISDIR: "a directory", stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}


def output_target(path: str | Path) -> tuple[Path, os.stat_result | None]:
    """The file that writing ``path`` reaches (symlinks resolved) and its ``stat`` (``None`` when
    it does not exist yet); ``ValueError`` for a directory, block device or socket."""
    target = Path(os.path.realpath(path))
    try:
        info = os.stat(target)
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symlink loop: there is no file to write, and the link must stay
            raise ValueError(f"path={str(path)!r} is a loop of symbolic links; pass a file path") from None
        return target, None  # absent, or under a file: writing it raises the error, naming the path
    for test, what in REFUSED.items():
        if test(info.st_mode):
            shown = "" if str(target) == os.path.abspath(path) else f" ({str(target)!r})"
            raise ValueError(f"path={str(path)!r} is {what}{shown}; "
                             f"only regular files (replaced atomically), character devices such as /dev/null and "
                             f"FIFOs (written through) are written: pass a file path")
    return target, info


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` without ever replacing anything but a regular file.

    A symlink is followed (its target is written, the link stays); an existing character device
    or FIFO (``/dev/null``, a named pipe) is opened and written in place; a regular file, new or
    existing, is written to a temporary file in its own folder and renamed over it (an existing
    file's permission bits are kept), so a write that fails leaves the old file as it was and no
    temporary file behind. A directory, block device or socket is refused (``ValueError``).
    ``OSError`` (no space left, permission denied) names ``path``.
    """
    target, info = output_target(path)
    try:
        if info is not None and any(test(info.st_mode) for test in WRITE_THROUGH):
            with open(os.open(target, os.O_WRONLY), "wb", buffering=0) as handle:  # never creates a file
                view = memoryview(data)
                while view:
                    view = view[handle.write(view):]
            return
        temporary = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
        try:
            with open(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            if info is not None:
                os.chmod(temporary, stat.S_IMODE(info.st_mode))
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except OSError as error:
        if error.errno is None:
            raise
        raise type(error)(error.errno, error.strerror, str(path)) from error  # the path asked for, not a temporary


def _first_non_finite(value, where: str) -> tuple[str, float] | None:
    """Where (``'fps'``, ``'extra'['scores'][1]``) ``value`` first holds a NaN or an infinity, and
    that number; ``None`` when every number in it is finite."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (where, value)
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _first_non_finite(item, f"{where}[{key!r}]")
        if found is not None:
            return found
    return None


def _check_finite_header(fields: dict) -> None:
    """``ValueError`` naming the first header field (nested lists and dicts too) holding NaN or Inf:
    Python's json writes and reads them, and ``fps=Infinity`` would load and replay to other log-probs."""
    for name, value in fields.items():
        found = _first_non_finite(value, repr(name))
        if found is not None:
            raise ValueError(f"trajectory field {found[0]} is {found[1]!r}; the header's numbers must be finite "
                             f"(JSON NaN / Infinity are refused): set a finite value")


@dataclass
class Trajectory:
    """One episode. ``N`` steps; latent shape ``(C, T, H, W)``.

    Tensors: ``latents`` [N+1, C, T, H, W] (``latents[0]`` is the initial noise),
    ``log_probs`` / ``log_prob_sums`` [N] (mean / sum convention of :func:`~cosmos3_gym.rollout.sde.sde_step`),
    ``sigmas`` / ``timesteps`` [N+1], the actions ``guidance_scales`` / ``noise_levels`` [N],
    ``noises`` [N, C, T, H, W], the standard-normal noise of each step, and
    ``weights_versions`` [N] int64, the model's ``weights_version`` each step ran with
    (weights may be updated mid-episode; each step records its own).

    Sound and action streams (``Cosmos3RolloutAV-v0``, the action rollouts) add
    ``sound_latents`` [N+1, C, T] / ``action_latents`` [N+1, chunk, action_dim] and their
    ``*_noises`` [N, ...]; ``log_prob_sums_video`` / ``_sound`` / ``_action`` [N] split
    ``log_prob_sums`` by stream (they add up to it). ``action_mode`` (``""``, ``"policy"``,
    ``"forward_dynamics"``, ``"inverse_dynamics"``), ``domain`` (the embodiment) and
    ``clean_actions`` (given action tokens) describe the action request.
    """

    latents: torch.Tensor
    log_probs: torch.Tensor
    log_prob_sums: torch.Tensor
    sigmas: torch.Tensor
    timesteps: torch.Tensor
    guidance_scales: torch.Tensor
    noise_levels: torch.Tensor
    noises: torch.Tensor
    weights_versions: torch.Tensor
    seed: int | None
    prompt: str
    negative_prompt: str
    cond_ids: list[int]
    uncond_ids: list[int]
    clean_frames: list[int]
    kind: str
    num_frames: int
    height: int
    width: int
    fps: float
    log_prob_sums_video: torch.Tensor
    action_mode: str = ""
    domain: str = ""
    clean_actions: list[int] = field(default_factory=list)
    sound_latents: torch.Tensor | None = None
    sound_noises: torch.Tensor | None = None
    log_prob_sums_sound: torch.Tensor | None = None
    action_latents: torch.Tensor | None = None
    action_noises: torch.Tensor | None = None
    log_prob_sums_action: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.validate()

    def __eq__(self, other) -> bool:
        """Equal fields: tensors element for element (``torch.equal``), the rest by value."""
        if not isinstance(other, Trajectory):
            return NotImplemented
        for name in TENSOR_FIELDS + OPTIONAL_TENSOR_FIELDS:
            a, b = getattr(self, name), getattr(other, name)
            if (a is None) != (b is None) or (a is not None and not torch.equal(a, b)):
                return False
        return self.metadata() == other.metadata()

    def __repr__(self) -> str:
        """One line (the dataclass's would print every tensor: 100 000 characters for a small episode)."""
        mode = f", action_mode={self.action_mode!r}, domain={self.domain!r}" if self.action_mode else ""
        shapes = ", ".join(f"{name} {tuple(getattr(self, LATENTS[name]).shape)}" for name in self.streams)
        return (f"Trajectory(prompt={self.prompt!r}, seed={self.seed}, kind={self.kind!r}, "
                f"num_steps={self.num_steps}{mode}, latents: {shapes}, "
                f"log_prob_sum={self.log_prob_sums.sum().item():.4f}, weights_version={self.weights_version})")

    @property
    def num_steps(self) -> int:
        return self.log_probs.numel()

    @property
    def streams(self) -> tuple[str, ...]:
        """The generated streams: ``("video",)`` plus ``"sound"`` / ``"action"`` where present."""
        return tuple(name for name in STREAMS if getattr(self, LATENTS[name]) is not None)

    def stream_shapes(self) -> tuple:
        """Each stream's latent shape (one step's)."""
        return tuple(tuple(getattr(self, LATENTS[name]).shape[1:]) for name in self.streams)

    @property
    def weights_version(self) -> int:
        """The version of the episode's last step (-1 before its first step)."""
        return int(self.weights_versions[-1]) if self.num_steps else -1

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first field whose type, dtype, shape or length is wrong."""
        for name, kind in METADATA_TYPES.items():
            value = getattr(self, name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"trajectory field {name!r} is {value!r}; expected {kind}")
        _check_finite_header({name: getattr(self, name) for name in METADATA_TYPES})
        if not all(isinstance(i, int) for i in self.cond_ids + self.uncond_ids):
            raise ValueError("trajectory fields 'cond_ids'/'uncond_ids' must be lists of token ids (int)")
        frames = self.latents.shape[2] if self.latents.ndim == 5 else 0
        every_frame_may_be_clean = self.action_mode in ROBOT_TASKS and TASKS[Task(self.action_mode)].clean_frames == "all"
        all_clean = len(self.clean_frames) >= max(frames, 1) and not every_frame_may_be_clean
        if not all(isinstance(f, int) and 0 <= f < frames for f in self.clean_frames) \
                or len(set(self.clean_frames)) != len(self.clean_frames) or all_clean:
            raise ValueError(f"trajectory field 'clean_frames' is {self.clean_frames!r}; expected distinct latent "
                             f"frame indexes in [0, {frames}) leaving at least one frame to generate (all of "
                             f"them only for inverse dynamics, where the actions are generated)")
        if self.action_mode not in ("", *ROBOT_TASKS) \
                or bool(self.action_mode) != (self.action_latents is not None):
            raise ValueError(f"trajectory field 'action_mode' is {self.action_mode!r} with action_latents "
                             f"{'present' if self.action_latents is not None else 'absent'}; expected '' without "
                             f"actions, else one of {[str(task) for task in ROBOT_TASKS]}")
        for stream, names in STREAM_TENSOR_FIELDS.items():
            present = [getattr(self, name) is not None for name in names]
            if any(present) and not all(present):
                raise ValueError(f"trajectory fields {names} of the {stream} stream must be all present or all "
                                 f"absent; got {dict(zip(names, present))}")
        for name in TENSOR_FIELDS + tuple(n for n in OPTIONAL_TENSOR_FIELDS if getattr(self, n) is not None):
            tensor = getattr(self, name)
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"trajectory field {name!r} is a {type(tensor).__name__}; expected a torch.Tensor")
            expected = torch.int64 if name == "weights_versions" else torch.float32
            if tensor.dtype != expected:
                raise ValueError(f"trajectory field {name!r} has dtype {tensor.dtype}; expected {expected}")
        if self.latents.ndim != 5 or self.noises.ndim != 5:
            raise ValueError(f"trajectory latents/noises must be [N+1 | N, C, T, H, W]; got "
                             f"{tuple(self.latents.shape)} and {tuple(self.noises.shape)}")
        n, shape = self.num_steps, tuple(self.latents.shape[1:])
        expected_shapes = {"latents": (n + 1, *shape), "noises": (n, *shape)}
        expected_shapes.update({k: (n,) for k in ("log_probs", "log_prob_sums", "guidance_scales", "noise_levels",
                                                  "weights_versions", "log_prob_sums_video")})
        for stream, (latents, noises, sums) in STREAM_TENSOR_FIELDS.items():
            value = getattr(self, latents)
            if value is not None:
                if value.ndim != 3:
                    raise ValueError(f"trajectory field {latents!r} has shape {tuple(value.shape)}; expected "
                                     f"[N+1, a, b] (sound: channels, frames; action: chunk, action_dim)")
                expected_shapes.update({latents: (n + 1, *value.shape[1:]), noises: (n, *value.shape[1:]),
                                        sums: (n,)})
        if self.action_latents is not None and not all(
                isinstance(a, int) and 0 <= a < self.action_latents.shape[1] for a in self.clean_actions):
            raise ValueError(f"trajectory field 'clean_actions' is {self.clean_actions!r}; expected action token "
                             f"indexes in [0, {self.action_latents.shape[1]})")
        for name, want in expected_shapes.items():
            if tuple(getattr(self, name).shape) != want:
                raise ValueError(f"trajectory field {name!r} has shape {tuple(getattr(self, name).shape)}; "
                                 f"a trajectory of {n} steps needs {want}")
        grid = (self.sigmas.ndim, self.timesteps.ndim, self.sigmas.numel(), self.timesteps.numel())
        if grid[:2] != (1, 1) or grid[2] != grid[3] or grid[2] < n + 1:
            raise ValueError(f"trajectory sigmas/timesteps must be 1-D of equal length >= {n + 1} (N+1); got "
                             f"{tuple(self.sigmas.shape)} and {tuple(self.timesteps.shape)}")
        if self.kind not in ("sde", "cps", "ode"):
            raise ValueError(f"trajectory field 'kind' is {self.kind!r}; expected 'sde', 'cps' or 'ode'")
        for name in ("num_frames", "height", "width"):
            if getattr(self, name) < 1:
                raise ValueError(f"trajectory field {name!r} is {getattr(self, name)}; expected an integer >= 1")
        if not self.fps > 0:
            raise ValueError(f"trajectory field 'fps' is {self.fps!r}; expected a number > 0")

    def validate_values(self) -> None:
        """Raise ``ValueError`` unless the values are ones a rollout can produce and a trainer can
        replay (a loaded file is untrusted; an episode that ended on NaN/Inf is not replayable)."""
        for name in ("latents", "noises", "sigmas", "timesteps", "guidance_scales", "noise_levels",
                     "sound_latents", "sound_noises", "action_latents", "action_noises"):
            if getattr(self, name) is not None and not bool(torch.isfinite(getattr(self, name)).all()):
                raise ValueError(f"trajectory field {name!r} holds NaN or Inf")
        sigmas = self.sigmas
        if sigmas.numel() and (sigmas.max() > 1 or sigmas.min() < 0 or bool((sigmas[1:] >= sigmas[:-1]).any())):
            raise ValueError(f"trajectory field 'sigmas' is {sigmas.tolist()}; expected strictly decreasing values "
                             f"in [0, 1]")
        if bool(((self.noise_levels < 0) | (self.noise_levels > 1)).any()):
            raise ValueError(f"trajectory field 'noise_levels' holds values outside [0, 1]: {self.noise_levels.tolist()}")

    def metadata(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in TENSOR_FIELDS + OPTIONAL_TENSOR_FIELDS}

    def save(self, path: str | Path) -> None:
        """One ``.safetensors`` file; the non-tensor fields go to its header as JSON.

        Written with :func:`write_bytes`: a regular file is replaced atomically, a symlink is
        written through, ``/dev/null`` or a FIFO is written in place and never replaced. A header
        that :meth:`load` would refuse (a NaN in ``extra``) raises ``ValueError`` and writes nothing.
        """
        metadata = self.metadata()
        _check_finite_header(metadata)  # fields set after construction (extra["reward"]) included
        tensors = {name: getattr(self, name).detach().cpu().contiguous()
                   for name in TENSOR_FIELDS + OPTIONAL_TENSOR_FIELDS if getattr(self, name) is not None}
        data = serialize(tensors, metadata={HEADER_KEY: json.dumps(metadata, allow_nan=False)})
        write_bytes(path, data)

    @classmethod
    def load(cls, path: str | Path, expect: dict | None = None) -> "Trajectory":
        """Load and validate a saved trajectory. ``expect`` (e.g. ``{"num_frames": 9, "kind": "sde"}``)
        refuses one from another configuration, naming the first field that differs."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
        if HEADER_KEY not in header:
            raise ValueError(f"{str(path)!r} is not a cosmos3_gym trajectory file (no metadata header)")
        try:
            metadata = json.loads(header[HEADER_KEY])
        except json.JSONDecodeError as error:
            raise ValueError(f"{str(path)!r}: the trajectory header is not valid JSON ({error})") from None
        tensors = load_file(str(path))
        if not isinstance(metadata, dict):
            raise ValueError(f"{str(path)!r}: the trajectory header is not a JSON object")
        if "action_mode" not in metadata and not set(tensors) & set(OPTIONAL_TENSOR_FIELDS):
            # Saved before sound and action streams existed: a video-only episode, all of its log-density video's.
            metadata.update(action_mode="", domain="", clean_actions=[])
            if "log_prob_sums" in tensors:
                tensors.setdefault("log_prob_sums_video", tensors["log_prob_sums"].clone())
        names = set(METADATA_TYPES) | set(TENSOR_FIELDS)
        found = set(metadata) | set(tensors) - set(OPTIONAL_TENSOR_FIELDS)
        if found != names:
            raise ValueError(f"{str(path)!r}: trajectory fields differ from this version's: missing "
                             f"{sorted(names - found)}, unknown {sorted(found - names)}")
        trajectory = cls(**tensors, **metadata)
        trajectory.validate_values()
        for name, value in (expect or {}).items():
            if name not in METADATA_TYPES:
                raise ValueError(f"expect={{{name!r}: ...}}: {name!r} is not a trajectory field; fields: "
                                 f"{sorted(METADATA_TYPES)}")
            if getattr(trajectory, name) != value:
                raise ValueError(f"{str(path)!r} is a trajectory of {name}={getattr(trajectory, name)!r}; "
                                 f"expected {name}={value!r}")
        return trajectory
