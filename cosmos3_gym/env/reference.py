"""The rollout envs' reference page (``docs/envs.md``), generated from the presets and the spaces
the envs build, so that it says what the code does: ``python -m cosmos3_gym.env.reference``
rewrites it, and a test fails when it is out of date."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym

from ..model.tasks import TASKS
from .presets import all_presets
from .rewards import REWARDS
from .vector_env import OPTION_KEYS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "envs.md"
COMMON = """# The rollout envs

Generated from `envs/*.toml` and the spaces the envs build (`python -m cosmos3_gym.env.reference`
rewrites this page). Every preset field is a `gym.make` keyword (`gym.make("Cosmos3Rollout-v0",
num_steps=4)`); an unknown keyword raises `TypeError`.

What every rollout env shares:

* **Episode**: one generation request; `reset(seed=s)` seeds the episode's generator and draws its
  initial noise; `step(action)` takes one denoising step; `terminated` after the last step, never
  truncated. Same seed and same actions give the same trajectory.
* **Observation**: a `Dict` of the current noisy latent of each generated stream (`latent`, and
  `action_latent` / `sound_latent` where the env has them), `sigma` float32 `(1,)` and `step`.
* **Action**: `action_mode="control"` (default): `Box` `(guidance_scale, noise_level)` within the
  preset's bounds; `action_mode="noise"`: the step's standard-normal noise per stream (unbounded;
  for custom trainers, SB3 refuses it).
* **Reward**: 0 until the last step, then `reward_fn(frames, prompts) -> float32 [B]` on the decoded
  video (`frames` uint8 `[B, T, H, W, 3]`); the preset's `reward` names one of
  `cosmos3_gym.env.rewards.REWARDS` ({rewards}), or pass `gym.make(..., reward_fn=f)`, or
  `reward="none"`.
* **Info** every step: `log_prob` (mean over the generated elements), `log_prob_sum` (exact
  log-density) and its per-stream parts, `sigma`, `sigma_next`, `timestep`, `guidance_scale`,
  `noise_level`, `deterministic`, `weights_version`; at the last step also `trajectory` (a
  `cosmos3_gym.Trajectory`: `save(path)` / `Trajectory.load(path)`, safetensors + JSON), `frames`
  where the reward reads the decoded video (not with `reward="none"`, inverse dynamics' default), and
  what the episode generated besides frames (`actions`, `waveform`). `reset` returns `prompt`, `seed`
  and `sigmas`.
* **Reset options**: {options} (which apply depends on the task, below).
"""


def env_section(preset) -> str:
    """One env's table: its task, request shape, denoising, spaces and defaults."""
    env = gym.make(preset.id, num_steps=preset.num_steps).unwrapped
    try:
        obs = "; ".join(f"`{key}` {space.dtype} {tuple(space.shape)}" for key, space in env.observation_space.items())
        act = env.action_space
        action = f"`Box` {tuple(act.shape)} in [{act.low.tolist()}, {act.high.tolist()}]"
    finally:
        env.close()
    spec = TASKS[preset.task]
    inputs = ", ".join(f"`{name}`" for name in spec.inputs) or "none (the prompt)"
    rows = [
        ("task", f"`{preset.task}`: given {inputs}; clean latent frames: {spec.clean_frames}; generated: "
                 f"{', '.join(spec.streams)}" + (f"; robot action chunk {spec.robot_chunk}" if spec.robot_chunk else "")),
        ("request", f"{preset.num_frames} frame(s) of {preset.height}x{preset.width} at {preset.fps:g} fps"),
        ("denoising", f"{preset.num_steps} steps, `{preset.kind}` sampler, `{preset.sigma_grid}` sigma grid"),
        ("observation", obs),
        ("action (control)", f"{action}; default ({preset.guidance_scale:g}, {preset.noise_level:g})"),
        ("reward", f"`{preset.reward}`"),
        ("model", f"`{preset.checkpoint}`" if preset.checkpoint else "the embedded tiny model"),
    ]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"## `{preset.id}`\n\n{preset.description}\n\n| | |\n|---|---|\n{table}\n"


def page() -> str:
    common = COMMON.format(rewards=", ".join(f"`{name}`" for name in REWARDS),
                           options=", ".join(f"`{key}`" for key in OPTION_KEYS))
    return common + "\n" + "\n".join(env_section(preset) for preset in all_presets())


if __name__ == "__main__":
    PAGE.write_text(page())
    print(f"wrote {PAGE}", file=sys.stderr)
