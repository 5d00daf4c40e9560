"""A procedural world of coloured objects moving with simple physics, and a detector for it.

The embedded tiny Cosmos 3 is trained on these videos, so that its generations are things
a person (and :func:`detect`) can recognise: "a small red ball slides to the right".
Everything is deterministic given a seed; nothing is downloaded.

An agent can drive the same objects (:class:`PushTask`, :func:`push`): one 2-D velocity command
per frame, walls at the borders, and a task stated in a prompt, "move the red ball to the top
left"; :func:`task_reward` scores a chunk of frames, the object's centre read back with :func:`locate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

COLORS = {
    "red": (220, 40, 40),
    "green": (40, 200, 60),
    "blue": (50, 90, 240),
    "yellow": (235, 215, 40),
}
SHAPES = ("ball", "square", "triangle")
SIZES = {"small": 3, "big": 5}  # half-size in pixels
DIRECTIONS = {"right": (1, 0), "left": (-1, 0), "up": (0, -1), "down": (0, 1)}  # (dx, dy), y grows downwards
VERBS = {
    "right": ("slides to the right", "moves to the right", "bounces to the right"),
    "left": ("slides to the left", "moves to the left", "bounces to the left"),
    "up": ("moves up", "rises"),
    "down": ("falls down", "moves down"),
}
BACKGROUND = (16, 16, 16)


@dataclass(frozen=True)
class Scene:
    color: str
    shape: str
    size: str
    direction: str
    verb: str
    start: tuple[float, float]  # centre (x, y) in pixels at frame 0
    speed: float  # pixels per frame

    @property
    def caption(self) -> str:
        return f"a {self.size} {self.color} {self.shape} {self.verb}"

    @property
    def image_caption(self) -> str:  # a still frame shows no motion
        return f"a {self.size} {self.color} {self.shape}"


def sample_scene(rng: np.random.Generator, num_frames: int = 9, size: int = 32) -> Scene:
    """A random scene whose object stays inside the frame for ``num_frames`` frames."""
    direction = str(rng.choice(list(DIRECTIONS)))
    scale = str(rng.choice(list(SIZES)))
    half = SIZES[scale]
    speed = float(rng.uniform(1.5, 2.5))
    travel = speed * (num_frames - 1)
    dx, dy = DIRECTIONS[direction]
    low, high = half + 1.0, size - half - 2.0

    def start_along(d):  # leave room for the whole motion along a moving axis
        if d > 0:
            return float(rng.uniform(low, max(low, high - travel)))
        if d < 0:
            return float(rng.uniform(min(high, low + travel), high))
        return float(rng.uniform(low, high))

    return Scene(
        color=str(rng.choice(list(COLORS))),
        shape=str(rng.choice(SHAPES)),
        size=scale,
        direction=direction,
        verb=str(rng.choice(VERBS[direction])),
        start=(start_along(dx), start_along(dy)),
        speed=speed,
    )


def _mask(shape: str, cx: float, cy: float, half: int, size: int) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size] + 0.5
    if shape == "ball":
        return (x - cx) ** 2 + (y - cy) ** 2 <= half**2
    if shape == "square":
        return (np.abs(x - cx) <= half) & (np.abs(y - cy) <= half)
    # triangle pointing up: inside the box, below the two slanted edges
    inside_box = (y >= cy - half) & (y <= cy + half)
    return inside_box & (np.abs(x - cx) <= (y - (cy - half)) / 2.0 + 0.5)


def render(scene: Scene, num_frames: int = 9, size: int = 32) -> np.ndarray:
    """uint8 frames ``[num_frames, size, size, 3]`` of ``scene``.

    "bounces" adds a vertical hop to a horizontal slide; "falls" accelerates downwards.
    """
    frames = np.empty((num_frames, size, size, 3), dtype=np.uint8)
    dx, dy = DIRECTIONS[scene.direction]
    half = SIZES[scene.size]
    for t in range(num_frames):
        progress = scene.speed * t
        if scene.verb.startswith("falls"):
            # accelerating; a one-frame render is frame 0, at rest
            progress = scene.speed * (num_frames - 1) * (t / (num_frames - 1)) ** 1.5 if num_frames > 1 else 0.0
        cx, cy = scene.start[0] + dx * progress, scene.start[1] + dy * progress
        if scene.verb.startswith("bounces"):
            cy = min(cy, size - half - 1.0) - 3.0 * abs(np.sin(np.pi * t / 4.0))
            cy = max(cy, half + 0.5)
        frames[t] = BACKGROUND
        frames[t][_mask(scene.shape, cx, cy, half, size)] = COLORS[scene.color]
    return frames


def dataset(seed: int, count: int, num_frames: int = 9, size: int = 32) -> tuple[np.ndarray, list[Scene]]:
    """``count`` videos ``[count, num_frames, size, size, 3]`` and their scenes, from ``seed``."""
    rng = np.random.default_rng(seed)
    scenes = [sample_scene(rng, num_frames, size) for _ in range(count)]
    return np.stack([render(s, num_frames, size) for s in scenes]), scenes


# --- an agent drives the object ---------------------------------------------------------
MAX_SPEED = 2.0  # pixels per frame at a command of magnitude 1 along an axis
GOALS = {"top left": (0.25, 0.25), "top right": (0.75, 0.25), "bottom left": (0.25, 0.75),
         "bottom right": (0.75, 0.75)}  # goal centres as fractions of width and height
SUCCESS_RADIUS = 0.15  # success: the object's centre within this fraction of the width of the goal
SUCCESS_BONUS = 1.0


@dataclass(frozen=True)
class PushTask:
    """One episode of the action world: the object, where it starts and where it must go."""

    color: str
    shape: str
    size: str
    goal: str  # a key of GOALS
    start: tuple[float, float]  # centre (x, y) in pixels

    @property
    def prompt(self) -> str:
        return f"move the {self.size} {self.color} {self.shape} to the {self.goal}"


def checked_goal(goal) -> str | None:
    """``goal`` as a key of :data:`GOALS` (or None: a random corner per task); anything else raises."""
    if goal is not None and (not isinstance(goal, str) or goal not in GOALS):
        raise ValueError(f"goal={goal!r} is invalid; use None (a random corner per episode) or one of {list(GOALS)}")
    return None if goal is None else str(goal)


def checked_success_margin(margin, size: int = 32, name: str = "success_margin") -> float:
    """A pessimistic imagined world's margin in pixels: a real number in [0, the success radius in
    pixels at ``size``), returned as a float (-0.0 as 0.0); anything else raises ``ValueError`` naming
    ``name`` (a keyword, or a command-line flag such as ``--success-margin``)."""
    radius = SUCCESS_RADIUS * size
    real = not isinstance(margin, bool) and isinstance(margin, (int, float, np.integer, np.floating))
    try:
        value = float(margin) if real else math.nan
    except OverflowError:  # an int beyond float's range
        value = math.inf
    if not 0.0 <= value < radius:  # also refuses nan
        said = f"{name} {margin!r}:" if name.startswith("--") else f"{name}={margin!r} is invalid;"
        raise ValueError(f"{said} use a number of pixels in [0, {radius:g}) (the success radius, "
                         f"{SUCCESS_RADIUS:g} of the width at size={size}; 0: the true world's rule)")
    return value + 0.0


def sample_task(rng: np.random.Generator, size: int = 32, goal: str | None = None) -> PushTask:
    """A random object, anywhere but already in its goal, and a goal corner (``goal``, or a random one)."""
    goal = checked_goal(goal)
    scale = str(rng.choice(list(SIZES)))
    drawn = str(rng.choice(list(GOALS)))
    goal = drawn if goal is None else goal
    half = SIZES[scale]
    while True:
        start = (float(rng.uniform(half + 1.0, size - half - 1.0)), float(rng.uniform(half + 1.0, size - half - 1.0)))
        if goal_distance(start, goal, size) > 2 * SUCCESS_RADIUS:
            break
    return PushTask(color=str(rng.choice(list(COLORS))), shape=str(rng.choice(SHAPES)), size=scale, goal=goal,
                    start=start)


def goal_distance(position: tuple[float, float], goal: str, size: int = 32) -> float:
    """Distance from a centre (pixels) to the goal's centre, as a fraction of the width."""
    gx, gy = GOALS[goal]
    return float(np.hypot(position[0] / size - gx, position[1] / size - gy))


