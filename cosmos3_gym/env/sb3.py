"""stable-baselines3 VecEnv over :class:`~cosmos3_gym.env.vector_env.Cosmos3RolloutVectorEnv` (or its Ray
counterpart, :class:`~cosmos3_gym.env.ray_env.Cosmos3RayVectorEnv`), or over
:class:`~cosmos3_gym.world.envs.Cosmos3WorldVectorEnv` (``autoreset_mode=SAME_STEP``).

SB3 gets numpy, same-step autoreset with ``info["terminal_observation"]``, and infos that
``VecMonitor`` can annotate, while the work stays one batched forward per step for all
envs (no ``DummyVecEnv`` over single envs).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

import cosmos3_gym
from .presets import load_preset
from .ray_env import make_vector_env
from ..rollout.streams import LOG_PROB_INFO
from .vector_env import Cosmos3RolloutVectorEnv

# Per-env views: get_attr(name) returns this field of env i's episode for env i.
PER_ENV_ATTRIBUTES = ("prompt", "negative_prompt", "seed", "step")
INFO_KEYS = ("log_prob", "log_prob_sum", *LOG_PROB_INFO.values(), "sigma", "sigma_next", "timestep",
             "guidance_scale", "noise_level", "deterministic", "weights_version",
             # the imagined worlds' step infos (Cosmos3PushT-v0's coverage; opt-in disagreement)
             "success", "coverage", "coverages", "played", "disagreement", "frames")


def imagined_world_ids() -> list[str]:
    """The registered world ids that have a batched env of their own (the twins are plain Gymnasium envs)."""
    return [env_id for env_id in (*cosmos3_gym.WORLD_ENV_IDS, *cosmos3_gym.PUSHT_ENV_IDS)
            if gym.spec(env_id).vector_entry_point]


class Cosmos3SB3VecEnv(VecEnv):
    """Adapter: ``Cosmos3SB3VecEnv.make("Cosmos3Rollout-v0", num_envs=8, num_steps=4)``.

    ``rescale_actions=True`` shows SB3 a ``[-1, 1]`` action box, mapped linearly onto the
    env's (guidance_scale, noise_level) bounds (what SB3 recommends for Gaussian policies).

    The envs share one engine, so ``get_attr``/``set_attr``/``env_method`` address the
    vector env (the same value for every index), except the per-env attributes
    ``prompt``, ``negative_prompt``, ``seed`` and ``step``.

    The world model as SB3's env: ``Cosmos3SB3VecEnv.make("Cosmos3World-v0", num_envs=16, goal="top left")``
    (or ``"Cosmos3PushT-v0"``); every step's info carries the world's ``success`` and ``frames``
    (PushT's also ``coverage``, ``coverages`` and ``played``; ``disagreement`` where asked for), and
    its episode ends carry ``is_success``. SB3's
    policies see only the frame, so give the world a fixed ``goal`` (the prompt that names a
    random goal does not reach them).
    """

    def __init__(self, venv: Cosmos3RolloutVectorEnv, rescale_actions: bool = False):
        if isinstance(venv, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)):
            env_id = venv.spec.id if venv.spec is not None else "the env"
            raise ValueError(f"the SB3 adapter takes Cosmos 3's own vector envs (their episode ends carry the "
                             f"trajectory), not a {type(venv).__name__}; for a plain Gymnasium env such as {env_id} "
                             f"use SB3's make_vec_env({env_id!r}, n_envs={venv.num_envs})")
        array_type = getattr(venv, "array_type", "numpy")
        if venv.autoreset_mode != AutoresetMode.SAME_STEP or array_type != "numpy":
            env_id = getattr(venv, "env_id", None) or getattr(getattr(venv, "preset", None), "id", "Cosmos3Rollout-v0")
            raise ValueError(f"the SB3 adapter needs autoreset_mode=SAME_STEP and array_type='numpy', got "
                             f"{venv.autoreset_mode} and {array_type!r}; build it with Cosmos3SB3VecEnv.make("
                             f"{env_id!r}, num_envs={venv.num_envs}, ...) (a plain Gymnasium env, such as a twin: "
                             f"SB3's own make_vec_env)")
        self.venv = venv
        space = venv.single_action_space
        if rescale_actions and not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise ValueError("rescale_actions=True needs a bounded action space (action_mode='control')")
        # SB3's Gaussian policies work best on [-1, 1]; map that box linearly onto the env's bounds.
        self._rescale = (space.low, space.high) if rescale_actions else None
        if rescale_actions:
            space = gym.spaces.Box(-1.0, 1.0, shape=space.shape, dtype=np.float32)
        super().__init__(venv.num_envs, venv.single_observation_space, space)
        self._actions = None

    @classmethod
    def make(cls, env_id: str = "Cosmos3Rollout-v0", num_envs: int = 4, rescale_actions: bool = False,
             num_workers: int | None = None, **kwargs) -> "Cosmos3SB3VecEnv":
        """``num_workers=W``: the envs run on W Ray actors (:class:`~cosmos3_gym.env.ray_env.Cosmos3RayVectorEnv`).

        The imagined worlds (``Cosmos3World-v0``, ``Cosmos3PushT-v0``) run in this process, built by
        their vector entry points (``gym.make_vec``'s keyword checks)."""
        for reserved in ("autoreset_mode", "vectorization_mode", "array_type"):
            if reserved in kwargs:
                raise ValueError(f"{reserved}={kwargs[reserved]!r}: the SB3 adapter sets it (same-step autoreset on "
                                 f"numpy, SB3's VecEnv convention); leave it out")
        if env_id in imagined_world_ids():
            if num_workers is not None:
                raise ValueError(f"num_workers={num_workers!r}: {env_id} runs in this process only; leave num_workers "
                                 f"out (the Ray workers serve the rollout presets)")
            venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point",
                                autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
            return cls(venv, rescale_actions)
        if isinstance(env_id, str) and env_id not in cosmos3_gym.ENV_IDS:
            try:
                load_preset(env_id)  # a preset's file stem is an id too
            except ValueError as error:
                raise ValueError(f"{error}; Cosmos3SB3VecEnv.make also takes the imagined worlds "
                                 f"{imagined_world_ids()}") from None
        if num_workers is None:
            kwargs["array_type"] = "numpy"
        venv = make_vector_env(num_envs, env_id, num_workers=num_workers, autoreset_mode=AutoresetMode.SAME_STEP,
                               **kwargs)
        return cls(venv, rescale_actions)

    def _single_obs(self, obs, i: int):
        if isinstance(obs, dict):
            return {key: np.asarray(value[i]) for key, value in obs.items()}
        return np.asarray(obs[i])

    def _merged_options(self) -> dict | None:
        """SB3's per-env ``set_options`` dicts as one vector-env options dict (per-env lists)."""
        options = [o or {} for o in self._options]
        keys = set().union(*options)
        per_env = ("prompt", "negative_prompt", "image", "video")
        if not keys:
            return None
        if keys - set(per_env):
            raise ValueError(f"set_options: {sorted(keys - set(per_env))} cannot be set per env; allowed: {per_env}")
        missing = [k for k in sorted(keys) if any(k not in o for o in options)]
        if missing:
            raise ValueError(f"set_options: {missing} given for some envs only; give them for every env")
        return {key: [o[key] for o in options] for key in keys}

    def reset(self):
        seeds = self._seeds if all(s is not None for s in self._seeds) else None
        obs, _ = self.venv.reset(seed=seeds, options=self._merged_options())
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        if self._rescale is not None:
            low, high = self._rescale
            actions = (low + (np.asarray(actions, dtype=np.float32) + 1.0) * 0.5 * (high - low)).astype(np.float32)
        self._actions = actions

    def step_wait(self):
        obs, rewards, terminated, truncated, infos = self.venv.step(self._actions)
        dones = terminated | truncated
        step_infos = [{} for _ in range(self.num_envs)]
        for layer in (infos, infos.get("final_info", {})):  # running envs, then the ended ones
            for key in INFO_KEYS:
                for i in np.flatnonzero(layer.get(f"_{key}", ())):
                    value = layer[key][i]
                    step_infos[i][key] = value.item() if isinstance(value, np.generic) else value
        if "final_obs" in infos:
            final, ended_infos = infos["final_obs"], infos["final_info"]  # the ended episodes' step infos
            for i in np.flatnonzero(infos["_final_obs"]):
                step_infos[i]["terminal_observation"] = self._single_obs(final, i)
                step_infos[i]["TimeLimit.truncated"] = bool(truncated[i])
                step_infos[i]["trajectory"] = ended_infos["trajectory"][i]
                if "success" in ended_infos:  # SB3 logs the success rate of episodes from "is_success"
                    step_infos[i]["is_success"] = bool(ended_infos["success"][i])
                if "error" in ended_infos and ended_infos["_error"][i]:
                    step_infos[i]["error"] = ended_infos["error"][i]
        return obs, rewards.astype(np.float32), dones, step_infos

    def close(self) -> None:
        self.venv.close()

    def _indices(self, indices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        indices = [indices] if isinstance(indices, (int, np.integer)) else list(indices)
        if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_envs
               for i in indices):
            raise ValueError(f"indices={indices!r} must be env indices in [0, {self.num_envs})")
        return [int(i) for i in indices]

    def get_attr(self, attr_name: str, indices=None) -> list:
        if attr_name in PER_ENV_ATTRIBUTES and hasattr(self.venv, "episode_attribute"):
            values = self.venv.episode_attribute(attr_name)
            return [values[i] for i in self._indices(indices)]
        return [getattr(self.venv, attr_name)] * len(self._indices(indices))

    def set_attr(self, attr_name: str, value, indices=None) -> None:
        if attr_name in PER_ENV_ATTRIBUTES:
            raise AttributeError(f"{attr_name!r} is set through reset(options=...), not set_attr")
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list:
        result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [result] * len(self._indices(indices))

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def get_images(self):
        return list(self.venv.render() or [])
