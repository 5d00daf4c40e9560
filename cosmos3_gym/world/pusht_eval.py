"""How far can the PushT dream be trusted? ``Cosmos3PushT-v0`` scored against gym-pusht itself.

The pieces :mod:`cosmos3_gym.world.harness` needs for PushT, read from pixels only (an imagined
world has nothing else), by the segmentation the env's reward reads
(:func:`~cosmos3_gym.world.pusht_coverage.pixel_labels`):

* the error between two frames (:func:`state_error`): the mean of the agent's and the block's
  position errors in pixels of the 96x96 frame, each the mass centre of its colour (a blurred
  imagining that no T pose fits still has one; one that is missing counts the frame's diagonal);
  per step of the horizon under the true actions (:data:`METRICS`) :func:`block_iou`,
  :func:`coverage_error`, the block's error alone (:func:`block_mass_error`) and :func:`agent_lost`;
  :func:`block_lost` (no T pose fits) as the harness's "object lost";
* open-loop actions for the sensitivity test (:func:`random_walk_targets`: a random walk of the
  agent's target, so the agent moves and sometimes pushes) and :func:`hold_actions` (the target held
  at the canvas centre) in place of zero actions, which in PushT would drag the agent into a corner;
* reference policies (:func:`pusht_policies`) acting on what each world shows: the scripted pusher of
  :mod:`cosmos3_gym.world.pusht_data` at several noise levels and at a crawl, a random walk, standing
  still, backing away from the block, and a trained one (:func:`clone_policy`: nearest-neighbour
  behaviour cloning of the scripted pushes).

``cosmos3-gym world-eval --world pusht`` runs them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .harness import Policy
from .pusht import CANVAS, CHUNK
from .pusht_coverage import (
    BLOCK, SIZE, agent_position, block_pose, frame_coverage, mass_centre, pixel_labels, point_error,
)
from .pusht_data import KINDS, Clips, Pusher

WALK_STEP = 25.0  # the random walk's step per action, in canvas units
CRAWL = 8.0  # the slow pusher's largest move per action, in canvas units (the pusher's waypoints are 30-100 away)


def block_position(frame: np.ndarray) -> np.ndarray | None:
    """The mass centre of the block-coloured pixels in canvas units (None with fewer than 2): a
    blurred imagined block, which no T pose fits, still has one."""
    return mass_centre(pixel_labels(frame) == BLOCK)


def _error(position, imagined: np.ndarray, true: np.ndarray) -> float:
    """:func:`~cosmos3_gym.world.pusht_coverage.point_error` of the two frames' ``position`` (canvas units)."""
    scale = SIZE / CANVAS
    a, b = position(imagined), position(true)
    return point_error(None if a is None else a * scale, None if b is None else b * scale)


def agent_error(imagined: np.ndarray, true: np.ndarray) -> float:
    """Distance in frame pixels between the agents of two frames (:func:`agent_position`)."""
    return _error(agent_position, imagined, true)


def block_mass_error(imagined: np.ndarray, true: np.ndarray) -> float:
    """Distance in frame pixels between the blocks of two frames (:func:`block_position`)."""
    return _error(block_position, imagined, true)


def state_error(imagined: np.ndarray, true: np.ndarray) -> float:
    """The mean of the agent's and the block's errors in frame pixels: the harness's error for PushT."""
    return 0.5 * (agent_error(imagined, true) + block_mass_error(imagined, true))


def agent_lost(imagined: np.ndarray, true: np.ndarray) -> float:
    """1.0 where the true frame shows the agent and the imagined one does not (an agent lost in the
    dream costs :func:`agent_error` the frame's diagonal), else 0.0."""
    return float(agent_position(imagined) is None and agent_position(true) is not None)


def block_iou(imagined: np.ndarray, true: np.ndarray) -> float:
    """Intersection over union of the two frames' block pixels (1 where neither shows the block)."""
    a, b = pixel_labels(imagined) == BLOCK, pixel_labels(true) == BLOCK
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 1.0


def coverage_error(imagined: np.ndarray, true: np.ndarray) -> float:
    """The absolute difference of the goal coverage read from the two frames (the smooth fit)."""
    return abs(frame_coverage(imagined, exact=False) - frame_coverage(true, exact=False))


def block_lost(frame: np.ndarray) -> bool:
    """Whether the frame shows no recognisable T block (an imagined world can dissolve it)."""
    return block_pose(frame, exact=False) is None


METRICS = {"block IoU": block_iou, "coverage error": coverage_error, "block error (px)": block_mass_error,
           "agent lost": agent_lost}


def random_walk_targets(rng: np.random.Generator, action_space, horizon: int) -> np.ndarray:
    """``[horizon, chunk, 2]`` targets: a random walk (steps of :data:`WALK_STEP`) from a uniform start,
    reflected at the walls (clipped, about a quarter of its targets would pile up on a wall)."""
    chunk = action_space.shape[0]
    steps = rng.normal(0.0, WALK_STEP, (horizon * chunk, 2))
    walk = np.mod(rng.uniform(64.0, CANVAS - 64.0, 2) + np.cumsum(steps, axis=0), 2 * CANVAS)
    reflected = np.where(walk > CANVAS, 2 * CANVAS - walk, walk)
    return reflected.reshape(horizon, chunk, 2).astype(action_space.dtype)