def centre_bounds(task: PushTask, size: int = 32) -> tuple[float, float]:
    """The lowest and highest centre coordinate (pixels) at which ``task``'s object stays clear of the walls."""
    half = SIZES[task.size]
    return half + 0.5, size - half - 0.5


def push(task: PushTask, position: tuple[float, float], actions: np.ndarray, size: int = 32) -> np.ndarray:
    """The object's centres ``[chunk, 2]`` after each command of ``actions`` ``[chunk, 2]`` (each
    clipped to [-1, 1], times :data:`MAX_SPEED` pixels per frame), stopped by the walls."""
    low, high = centre_bounds(task, size)
    x, y = position
    centres = []
    for dx, dy in np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0):
        x = float(np.clip(x + MAX_SPEED * dx, low, high))
        y = float(np.clip(y + MAX_SPEED * dy, low, high))
        centres.append((x, y))
    return np.array(centres)


def replay_from(frame: np.ndarray, task: PushTask, commands: np.ndarray, size: int = 32) -> np.ndarray | None:
    """uint8 frames ``[chunk + 1, size, size, 3]``: ``task``'s object drawn where uint8 ``frame`` shows it
    (:func:`locate`; kept within :func:`centre_bounds`, as :func:`push` keeps it), then after each of
    ``commands``; None where ``frame`` shows no object. The true world carried on from a frame it did not
    make (an imagined one)."""
    found = locate(frame)
    if found is None:
        return None
    start = tuple(float(c) for c in np.clip(np.array(found) * size, *centre_bounds(task, size)))
    centres = push(task, start, commands, size)
    return np.stack([draw(task, start, size)] + [draw(task, tuple(c), size) for c in centres])


