"""What ``render()`` does without a render mode: returns None, and says how to get frames.

Gymnasium's passive env checker would warn there, but the package registers its envs without it
(``disable_env_checker=True``, in ``cosmos3_gym/__init__.py``), so without this a ``render()`` that
returns None looks like a bug in the env instead of a missing ``render_mode="rgb_array"``.
"""

from __future__ import annotations

from gymnasium import logger
from gymnasium.vector import VectorEnv


def can_render(env) -> bool:
    """Whether ``env`` renders ``rgb_array`` frames; warns (once per env) when it has no render mode."""
    if env.render_mode == "rgb_array":
        return True
    if env.render_mode is None and not getattr(env, "_warned_no_render_mode", False):
        env._warned_no_render_mode = True
        spec = getattr(env, "spec", None)
        name = spec.id if spec is not None else type(env).__name__
        make = "gym.make_vec" if isinstance(env, VectorEnv) else "gym.make"
        logger.warn(f"render() returns None: {name} was made without a render mode; make it with "
                    f'render_mode="rgb_array" (e.g. {make}("{name}", render_mode="rgb_array")) to get frames')
    return False
