"""Clips to train a PushT world model on: gym-pusht played headless by a mix of behaviours.

A clip is ``chunk + 1`` frames (uint8 96x96, gym-pusht's ``pixels`` observation: the start, then
one frame per action) and the ``chunk`` gym-pusht actions between them (agent target positions in
[0, 512]^2), what ``Cosmos3PushT-v0`` is conditioned on and imagines. Convert the actions to
Cosmos 3's ``pusht`` units with :func:`cosmos3_gym.world.pusht.model_actions` (``a / 256 - 1`` in the
canvas frame; relative to the agent each clip's first frame shows in the agent frame).

Each episode starts from gym-pusht's ``reset(seed)`` (a quarter of them, by default, with the
block placed near the goal pose through gym-pusht's ``reset_to_state``) and plays ``clips_per_episode`` consecutive
chunks with one behaviour (clip ``j + 1`` starts where clip ``j`` ends), so the clips cover starts,
mid-push states and near-goal states:

* ``random_walk``: the target wanders from the agent's position (steps of 10-40 units), pulled
  toward the block's centre by 0-15% of the way a step (an Ornstein-Uhlenbeck walk; 0: a pure walk);
* ``push``: a scripted pusher: it goes behind the block (opposite the goal) and pushes it toward the
  goal, then pushes the bar's ends to turn it to the goal's angle;
* ``noisy_expert``: the pusher with Gaussian noise (10-40 units) on every target;
* ``still``: the target stays at the agent's position.

Everything is deterministic given ``seed`` (episode ``e``'s generator is seeded from ``(seed, e)``),
whatever the number of worker processes. Nothing is trained here.

    python -m cosmos3_gym.world.pusht_data --clips 2000 --out pusht_clips.npz --workers 2
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from .pusht_coverage import GOAL_POSE, SUCCESS_THRESHOLD, T_CENTROID_V, make_pusht, reset_state

KINDS = ("random_walk", "push", "noisy_expert", "still")
DEFAULT_MIX = {"random_walk": 0.3, "push": 0.3, "noisy_expert": 0.3, "still": 0.1}
MOVED_POSITION, MOVED_ANGLE = 0.5, 0.01  # a block moved in a clip: its pose changed by this much (units, rad)


@dataclass
class Clips:
    """``frames`` uint8 ``[n, chunk + 1, 96, 96, 3]``, ``actions`` float32 ``[n, chunk, 2]`` (gym-pusht
    targets), ``kinds`` (an index into :data:`KINDS` per clip), ``block_poses`` ``[n, chunk + 1, 3]``,
    ``agent_positions`` ``[n, chunk + 1, 2]``, ``coverages`` ``[n, chunk + 1]`` (gym-pusht's state,
    for checking a model's imaginings), ``episodes`` (the episode each clip came from)."""

    frames: np.ndarray
    actions: np.ndarray
    kinds: np.ndarray
    block_poses: np.ndarray
    agent_positions: np.ndarray
    coverages: np.ndarray
    episodes: np.ndarray

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def block_moved(self) -> np.ndarray:
        """Per clip: whether the block's position or angle changed within it."""
        poses = self.block_poses
        shift = np.linalg.norm(poses[:, :, :2] - poses[:, :1, :2], axis=-1).max(1)
        turn = np.abs((poses[:, :, 2] - poses[:, :1, 2] + np.pi) % (2 * np.pi) - np.pi).max(1)
        return (shift > MOVED_POSITION) | (turn > MOVED_ANGLE)

    def summary(self) -> dict:
        """Counts and the fraction of clips in which the block moves, overall and per behaviour."""
        moved = self.block_moved
        per_kind = {name: {"clips": int((self.kinds == k).sum()),
                           "block_moved": float(moved[self.kinds == k].mean()) if (self.kinds == k).any() else None}
                    for k, name in enumerate(KINDS)}
        return {"clips": len(self), "block_moved": float(moved.mean()) if len(self) else None, "per_kind": per_kind,
                "max_coverage": float(self.coverages.max()) if len(self) else None,
                "clips_reaching_success": int((self.coverages > SUCCESS_THRESHOLD).any(1).sum())}

    def save(self, path) -> None:
        np.savez_compressed(path, frames=self.frames, actions=self.actions, kinds=self.kinds,
                            kind_names=np.array(KINDS), block_poses=self.block_poses,
                            agent_positions=self.agent_positions, coverages=self.coverages, episodes=self.episodes)


def _wrap(angle: float) -> float:
    return float((angle + np.pi) % (2 * np.pi) - np.pi)


class Pusher:
    """A scripted PushT pusher reading gym-pusht's state: translate the block's centroid to the goal's,
    then rotate it to the goal's angle, one waypoint per step."""

    def __init__(self, rng: np.random.Generator, noise: float = 0.0):
        self.rng, self.noise = rng, noise
        self.goal_centroid = self.centroid(GOAL_POSE)

    @staticmethod
    def centroid(pose) -> np.ndarray:
        x, y, angle = pose
        return np.array([x - np.sin(angle) * T_CENTROID_V, y + np.cos(angle) * T_CENTROID_V])

    def __call__(self, agent: np.ndarray, block_pose: np.ndarray) -> np.ndarray:
        centre = self.centroid(block_pose)
        error = self.goal_centroid - centre
        distance = float(np.linalg.norm(error))
        if distance > 20.0:  # push the centroid toward the goal's, from behind the block
            direction = error / distance
            side = np.array([-direction[1], direction[0]])
            along, across = float(np.dot(agent - centre, direction)), float(np.dot(agent - centre, side))
            if along < -30.0 and abs(across) < 15.0:  # lined up behind it: push through its centroid
                return self._noisy(centre + direction * (min(distance, 50.0) - 30.0))  # slower when close
            if along < -50.0:  # behind it: line up (the T reaches 40-85 from its centroid)
                return self._noisy(centre - direction * 85.0)
            side = side if across >= 0 else -side  # beside or in front: go around
            return self._noisy(centre + side * 100.0 - direction * 60.0)
        turn = _wrap(GOAL_POSE[2] - block_pose[2])  # in place: push one end of the bar across
        if abs(turn) < 0.05:
            return self._noisy(agent)
        c, s = np.cos(block_pose[2]), np.sin(block_pose[2])
        end = np.array(block_pose[:2]) + np.array([c * 50.0 - s * 15.0, s * 50.0 + c * 15.0])  # the bar's +u end
        direction = np.array([-s, c]) * (1.0 if turn > 0 else -1.0)  # along +v at the +u end turns by +angle
        along = float(np.dot(agent - end, direction))
        across = float(np.dot(agent - end, np.array([c, s])))
        if along < -20.0 and abs(across) < 12.0:
            return self._noisy(end + direction * 20.0)
        return self._noisy(end - direction * 45.0)  # half the bar (15) + the agent's radius (15) + 15

    def _noisy(self, target: np.ndarray) -> np.ndarray:
        if self.noise:
            target = target + self.rng.normal(0.0, self.noise, 2)
        return np.clip(target, 0.0, 512.0)


def _near_goal_state(rng: np.random.Generator) -> list[float]:
    """gym-pusht's ``reset_to_state`` ``[agent x, agent y, block x, block y, block angle]`` with the
    block near the goal pose (up to 30 units and 0.5 rad off) and the agent at least 120 from it."""
    block = GOAL_POSE + rng.uniform(-1, 1, 3) * np.array([30.0, 30.0, 0.5]) * rng.uniform(0, 1)
    while True:
        agent = rng.uniform(40.0, 472.0, 2)
        if np.linalg.norm(agent - Pusher.centroid(block)) > 120.0:
            return reset_state(agent, block)


def _episode(pusht, seed: int, episode: int, kind: int, clips: int, chunk: int, near_goal: float) -> list[tuple]:
    """``clips`` consecutive clips of one episode, played by behaviour ``KINDS[kind]``."""
    rng = np.random.default_rng([seed, episode])
    reset_seed = int(rng.integers(2**31))
    options = {"reset_to_state": _near_goal_state(rng)} if rng.uniform() < near_goal else None
    frame, info = pusht.reset(seed=reset_seed, options=options)
    name = KINDS[kind]
    pusher = Pusher(rng, noise=float(rng.uniform(10.0, 40.0)) if name == "noisy_expert" else 0.0)
    walk_step, pull = float(rng.uniform(10.0, 40.0)), float(rng.uniform(0.0, 0.15))
    target = np.array(pusht.agent.position, dtype=np.float64)
    out = []
    for _ in range(clips):
        frames, actions = [frame], []
        poses, agents = [np.array([*pusht.block.position, pusht.block.angle])], [np.array(pusht.agent.position)]
        coverages = [float(pusht._get_coverage())]
        for _ in range(chunk):
            agent = np.array(pusht.agent.position)
            block = np.array([*pusht.block.position, pusht.block.angle])
            if name == "random_walk":  # pulled toward the block, so that some walks push it
                pulled = pull * (Pusher.centroid(block) - target)
                target = np.clip(target + pulled + rng.normal(0.0, walk_step, 2), 0.0, 512.0)
            elif name == "still":
                target = agent
            else:
                target = pusher(agent, block)
            action = target.astype(np.float32)
            frame, _, _, _, info = pusht.step(action)
            frames.append(frame)
            actions.append(action)
            poses.append(np.array(info["block_pose"]))
            agents.append(np.array(info["pos_agent"]))
            coverages.append(float(info["coverage"]))
        out.append((np.stack(frames), np.stack(actions), kind, np.stack(poses), np.stack(agents), np.array(coverages),
                    episode))
    return out


def _work(args) -> list[tuple]:
    seed, episodes, kinds, clips, chunk, near_goal = args
    pusht = make_pusht()
    try:
        return [clip for e, k in zip(episodes, kinds) for clip in _episode(pusht, seed, e, k, clips, chunk, near_goal)]
    finally:
        pusht.close()


def generate(count: int, chunk: int = 8, seed: int = 0, mix: dict | None = None, clips_per_episode: int = 4,
             near_goal: float = 0.25, workers: int = 1, progress: bool = True) -> Clips:
    """``count`` clips (see the module docstring); ``mix``: the share of episodes per behaviour
    (default :data:`DEFAULT_MIX`); ``near_goal``: the share of episodes that start with the block near
    the goal pose (gym-pusht's ``reset_to_state``) instead of gym-pusht's random start, so that
    high coverage and successes are in the data; ``workers``: processes (the clips do not depend on it)."""
    if not 0.0 <= near_goal <= 1.0:
        raise ValueError(f"near_goal={near_goal!r} is invalid; use a share in [0, 1]")
    mix = dict(DEFAULT_MIX if mix is None else mix)
    unknown = sorted(set(mix) - set(KINDS))
    if unknown or not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ValueError(f"mix={mix!r} is invalid; give non-negative shares of {list(KINDS)}")
    if count < 1 or chunk < 1 or clips_per_episode < 1 or workers < 1:
        raise ValueError("count, chunk, clips_per_episode and workers must be positive integers")
    episodes = -(-count // clips_per_episode)
    shares = np.array([mix.get(k, 0.0) for k in KINDS], dtype=np.float64)
    kinds = np.random.default_rng([seed, 2**31]).choice(len(KINDS), size=episodes, p=shares / shares.sum())
    batch = 4  # episodes per task: progress updates often, workers stay busy
    tasks = [(seed, list(range(start, min(start + batch, episodes))), kinds[start:start + batch].tolist(),
              clips_per_episode, chunk, near_goal) for start in range(0, episodes, batch)]
    results = []
    bar = tqdm(total=count, desc="PushT clips", unit="clip", disable=not progress)
    if workers == 1:
        for task in tasks:
            results.extend(_work(task))
            bar.update(min(len(task[1]) * clips_per_episode, count - bar.n))
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for part in pool.imap(_work, tasks):
                results.extend(part)
                bar.update(min(len(part), count - bar.n))
    bar.close()
    results = results[:count]
    columns = list(zip(*results))
    return Clips(frames=np.stack(columns[0]), actions=np.stack(columns[1]), kinds=np.array(columns[2]),
                 block_poses=np.stack(columns[3]), agent_positions=np.stack(columns[4]),
                 coverages=np.stack(columns[5]), episodes=np.array(columns[6]))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m cosmos3_gym.world.pusht_data", description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=1000, help="number of clips (default 1000)")
    parser.add_argument("--chunk", type=int, default=8, help="actions per clip (default 8: 9 frames)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clips-per-episode", type=int, default=4)
    parser.add_argument("--mix", default=",".join(f"{k}={v}" for k, v in DEFAULT_MIX.items()),
                        help="shares of episodes per behaviour, e.g. random_walk=0.5,push=0.5")
    parser.add_argument("--near-goal", type=float, default=0.25,
                        help="share of episodes starting with the block near the goal (default 0.25)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--out", default="", help="write the clips here (.npz); default: only the summary")
    args = parser.parse_args(argv)
    try:
        mix = {key: float(value) for key, value in (item.split("=") for item in args.mix.split(","))}
    except ValueError:
        parser.error(f"--mix {args.mix!r} is invalid; use name=share pairs, e.g. random_walk=0.5,push=0.5")
    if args.out and os.path.exists(args.out):
        parser.error(f"--out {args.out} exists; remove it or choose another path")
    start = time.perf_counter()
    clips = generate(args.clips, args.chunk, args.seed, mix, args.clips_per_episode, args.near_goal, args.workers)
    seconds = time.perf_counter() - start
    summary = {**clips.summary(), "seconds": round(seconds, 2), "clips_per_second": round(len(clips) / seconds, 2),
               "workers": args.workers}
    if args.out:
        clips.save(args.out)
        summary["out"] = args.out
    print(summary)
    return summary


if __name__ == "__main__":
    main()