def draw(task: PushTask, position: tuple[float, float], size: int = 32) -> np.ndarray:
    """uint8 ``[size, size, 3]``: the task's object centred at ``position``."""
    frame = np.empty((size, size, 3), dtype=np.uint8)
    frame[:] = BACKGROUND
    frame[_mask(task.shape, position[0], position[1], SIZES[task.size], size)] = COLORS[task.color]
    return frame


ACTION_KINDS = ("turn", "uniform", "zero", "expert", "greedy", "away", "scaled", "stop", "noisy")
"""How a chunk's commands are drawn (:func:`chunk_commands`): ``turn`` a random heading that changes
once mid-chunk, plus noise; ``uniform`` independent uniform commands per frame (the harness's random
policy); ``zero`` standing still; ``expert`` toward the goal plus noise (the policy data);
``greedy`` toward the goal, noiseless; ``away`` from the goal, plus noise; ``scaled`` toward the goal
at a random fraction of the speed; ``stop`` toward the goal for a random number of frames, then
still; ``noisy`` toward the goal plus per-frame noise of a standard deviation drawn per chunk,
log-uniform in [0.5, 8] (clipped: the strongest makes full-speed jitter, which neither ``expert``'s
mild noise nor ``uniform``'s spread covers; the harness's noisy greedy policies send such commands).
Dynamics data needs them all: a world model trained on one kind only learns what that kind makes
likely, not what each command causes."""


