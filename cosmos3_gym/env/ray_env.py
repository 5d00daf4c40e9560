"""Cosmos3RayVectorEnv: one Gymnasium VectorEnv over W Ray actors, one engine (and GPU) each.

Each actor holds a :class:`~cosmos3_gym.env.vector_env.Cosmos3RolloutVectorEnv` of a contiguous
slice of the envs. A step sends every actor its slice of the actions and gathers the results:
one round trip per step, the actors stepping in parallel. Seeds and default prompts are
drawn here, once, exactly as the in-process vector env draws them, so env ``i``'s episode
does not depend on the number of workers.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..model.interrupts import installing
from ..rollout.seeding import draw_prompts, draw_seeds, reset_seeds
from .presets import Preset, as_preset
from .rewards import checked_reward_fn
from .spaces import action_hint, checked_action, checked_options


ITEM_NDIM = {"image": 3, "video": 4, "actions": 2}  # one option item's dimensions (for every env)


class _Worker:
    """One Ray actor: an in-process vector env over this worker's envs (and a model of its own)."""

    def __init__(self, num_envs: int, preset: Preset, kwargs: dict):
        from ..model.threads import configure_threads
        from .vector_env import Cosmos3RolloutVectorEnv

        configure_threads()
        model = kwargs.get("model")
        if callable(model):
            kwargs = {**kwargs, "model": model()}  # a factory: the model is built here, on this worker's device
        self.venv = Cosmos3RolloutVectorEnv(num_envs, preset, array_type="numpy", **kwargs)
        self._backup = None
        self._before = None  # this worker's state before its last successful changing call

    def spaces(self):
        v = self.venv
        return v.single_observation_space, v.single_action_space, v.default_action, v.metadata

    def call(self, method: str, remember: bool, *args, **kwargs):
        """The vector env's ``method`` (``reset``, ``step``, ``import_episode``, ``set_state``);
        with ``remember``, the state from before it is kept: :meth:`undo` puts it back when another
        worker's part of the same call failed. A call that raises here has already changed nothing."""
        before = self.venv.get_state() if remember else None
        result = getattr(self.venv, method)(*args, **kwargs)
        self._before = before
        return result

    def undo(self) -> None:
        self.venv.set_state(self._before)

    def export_episode(self, env):
        return self.venv.export_episode(env)

    def check_episode(self, episode) -> None:
        self.venv.engine._check_episode("source", episode, call="fork")

    def get_state(self):
        return self.venv.get_state()

    def check_weights(self, weights) -> None:
        from ..model.weights import checked_updates

        checked_updates(self.venv.model.transformer, weights)

    def update_weights(self, weights) -> int:
        model = self.venv.model
        self._backup = ({k: v.detach().clone() for k, v in model.transformer.state_dict().items()},
                        model.weights_version)
        return model.update_weights(weights)

    def restore_weights(self) -> int:
        """Undo the last :meth:`update_weights` (another worker's failed), version included."""
        from ..model.weights import staged_update

        state, version = self._backup
        staged_update(self.venv.model.transformer, state)
        self.venv.model.weights_version = version
        return version

    def weights_version(self) -> int:
        return self.venv.weights_version

    def episode_attribute(self, name: str) -> list:
        return self.venv.episode_attribute(name)