def _state(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The agent (the canvas centre where none is seen) and the block pose (None) a frame shows."""
    agent = agent_position(obs)
    return (np.full(2, CANVAS / 2) if agent is None else agent), block_pose(obs, exact=False)


def _chunk(targets: Sequence[np.ndarray]) -> np.ndarray:
    return np.clip(np.stack(targets), 0.0, CANVAS).astype(np.float32)


def pusher_policy(chunk: int = CHUNK, noise: float = 0.0, crawl: float | None = None) -> Policy:
    """The scripted pusher (:class:`~cosmos3_gym.world.pusht_data.Pusher`) on the frame's state, open
    loop within a chunk: each next waypoint as if the agent had reached the last one and the block
    stood still; ``noise`` (canvas units) on every target; ``crawl``: at most that far per action."""
    def policy(obs, info, rng):
        position, pose = _state(obs)
        if pose is None:
            return _chunk([position] * chunk)
        pusher, targets = Pusher(rng, noise), []
        for _ in range(chunk):
            target = pusher(position, pose)
            if crawl is not None:
                step = target - position
                target = position + step * min(1.0, crawl / max(float(np.linalg.norm(step)), 1e-9))
            targets.append(target)
            position = target
        return _chunk(targets)
    return policy


def clone_policy(clips: Clips, chunk: int = CHUNK) -> Policy:
    """Behaviour cloning of the scripted pushes in ``clips`` by nearest neighbour: the state a frame
    shows (agent, block centroid, block angle) matched to the pushes' first states, whose chunk of
    targets is replayed relative to the agent. Fitted in a moment, so the harness has a learned
    policy beside the scripted ones."""
    pushes = clips.kinds == KINDS.index("push")
    if not pushes.any() or clips.actions.shape[1] != chunk:
        raise ValueError(f"clone_policy needs scripted pushes (kind 'push') of {chunk} actions in clips")
    agents, poses = clips.agent_positions[pushes, 0], clips.block_poses[pushes, 0]
    features = _features(agents, poses)
    relative = clips.actions[pushes] - agents[:, None, :]

    def policy(obs, info, rng):
        agent, pose = _state(obs)
        if pose is None:
            return _chunk([agent] * chunk)
        nearest = int(np.argmin(((features - _features(agent[None], pose[None])) ** 2).sum(1)))
        return _chunk(agent + relative[nearest])
    return policy


def _features(agents: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """Agent and block centroid in canvas units, and the block's angle as a point on a circle of 100."""
    centroids = np.stack([Pusher.centroid(pose) for pose in poses])
    return np.concatenate([agents, centroids, 100.0 * np.cos(poses[:, 2:]), 100.0 * np.sin(poses[:, 2:])], axis=1)


def pusht_policies(chunk: int = CHUNK, noise_levels: Sequence[float] = (0.0, 20.0, 40.0),
                   clips: Clips | None = None) -> dict[str, Policy]:
    """PushT's reference policies, ``name -> policy(obs, info, rng)``, all reading the frame they are
    shown: ``pusher`` (and ``pusher noise s``) per ``noise_levels``, ``slow pusher`` (at most
    :data:`CRAWL` per action), ``random walk``, ``still`` (targets on the agent), ``away`` (backs off
    from the block), and ``clone`` (:func:`clone_policy`) where ``clips`` has scripted pushes."""
    policies: dict[str, Policy] = {}
    for noise in noise_levels:
        policies["pusher" if noise == 0 else f"pusher noise {noise:g}"] = pusher_policy(chunk, float(noise))
    policies["slow pusher"] = pusher_policy(chunk, crawl=CRAWL)

    def random_walk(obs, info, rng):
        agent, _ = _state(obs)
        return _chunk(agent + np.cumsum(rng.normal(0.0, WALK_STEP, (chunk, 2)), axis=0))

    def still(obs, info, rng):
        return _chunk([_state(obs)[0]] * chunk)

    def away(obs, info, rng):
        agent, pose = _state(obs)
        if pose is None:
            return _chunk([agent] * chunk)
        direction = agent - Pusher.centroid(pose)
        direction = direction / max(float(np.linalg.norm(direction)), 1e-9)
        return _chunk([agent + direction * WALK_STEP * (k + 1) for k in range(chunk)])

    policies.update({"random walk": random_walk, "still": still, "away": away})
    if clips is not None:
        policies["clone"] = clone_policy(clips, chunk)
    return policies


def hold_actions(chunk: int = CHUNK) -> np.ndarray:
    """PushT's "zero action": every target of the chunk at the canvas centre (zeros would drag the
    agent into a corner)."""
    return np.full((chunk, 2), CANVAS / 2, np.float32)


def pusht_harness_kwargs(chunk: int = CHUNK) -> Mapping:
    """The keyword arguments that point :func:`~cosmos3_gym.world.harness.evaluate_world` at PushT
    (chunks of ``chunk`` actions)."""
    return {"error_fn": state_error, "action_sampler": random_walk_targets, "zero_action": hold_actions(chunk),
            "lost_fn": block_lost, "metrics": METRICS, "zero_label": "held"}