def chunk_commands(rng: np.random.Generator, task: PushTask, chunk: int, kind: str, size: int = 32) -> np.ndarray:
    """The commands ``[chunk, 2]`` in [-1, 1] of one chunk of ``kind`` (:data:`ACTION_KINDS`) for ``task``."""
    heading = (np.array(GOALS[task.goal]) * size - np.array(task.start)) / (MAX_SPEED * chunk)
    if kind == "turn":
        turn = int(rng.integers(1, chunk)) if chunk > 1 else 1
        commands = np.concatenate([np.tile(rng.uniform(-1, 1, 2), (turn, 1)),
                                   np.tile(rng.uniform(-1, 1, 2), (chunk - turn, 1))])
        commands = commands + rng.normal(0.0, 0.1, commands.shape)
    elif kind == "uniform":
        commands = rng.uniform(-1, 1, (chunk, 2))
    elif kind == "zero":
        commands = np.zeros((chunk, 2))
    elif kind in ("expert", "away"):
        commands = (1 if kind == "expert" else -1) * heading + rng.normal(0.0, 0.15, (chunk, 2))
    elif kind == "greedy":
        commands = np.tile(heading, (chunk, 1))
    elif kind == "scaled":
        commands = np.tile(rng.uniform(0.0, 1.0) * heading, (chunk, 1))
    elif kind == "stop":
        commands = np.tile(heading, (chunk, 1)) * (np.arange(chunk) < rng.integers(0, chunk + 1))[:, None]
    elif kind == "noisy":
        commands = heading + rng.normal(0.0, 2.0 ** rng.uniform(-1.0, 3.0), (chunk, 2))
    else:
        raise ValueError(f"kind={kind!r} is not an action kind; use one of {list(ACTION_KINDS)}")
    return np.clip(commands, -1, 1)


def action_chunks(rng: np.random.Generator, count: int, chunk: int = 8, kind: str = "turn", size: int = 32,
                  mix: dict[str, float] | None = None) -> tuple[list[PushTask], np.ndarray, np.ndarray]:
    """``count`` tasks, each with one chunk played out: uint8 frames ``[count, chunk + 1, size, size,
    3]`` (the start, then one frame per command) and the commands ``[count, chunk, 2]``, of
    ``kind`` (:data:`ACTION_KINDS`; ``"expert"`` heads for the goal with noise, as a policy should),
    or with ``mix`` (kind -> weight) a kind drawn per chunk."""
    kinds = list(mix) if mix else [kind]
    p = np.array([mix[k] for k in kinds], float) / sum(mix.values()) if mix else None
    tasks, frames, actions = [], [], []
    for _ in range(count):
        task = sample_task(rng, size)
        commands = chunk_commands(rng, task, chunk, kinds[rng.choice(len(kinds), p=p)] if mix else kind, size)
        centres = push(task, task.start, commands, size)
        tasks.append(task)
        frames.append(np.stack([draw(task, task.start, size)] + [draw(task, tuple(c), size) for c in centres]))
        actions.append(commands.astype(np.float32))
    return tasks, np.stack(frames), np.stack(actions)


def succeeds(task: PushTask, commands: np.ndarray, size: int = 32) -> bool:
    """Whether ``commands`` (a chunk ``[k, 2]``), executed in the true world from the task's start,
    leave the object within :data:`SUCCESS_RADIUS` of its goal: success in the true world, from the
    physics (no detector), as every score against the ground truth counts it."""
    end = push(task, task.start, commands, size)[-1]
    return goal_distance(tuple(end), task.goal, size) <= SUCCESS_RADIUS


def task_reward(before: np.ndarray, frames: np.ndarray, goal: str,
                radius: float = SUCCESS_RADIUS) -> tuple[float, bool]:
    """``(reward, success)`` of a chunk: the progress toward ``goal`` (the drop in the detected
    object's distance to it, as a fraction of the width, from frame ``before`` to the chunk's
    last frame) plus :data:`SUCCESS_BONUS` when the last frame has it within ``radius`` (a fraction
    of the width; the world's :data:`SUCCESS_RADIUS`, or less for an imagined world that asks for a
    margin). An object the detector cannot find counts as maximally far."""
    far = float(np.hypot(1.0, 1.0))

    def distance(frame):
        found = locate(frame)
        if found is None:
            return far
        gx, gy = GOALS[goal]
        return float(np.hypot(found[0] - gx, found[1] - gy))

    after = distance(frames[-1])
    success = after <= radius
    return distance(before) - after + (SUCCESS_BONUS if success else 0.0), bool(success)