class Cosmos3RayVectorEnv(VectorEnv):
    """``num_envs`` Cosmos 3 rollout envs spread over ``num_workers`` Ray actors.

    Same spaces, options, ``group_size`` and autoreset modes as
    :class:`~cosmos3_gym.env.vector_env.Cosmos3RolloutVectorEnv` (numpy arrays); env ``i`` of
    ``reset(seed=s)`` is seeded ``s + i`` and gets the prompt the in-process env would draw,
    whatever ``num_workers``: with the same seeds and actions, any ``num_workers`` gives the
    same latents and log-probs. Worker ``w`` holds envs ``[w * n, (w + 1) * n)``
    (``n = num_envs / num_workers``, a multiple of ``group_size``). ``model``: a zero-argument
    function that builds the :class:`~cosmos3_gym.model.model.Cosmos3Model`, called on each worker
    (default: each worker loads the preset's checkpoint). ``resources``: Ray
    resources of each actor, e.g. ``{"num_gpus": 1}`` (default: one GPU each where GPUs exist
    and ``device`` is not ``"cpu"``, else one CPU); more than the cluster has is refused. Connects to a running Ray cluster or starts a local one
    (``ray.init``); :meth:`close` frees every actor.

    ``update_weights`` puts the tensors in Ray's object store once; every worker checks them
    before any loads them, and if a load fails anywhere the workers already updated are
    restored: all workers report the same ``weights_version``. ``reset``, ``step``, ``fork`` and
    ``set_state`` are all or nothing too: when one worker's part raises (a bad option for its
    envs, a reward function, Ctrl-C there), the workers that succeeded are put back, so the
    vector env is as it was (each worker keeps one copy of its state per call for this). A Ctrl-C
    here while the workers run a call is held until every worker's part has finished (a worker's
    part cannot be stopped half-way); then the parts that succeeded are undone the same way (the
    weights restored) and ``KeyboardInterrupt`` says so: every env is where it was, retry the call.
    A call that went to one worker only (``num_workers=1``, a fork into one worker's envs) keeps no
    copy to undo: it takes effect, and the ``KeyboardInterrupt`` says that instead, as does one that
    comes while the workers' results are being merged. A worker
    that died (killed, out of memory) turns the next call into a ``RuntimeError`` naming it and its envs.

    Defaults drawn by a worker (autoreset episodes' seeds and prompts; world scenes for
    conditioned presets) come from that worker's own generator; pass options to fix them.
    :meth:`fork` branches across workers (the episode travels through the object store).
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 2, preset: str | Preset = "Cosmos3Rollout-v0", *, num_workers: int = 2,
                 group_size: int = 1, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 resources: dict | None = None, **kwargs):
        try:
            import ray
        except ModuleNotFoundError as missing:
            if missing.name != "ray":  # Ray is there, and something it imports is not: Ray's own error says what
                raise
            raise ModuleNotFoundError(f"num_workers={num_workers} runs the envs on Ray workers, and Ray is not "
                                      f"installed: pip install 'ray>=2.40' (in a clone of this repository: pip "
                                      f"install -e '.[ray]'); without num_workers the envs run in this process",
                                      name="ray") from missing

        for name, value in (("num_envs", num_envs), ("num_workers", num_workers), ("group_size", group_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid; use an integer >= 1")
        per_worker = num_envs // num_workers
        if num_envs % num_workers or per_worker % group_size:
            raise ValueError(f"num_envs={num_envs} must split into num_workers={num_workers} equal slices, each a "
                             f"multiple of group_size={group_size} (GRPO groups stay on one worker)")
        if kwargs.get("reward_fn") is not None:  # here: the workers would take reward_fn and drop reward
            checked_reward_fn(kwargs["reward_fn"], kwargs.get("reward"))
        if "array_type" in kwargs or "render_mode" in kwargs:
            raise ValueError("Cosmos3RayVectorEnv returns numpy arrays and does not render; drop array_type / "
                             "render_mode")
        self.preset = as_preset(preset).override(
            **{k: v for k, v in kwargs.items() if k in Preset.__dataclass_fields__})
        env_kwargs = {k: v for k, v in kwargs.items() if k not in Preset.__dataclass_fields__}
        self.num_envs, self.num_workers, self.group_size = num_envs, num_workers, group_size
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        if resources is None:
            on_gpu = torch.cuda.is_available() and str(env_kwargs.get("device", "cuda")).startswith("cuda")
            resources = {"num_gpus": 1} if on_gpu else {"num_cpus": 1}
        cluster = ray.cluster_resources()
        for key, name in (("num_gpus", "GPU"), ("num_cpus", "CPU")):
            wanted = num_workers * resources.get(key, 0)
            if wanted > cluster.get(name, 0):  # the actors would wait forever for it
                raise ValueError(f"num_workers={num_workers} x resources={resources} needs {wanted} {name}s; the Ray "
                                 f"cluster has {cluster.get(name, 0)}: use fewer workers or smaller resources")
        actor = ray.remote(**resources)(_Worker)
        self._slices = [list(range(w * per_worker, (w + 1) * per_worker)) for w in range(num_workers)]
        worker_kwargs = {**env_kwargs, "group_size": group_size, "autoreset_mode": self.autoreset_mode}
        self._workers = [actor.remote(per_worker, self.preset, worker_kwargs) for _ in range(num_workers)]
        spaces = self._gather([w.spaces.remote() for w in self._workers], "start")[0]
        self.single_observation_space, self.single_action_space, self.default_action, _ = spaces
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._rng = np.random.default_rng()

    # --- plumbing ------------------------------------------------------------------
    def _gather(self, refs: list, what: str) -> list:
        """``ray.get`` of one call per worker; a dead worker becomes an error naming it and its envs."""
        import ray
        from ray.exceptions import RayActorError

        results = []
        for w, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except RayActorError as error:
                raise self._died(w, what, error) from error
        return results

    def _died(self, w: int, what: str, error: BaseException) -> Exception:
        envs = f"Ray worker {w} (envs {self._slices[w][0]}-{self._slices[w][-1]})"
        if getattr(error, "actor_init_failed", False):  # its envs refused their arguments: the refusal, not a death
            lines = [line for line in str(getattr(error, "error_msg", "")).splitlines() if line.strip()]
            kind, _, reason = (lines[-1] if lines else "").partition(": ")
            return (ValueError if kind == "ValueError" else RuntimeError)(
                f"{what}: {envs} could not make its envs: {reason or type(error).__name__}")
        return RuntimeError(f"{what}: {envs} died ({type(error).__name__}); close() this env and build a new one")

    @staticmethod
    def _undone(what: str) -> KeyboardInterrupt:
        return KeyboardInterrupt(f"{what}: Ctrl-C arrived while the Ray workers ran it; every worker's part has "
                                 f"been undone, so the call did not take effect (retry it)")

    def _transact(self, what: str, calls: dict) -> list:
        """``{worker index: (method, args, kwargs)}`` run on those workers at once, all or nothing:
        if any raises (or died), the workers that succeeded are undone before the first error is
        raised, so the vector env is as it was. Costs each worker one copy of its state per call
        (none when the call goes to one worker: its own failure already changes nothing).

        A Ctrl-C is held from the first submission on: a worker's part runs to its end wherever
        the driver is interrupted, so every worker's outcome is awaited, then the parts that
        succeeded are undone too and ``KeyboardInterrupt`` raised (one worker's part, kept without
        a copy, stands instead: the caller's section then says that the call took effect)."""
        import ray
        from ray.exceptions import RayActorError

        remember = len(calls) > 1
        with installing(what) as section:
            section.hold()
            refs = {w: self._workers[w].call.remote(method, remember, *args, **kwargs)
                    for w, (method, args, kwargs) in calls.items()}
            results, errors = {}, []
            for w, ref in refs.items():
                try:
                    results[w] = ray.get(ref)
                except BaseException as error:  # noqa: BLE001  (raised below, once the others are undone)
                    errors.append((w, error))
            interrupted = section.interrupted and remember
            if errors or interrupted:
                self._gather([self._workers[w].undo.remote() for w in results], f"{what} (undo)")
                w, error = errors[0] if errors else (None, None)
                if isinstance(error, RayActorError):
                    raise self._died(w, what, error) from error
                if interrupted:
                    raise self._undone(what) from error
                raise error
            return [results[w] for w in sorted(results)]

    def _split(self, value, name: str) -> list:
        """A per-env list option as one slice per worker (a str or a per-group list goes whole)."""
        if value is None or isinstance(value, str):
            return [value] * self.num_workers
        value = list(value)
        if len(value) == self.num_envs:
            return [value[s[0]:s[-1] + 1] for s in self._slices]
        groups, per = self.num_envs // self.group_size, len(self._slices[0]) // self.group_size
        if len(value) == groups:
            return [value[w * per:(w + 1) * per] for w in range(self.num_workers)]
        raise ValueError(f"options[{name!r}] has {len(value)} entries; expected one per env ({self.num_envs}) or "
                         f"per group ({groups})")

    def _merge_infos(self, infos: list[dict]) -> dict:
        """The workers' info dicts as one: each entry concatenated in env order (nested dicts, such as
        ``final_obs``, entry by entry); a worker without an entry contributes masked-out blanks."""
        merged = {}
        for key in set().union(*infos):
            present = [info[key] for info in infos if key in info]
            if isinstance(present[0], dict):
                merged[key] = self._merge_infos([info.get(key, {}) for info in infos])
                continue
            like = np.asarray(present[0])
            parts = []
            for info, envs in zip(infos, self._slices):
                if key in info:
                    parts.append(np.asarray(info[key]))
                elif like.dtype == object:
                    parts.append(np.full((len(envs), *like.shape[1:]), None, dtype=object))
                else:  # masks are False, values zero: masked out
                    parts.append(np.zeros((len(envs), *like.shape[1:]), dtype=like.dtype))
            merged[key] = np.concatenate(parts)
        return merged

    # --- the VectorEnv API --------------------------------------------------------------
    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        options = checked_options(options, ("prompt", "negative_prompt", "reset_mask", "image", "video", "actions",
                                            "domain"))
        seeds, rng = reset_seeds(seed, self.num_envs, self._rng)
        if "prompt" not in options and self.preset.conditioning == "none":
            # The in-process env's draw: one prompt per group
            options["prompt"] = draw_prompts(rng, self.preset.prompts, self.num_envs // self.group_size)
        per_worker = [{} for _ in self._workers]
        for key, value in options.items():
            if key == "reset_mask":
                mask = np.asarray(value)
                if mask.shape != (self.num_envs,) or mask.dtype != bool:
                    raise ValueError(f"options['reset_mask'] is {value!r}; expected a bool array of shape "
                                     f"({self.num_envs},)")
                parts = np.split(mask, self.num_workers)
            elif key in ITEM_NDIM and np.asarray(value).ndim == ITEM_NDIM[key]:
                parts = [value] * self.num_workers  # one item for every env
            else:
                parts = self._split(value, key)
            for w, part in enumerate(parts):
                per_worker[w][key] = part
        with installing("reset"):  # held from the workers' call to the return (see _transact)
            results = self._transact("reset", {w: ("reset", (), {"seed": [seeds[i] for i in s],
                                                                 "options": o or None})
                                               for w, (s, o) in enumerate(zip(self._slices, per_worker))})
            obs = {key: np.concatenate([r[0][key] for r in results]) for key in results[0][0]}
            return obs, self._merge_infos([r[1] for r in results])

    def step(self, actions):
        if isinstance(actions, torch.Tensor):
            actions = actions.cpu()
        # checked here, with the in-process env's messages, before any worker is called
        checked = checked_action(actions, self.single_action_space, (self.num_envs,),
                                 bounds_hint=action_hint(self.preset))
        actions = {k: v.numpy() for k, v in checked.items()} if isinstance(checked, dict) else checked.numpy()

        def rows(s):  # worker s's envs' actions
            return ({k: v[s[0]:s[-1] + 1] for k, v in actions.items()} if isinstance(actions, dict)
                    else actions[s[0]:s[-1] + 1])

        with installing("step"):  # held from the workers' call to the return (see _transact)
            results = self._transact("step", {w: ("step", (rows(s),), {}) for w, s in enumerate(self._slices)})
            obs = {key: np.concatenate([r[0][key] for r in results]) for key in results[0][0]}
            rewards, terminated, truncated = (np.concatenate([r[k] for r in results]) for k in (1, 2, 3))
            return obs, rewards, terminated, truncated, self._merge_infos([r[4] for r in results])

    def fork(self, src: int, dst: list[int], seeds: list[int | None] | None = None) -> list[int | None]:
        """:meth:`Cosmos3RolloutVectorEnv.fork` across workers: env ``src``'s episode is copied to
        every worker holding a ``dst`` env (checked there first, installed once all agree).
        Default seeds are drawn here, so the children do not depend on the number of workers."""
        from .vector_env import checked_fork

        src, dst = checked_fork(src, dst, seeds, self.num_envs)
        if seeds is None:
            seeds = draw_seeds(self._rng, len(dst))
        per_worker = len(self._slices[0])
        home = self._workers[src // per_worker]
        episode = self._gather([home.export_episode.remote(src % per_worker)], "fork")[0]
        targets = {}
        for d, seed in zip(dst, seeds):
            local = targets.setdefault(d // per_worker, ([], []))
            local[0].append(d % per_worker)
            local[1].append(seed)
        self._gather([self._workers[w].check_episode.remote(episode) for w in targets], "fork (check)")
        with installing("fork"):
            self._transact("fork", {w: ("import_episode", (episode, d, s), {}) for w, (d, s) in targets.items()})
            return list(seeds)

    def episode_attribute(self, name: str) -> list:
        """``name`` (``prompt``, ``negative_prompt``, ``seed`` or ``step``) of every env's episode."""
        return [v for part in self._gather([w.episode_attribute.remote(name) for w in self._workers], name)
                for v in part]

    def get_state(self) -> list:
        return self._gather([w.get_state.remote() for w in self._workers], "get_state")

    def set_state(self, state: list) -> None:
        if not isinstance(state, list) or len(state) != self.num_workers:
            raise ValueError(f"set_state expects the list get_state() returned ({self.num_workers} workers)")
        with installing("set_state"):
            self._transact("set_state", {w: ("set_state", (s,), {}) for w, s in enumerate(state)})

    @property
    def weights_version(self) -> int:
        versions = set(self._gather([w.weights_version.remote() for w in self._workers], "weights_version"))
        if len(versions) != 1:
            raise RuntimeError(f"the workers disagree on weights_version ({sorted(versions)})")
        return versions.pop()

    def update_weights(self, weights) -> int:
        """Load new transformer weights into every worker before the next step, all or nothing."""
        import ray

        if isinstance(weights, torch.nn.Module) and hasattr(weights, "merge_and_unload"):
            weights = copy.deepcopy(weights).merge_and_unload().state_dict()  # peft: merged once, here
        elif not isinstance(weights, dict):
            weights = dict(weights) if not isinstance(weights, torch.nn.Module) else weights
        if isinstance(weights, dict):
            weights = {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in weights.items()}
        ref = ray.put(weights)  # once, shared by every worker
        self._gather([w.check_weights.remote(ref) for w in self._workers], "update_weights (check)")
        # From the first load on, a Ctrl-C is held (as in _transact): the loads are awaited, then undone.
        with installing("update_weights") as section:
            section.hold()
            updated, versions = [], []
            try:
                for worker in self._workers:
                    if section.interrupted:
                        raise self._undone("update_weights")
                    versions.append(self._gather([worker.update_weights.remote(ref)], "update_weights")[0])
                    updated.append(worker)
                if section.interrupted:
                    raise self._undone("update_weights")
            except BaseException:
                self._gather([worker.restore_weights.remote() for worker in updated], "update_weights (restore)")
                raise
            return versions[0]

    def close_extras(self, **kwargs) -> None:
        import ray

        for worker in getattr(self, "_workers", []):
            ray.kill(worker)
        self._workers = []


def make_vector_env(num_envs: int = 1, preset: str | Preset = "Cosmos3Rollout-v0", *, num_workers: int | None = None,
                    **kwargs):
    """``gym.make_vec(..., vectorization_mode="vector_entry_point")``: the in-process vector env,
    or with ``num_workers=W`` the Ray one."""
    if num_workers is None:
        from .vector_env import Cosmos3RolloutVectorEnv

        return Cosmos3RolloutVectorEnv(num_envs, preset, **kwargs)
    return Cosmos3RayVectorEnv(num_envs, preset, num_workers=num_workers, **kwargs)
