"""The tasks Cosmos 3 performs, in one table: what each is given, what stays clean, what it generates.

A task is what one request asks of the model (diffusers' ``Cosmos3OmniPipeline`` arguments, in
one word). Three of them denoise a robot's action chunk beside the video
(``CosmosActionCondition``: ``policy``, ``forward_dynamics``, ``inverse_dynamics``); the chunk is a
*robot* chunk, in the embodiment's units, never the RL agent's action (which is a step's
guidance and noise level, or its noise). Everything else in the package asks this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Task(str, Enum):
    """One request kind; a ``str`` so that presets, trajectory headers and diffusers take it as is."""

    T2V = "t2v"
    T2I = "t2i"
    I2V = "i2v"
    V2V = "v2v"
    AV = "av"
    POLICY = "policy"
    FORWARD_DYNAMICS = "forward_dynamics"
    INVERSE_DYNAMICS = "inverse_dynamics"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TaskSpec:
    """``inputs``: the reset options that carry the task's given data; ``clean_frames``: which
    latent frames stay clean (``"none"``, ``"first"``, ``"leading"`` (the given video's) or
    ``"all"``); ``robot_chunk``: the robot action chunk, ``None`` (no chunk), ``"given"`` (clean)
    or ``"generated"``; ``streams``: the generated streams."""

    inputs: tuple[str, ...]
    clean_frames: str
    robot_chunk: str | None
    streams: tuple[str, ...]


TASKS: dict[Task, TaskSpec] = {
    Task.T2V: TaskSpec((), "none", None, ("video",)),
    Task.T2I: TaskSpec((), "none", None, ("video",)),
    Task.I2V: TaskSpec(("image",), "first", None, ("video",)),
    Task.V2V: TaskSpec(("video",), "leading", None, ("video",)),
    Task.AV: TaskSpec((), "none", None, ("video", "sound")),
    Task.POLICY: TaskSpec(("image",), "first", "generated", ("video", "action")),
    Task.FORWARD_DYNAMICS: TaskSpec(("image", "actions"), "first", "given", ("video",)),
    Task.INVERSE_DYNAMICS: TaskSpec(("video",), "all", "generated", ("action",)),
}
ROBOT_TASKS = tuple(task for task, spec in TASKS.items() if spec.robot_chunk)  # CosmosActionCondition's modes

# A preset's ``conditioning`` (how the tasks were spelled before; still read) and the task it means.
CONDITIONING_TASKS = {"image": Task.I2V, "video": Task.V2V, "policy": Task.POLICY,
                      "forward_dynamics": Task.FORWARD_DYNAMICS, "inverse_dynamics": Task.INVERSE_DYNAMICS}


def task_of(conditioning: str, num_frames: int, sound: bool) -> Task:
    """The task of a request described by its conditioning, frame count and sound flag."""
    if conditioning != "none":
        return CONDITIONING_TASKS[conditioning]
    return Task.AV if sound else Task.T2I if num_frames == 1 else Task.T2V


def embodiment_domains() -> dict[str, tuple[int, int]]:
    """``{domain: (domain id, raw action dimension)}`` of the Cosmos 3 embodiments with a fixed action width."""
    from .diffusers_private import embodiment_domains as domains

    return domains()


def checked_domain(domain, action_dim: int, name: str = "domain") -> tuple[int, int]:
    """``(domain id, raw action dimension)`` of ``domain``, or ``ValueError`` saying what is allowed."""
    domains = embodiment_domains()
    if not isinstance(domain, str) or domain not in domains:
        raise ValueError(f"{name}={domain!r} is not a Cosmos 3 embodiment with a fixed action width; "
                         f"choose one of {sorted(domains)}")
    if domains[domain][1] > action_dim:
        raise ValueError(f"{name}={domain!r} has {domains[domain][1]}-dimensional actions; this model's action "
                         f"heads have action_dim={action_dim}")
    return domains[domain]