# --- reading videos back -------------------------------------------------------------
@dataclass(frozen=True)
class Detection:
    color: str | None  # None: no object found
    direction: str | None  # None: no clear motion
    displacement: tuple[float, float]  # centroid motion (dx, dy) from first to last frame, pixels
    position: tuple[float, float]  # centroid in the last frame, as fractions of width and height
    color_purity: float  # fraction of object pixels nearest to the detected colour


def object_pixels(frames: np.ndarray) -> np.ndarray:
    """Pixels of uint8 ``frames`` ``[..., H, W, 3]`` that stand out from the dark background: the object."""
    return frames.max(axis=-1) > 90


def _centroid(mask: np.ndarray) -> tuple[float, float] | None:
    """The object pixels' centre in pixels (None: fewer than two)."""
    if mask.sum() < 2:
        return None
    ys, xs = np.nonzero(mask)
    return xs.mean() + 0.5, ys.mean() + 0.5


def locate(frame: np.ndarray) -> tuple[float, float] | None:
    """The main object's centre in uint8 ``frame`` ``[H, W, 3]`` as fractions of width and height, or
    None where :func:`detect` finds no object: its ``position`` without the colour vote, which costs
    most of a large frame's detection and which a reward that needs the position alone would discard."""
    frame = np.asarray(frame)
    found = _centroid(object_pixels(frame))
    if found is None:
        return None
    height, width = frame.shape[:2]
    return found[0] / width, found[1] / height


def _nearest_color(pixels: np.ndarray) -> np.ndarray:
    palette = np.array(list(COLORS.values()), dtype=np.float32)
    return np.argmin(((pixels[:, None, :] - palette[None]) ** 2).sum(-1), axis=1)


def detect(frames: np.ndarray, min_motion: float = 2.0) -> Detection:
    """Colour, motion direction and final position of the main object of uint8 ``[T, H, W, 3]``."""
    frames = np.asarray(frames)
    names = list(COLORS)
    centroids, votes = [], []
    for frame in frames:
        mask = object_pixels(frame)
        centroids.append(_centroid(mask))
        if centroids[-1] is not None:
            votes.append(_nearest_color(frame[mask].astype(np.float32)))
    found = [c for c in centroids if c is not None]
    if not found:
        return Detection(None, None, (0.0, 0.0), (0.5, 0.5), 0.0)
    votes = np.concatenate(votes)
    counts = np.bincount(votes, minlength=len(names))
    color = names[int(counts.argmax())]
    dx, dy = found[-1][0] - found[0][0], found[-1][1] - found[0][1]
    direction = None
    if max(abs(dx), abs(dy)) >= min_motion:
        direction = ("right" if dx > 0 else "left") if abs(dx) >= abs(dy) else ("down" if dy > 0 else "up")
    height, width = frames.shape[1:3]
    return Detection(color, direction, (float(dx), float(dy)),
                     (found[-1][0] / width, found[-1][1] / height), float(counts.max() / counts.sum()))


DIRECTION_PHRASES = {"to the right": "right", "to the left": "left", " up": "up", "rises": "up",
                     " down": "down", "falls": "down", "drops": "down"}
POSITION_PHRASES = {"at the top": (0.5, 0.25), "at the bottom": (0.5, 0.75), "on the left": (0.25, 0.5),
                    "on the right": (0.75, 0.5), "in the middle": (0.5, 0.5)}


def parse_prompt(prompt: str) -> dict:
    """The colour, direction and position a prompt asks for (None where it names none)."""
    text = " " + prompt.lower()
    color = next((name for name in COLORS if f" {name} " in text + " "), None)
    direction = next((d for phrase, d in DIRECTION_PHRASES.items() if phrase in text), None)
    position = next((p for phrase, p in POSITION_PHRASES.items() if phrase in text), None)
    return {"color": color, "direction": direction, "position": position}
