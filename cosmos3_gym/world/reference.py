"""The world envs' reference page (``docs/worlds.md``), generated from their docstrings and the spaces
they build, so that it says what the code does: ``python -m cosmos3_gym.world.reference`` rewrites it,
and a test fails when it is out of date (the rollout envs' page is :mod:`cosmos3_gym.env.reference`)."""

from __future__ import annotations

import inspect
import re
import sys
import typing
from pathlib import Path

import gymnasium as gym

import cosmos3_gym

from ..env.docstrings import plain_text

PAGE = Path(__file__).resolve().parents[2] / "docs" / "worlds.md"
INTRO = """# The world envs

Generated from the env classes' docstrings and the spaces the envs build (`python -m
cosmos3_gym.world.reference` rewrites this page; the rollout envs are in [envs.md](envs.md)).

Each world comes twice, with the same spaces and the same reset seeds: a ground truth, and Cosmos 3
imagining it (forward dynamics, one batched generation per step for all envs of `gym.make_vec`). Train
in either; `cosmos3-gym world-eval` measures how far the imagined one can be trusted against its twin.

| env | world | ground truth or imagined | action | observation |
|---|---|---|---|---|
{rows}
"""


def markdown(doc: str) -> str:
    """A numpydoc-style docstring as markdown: its headings one level down (under the env's), and
    Sphinx markup as :func:`~cosmos3_gym.env.docstrings.plain_text` reads it."""
    return plain_text(re.sub(r"^## ", "### ", doc, flags=re.M))


def entry(spec: str):
    """The class or function a registry entry point ``"module:name"`` names."""
    return gym.envs.registration.load_env_creator(spec)


def world_section(env_id: str, world: str) -> tuple[str, str]:
    """One world env's table row and its section: the class docstring and, for an imagined env, its
    vector env's (where the details are)."""
    spec = gym.spec(env_id)
    env = gym.make(env_id).unwrapped
    try:
        act, obs = env.action_space, env.observation_space
    finally:
        env.close()
    vector_class = spec.vector_entry_point and typing.get_type_hints(entry(spec.vector_entry_point))["return"]
    kind = "imagined by Cosmos 3" if vector_class else "ground truth"
    row = (f"| [`{env_id}`](#{env_id.lower().replace('.', '')}) | {world} | {kind} | "  # the heading's anchor
           f"`Box` {act.dtype} {tuple(act.shape)} in [{act.low.min():g}, {act.high.max():g}] | "
           f"`Box` {obs.dtype} {tuple(obs.shape)} |")
    parts = [f"## `{env_id}`", markdown(inspect.getdoc(entry(spec.entry_point)))]
    if vector_class:
        parts += [f"### `gym.make_vec(\"{env_id}\", num_envs=n)`: `{vector_class.__name__}`",
                  markdown(inspect.getdoc(vector_class))]
    return row, "\n\n".join(parts) + "\n"


def page() -> str:
    worlds = [("the procedural world", cosmos3_gym.WORLD_ENV_IDS), ("PushT (gym-pusht)", cosmos3_gym.PUSHT_ENV_IDS)]
    rows, sections = zip(*(world_section(env_id, world) for world, ids in worlds for env_id in ids))
    return INTRO.format(rows="\n".join(rows)) + "\n" + "\n".join(sections)


if __name__ == "__main__":
    PAGE.write_text(page())
    print(f"wrote {PAGE}", file=sys.stderr)
