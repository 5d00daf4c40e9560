"""RolloutEngine: B request slots advanced together, one transformer forward per step.

Each slot holds one :class:`Episode`: its own ``torch.Generator`` (the only randomness of
the episode), prompt tokens, sigma grid, step index and history. :meth:`RolloutEngine.step`
packs the conditional and unconditional rows of every stepping slot into one forward (the
conditional rows alone where every slot's guidance scale is 1) and
takes one :func:`~cosmos3_gym.rollout.transition.transition` per slot. Slot ``i``'s result depends
only on its own seed and actions, never on its neighbours.

Every public call validates first and changes state last: :meth:`~RolloutEngine.prepare_step`
and :meth:`~RolloutEngine.prepare_reset` compute without touching any slot, and
:meth:`~RolloutEngine.commit` installs their result. A call that raises (bad input, a
forward that throws, Ctrl-C) leaves every slot exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from ..model.interrupts import deferred_interrupts
from ..model.conditions import Condition
from ..model.model import Cosmos3Model
from ..model.packing import RowSpec
from .schedule import SigmaGrid
from .sde import KINDS
from .seeding import checked_seed
from .streams import LATENTS, LOG_PROB_SUMS, NOISES
from ..model.tasks import ROBOT_TASKS, checked_domain
from .transition import cfg_packing, needs_unconditional, replay_log_probs, transition
from .trajectory import Trajectory


def _fork_rng(rng: torch.Generator) -> torch.Generator:
    """A new generator in the same state (drawing from it leaves ``rng`` untouched)."""
    copy = torch.Generator(device=rng.device)
    copy.set_state(rng.get_state())
    return copy


@dataclass(frozen=True)
class RobotRequest:
    """The robot action chunk every slot of an engine requests (``CosmosActionCondition`` in diffusers;
    not the RL agent's action): ``mode`` (policy, forward or inverse dynamics), ``chunk`` robot actions per request (the video has
    ``chunk + 1`` frames), the ``resolution_tier`` of the conditioning canvas and the camera
    ``view_point`` named in the action caption."""

    mode: str
    chunk: int = 8
    resolution_tier: int = 256
    view_point: str = "ego_view"

    def __post_init__(self):
        if self.mode not in ROBOT_TASKS:
            raise ValueError(f"action mode={self.mode!r} is not supported; choose one of {list(ROBOT_TASKS)}")
        if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 1:
            raise ValueError(f"chunk={self.chunk!r} must be an integer >= 1 (actions per request)")


@dataclass
class Episode:
    """Everything one slot's episode holds. Per generated stream (``"video"``, and ``"sound"`` /
    ``"action"`` where the engine has them): ``latents[stream][step]`` is its current latent,
    ``noises[stream]`` the standard-normal draws of the steps taken and ``stream_log_prob_sums``
    their log-densities."""

    seed: int
    prompt: str
    negative_prompt: str
    cond_ids: tuple[int, ...]
    uncond_ids: tuple[int, ...]
    row: RowSpec  # what the request packs: grid, clean frames, streams (its input_ids unused)
    domain: str  # the embodiment of the action stream ("" without one)
    sigmas: torch.Tensor  # [N+1]
    timesteps: torch.Tensor  # [N+1]
    rng: torch.Generator
    step: int
    done: bool  # took its last step, or its latent turned NaN/Inf: only a reset continues it
    x0_pred: torch.Tensor  # [C, T, H, W] the last step's x0-prediction (the noise before step 0)
    log_probs: torch.Tensor  # [N]
    log_prob_sums: torch.Tensor  # [N]
    guidance_scales: torch.Tensor  # [N]
    noise_levels: torch.Tensor  # [N]
    weights_versions: torch.Tensor  # [N] int64, the model version each step ran with
    latents: dict[str, torch.Tensor]  # per stream [N+1, ...] (video [N+1, C, T, H, W])
    noises: dict[str, torch.Tensor]  # per stream [N, ...]
    stream_log_prob_sums: dict[str, torch.Tensor]  # per stream [N]

    @property
    def latent(self) -> torch.Tensor:
        return self.latents["video"][self.step]

    @property
    def clean_frames(self) -> tuple[int, ...]:
        return self.row.clean_frames

    def current(self, stream: str) -> torch.Tensor:
        """The current latent of ``stream``."""
        return self.latents[stream][self.step]

    def copy(self) -> "Episode":
        """A deep copy (tensors cloned, generator state copied)."""
        def cloned(value):
            if isinstance(value, dict):
                return {name: cloned(tensor) for name, tensor in value.items()}
            return value.clone() if isinstance(value, torch.Tensor) else value

        values = {f.name: cloned(getattr(self, f.name)) for f in fields(self)}
        values["rng"] = _fork_rng(self.rng)
        return Episode(**values)


@dataclass
class Transition:
    """What :meth:`RolloutEngine.prepare_step` computed for ``slots``; nothing is installed yet."""

    slots: list[int]
    latents: dict[str, torch.Tensor]  # per stream, [b, ...] the new latents
    x0_pred: torch.Tensor  # [b, C, T, H, W]
    noise: dict[str, torch.Tensor]  # per stream, [b, ...]
    log_prob: torch.Tensor  # [b] mean convention
    log_prob_sum: torch.Tensor  # [b]
    log_prob_sums: dict[str, torch.Tensor]  # per stream, [b]
    deterministic: torch.Tensor  # [b] bool
    sigma: torch.Tensor  # [b]
    sigma_next: torch.Tensor  # [b]
    timestep: torch.Tensor  # [b]
    guidance: torch.Tensor  # [b]
    noise_level: torch.Tensor  # [b]
    weights_version: int
    rngs: list[torch.Generator]  # the slots' generators after their draws
    finite: torch.Tensor  # [b] bool, False where a new latent holds NaN/Inf
    done: torch.Tensor  # [b] bool, True where the slot takes its last step (or turned non-finite)


class RolloutEngine:
    """B slots of one request shape (frames, height, width, fps, streams) on one :class:`Cosmos3Model`.

    Args:
        model: the :class:`~cosmos3_gym.model.model.Cosmos3Model` to run (may be shared).
        num_slots: B.
        num_frames, height, width, fps: the request shape (pixels), shared by all slots.
        grid: the default :class:`~cosmos3_gym.rollout.schedule.SigmaGrid` of an episode.
        kind: ``"sde"``, ``"cps"`` or ``"ode"`` (see :mod:`cosmos3_gym.rollout.sde`).
        max_prompt_tokens: token budget of a tokenized prompt (templates included).
        sound: also generate the sound stream (the model needs ``sound_gen`` and a sound tokenizer).
        robot: the :class:`RobotRequest` of a rollout with a robot action chunk (``num_frames`` must be
            ``chunk + 1``).
    """

    def __init__(self, model: Cosmos3Model, num_slots: int, *, num_frames: int, height: int, width: int,
                 fps: float, grid: SigmaGrid, kind: str = "sde", max_prompt_tokens: int = 1024, sound: bool = False,
                 robot: RobotRequest | None = None):
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not supported; choose one of {KINDS}")
        if not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_envs={num_slots!r} is invalid; use an integer >= 1")
        cfg = model.transformer.config
        if sound and (not cfg.sound_gen or model.sound_tokenizer is None):
            raise ValueError("sound=True needs a checkpoint with sound_gen=True and a sound_tokenizer/ component")
        if robot is not None:
            if not cfg.action_gen:
                raise ValueError(f"an action rollout ({robot.mode}) needs a transformer with action_gen=True")
            if num_frames != robot.chunk + 1:
                raise ValueError(f"num_frames={num_frames}: an action rollout of chunk={robot.chunk} has "
                                 f"chunk + 1 = {robot.chunk + 1} frames")
        self.model = model
        self.device = model.device
        self.num_slots = num_slots
        self.num_frames, self.height, self.width, self.fps = num_frames, height, width, float(fps)
        self.latent_shape = model.latent_shape(num_frames, height, width)
        self.sound, self.robot = bool(sound), robot
        self.stream_shapes = {"video": tuple(self.latent_shape)}
        if sound:
            self.stream_shapes["sound"] = (int(cfg.sound_dim), model.sound_frames(num_frames, fps))
        if robot is not None:
            self.stream_shapes["action"] = (robot.chunk, int(cfg.action_dim))
            # The prompt is sized by the padded canvas the frames are conditioned on.
            self.text_size = model.action_canvas(height, width, robot.resolution_tier)
        else:
            self.text_size = (height, width)
        self.grid = grid
        self.kind = kind
        self.max_prompt_tokens = max_prompt_tokens
        self.episodes: list[Episode | None] = [None] * num_slots
        self._packed = (None, {})  # (requests, {unconditional rows: PackedRows}) of the last stepped slot set

    @property
    def streams(self) -> tuple[str, ...]:
        return tuple(self.stream_shapes)

    @property
    def num_steps(self) -> int:
        return self.grid.num_steps

    @property
    def weights_version(self) -> int:
        return self.model.weights_version

    def episode(self, slot: int) -> Episode:
        episode = self.episodes[slot]
        if episode is None:
            raise RuntimeError(f"slot {slot} has no episode; reset it first")
        return episode

    # --- reset ----------------------------------------------------------------------
    def prepare_reset(self, slots: list[int], seeds: list[int], prompts: list[str], negative_prompts: list[str],
                      grid: SigmaGrid | None = None, conditions: list[Condition | None] | None = None,
                      domains: list[str] | None = None) -> list[Episode]:
        """New episodes for ``slots`` (validated, tokenized, initial latents drawn); installs nothing.

        ``conditions[j]`` (a :class:`~cosmos3_gym.model.model.Condition`, or None for text-to-video)
        sets the clean elements exactly as ``Cosmos3OmniPipeline.prepare_latents`` does:
        ``x(sigma_0) = m * x0 + (1 - m) * noise``, the noise of each stream (video, then sound,
        then action) drawn whole from the seed. ``domains[j]``: the embodiment of an action
        rollout (one engine may mix embodiments)."""
        grid = grid or self.grid
        if grid.num_steps != self.num_steps:
            raise ValueError(f"grid has {grid.num_steps} steps; this engine runs {self.num_steps}")
        conditions = [None] * len(slots) if conditions is None else list(conditions)
        domains = [""] * len(slots) if domains is None else list(domains)
        if not len(slots) == len(seeds) == len(prompts) == len(negative_prompts) == len(conditions) == len(domains):
            raise ValueError(f"{len(slots)} slots need as many seeds, prompts, negative prompts, conditions and "
                             f"domains (got {len(seeds)}, {len(prompts)}, {len(negative_prompts)}, "
                             f"{len(conditions)}, {len(domains)})")
        for condition in conditions:
            if condition is not None and tuple(condition.latent.shape) != tuple(self.latent_shape):
                raise ValueError(f"a condition's latent has shape {tuple(condition.latent.shape)}; this env's "
                                 f"latent is {tuple(self.latent_shape)}")
            if self.robot is not None and (condition is None or condition.action is None
                                            or tuple(condition.action.shape) != self.stream_shapes["action"]):
                raise ValueError(f"an action rollout needs per slot a condition with actions of shape "
                                 f"{self.stream_shapes['action']} (Cosmos3Model.encode_action_condition)")
        action_dim = self.stream_shapes["action"][1] if self.robot else 0
        embodiments = [checked_domain(d, action_dim, "domain") if self.robot else (0, 0) for d in domains]
        seeds = [checked_seed(seed) for seed in seeds]
        for name, texts in (("prompt", prompts), ("negative_prompt", negative_prompts)):
            for text in texts:
                if not isinstance(text, str):
                    raise ValueError(f"{name} must be a str, got {type(text).__name__}: {text!r}")
        n, device = self.num_steps, self.device
        mode = self.robot.mode if self.robot else None
        episodes = []
        for seed, prompt, negative, condition, domain, (domain_id, raw_dim) in zip(
                seeds, prompts, negative_prompts, conditions, domains, embodiments):
            cond, uncond = self.model.tokenize(prompt, negative, self.num_frames, *self.text_size, self.fps,
                                               action_mode=mode, view_point=self.robot and self.robot.view_point)
            for name, text, ids in (("prompt", prompt, cond), ("negative_prompt", negative, uncond)):
                if len(ids) > self.max_prompt_tokens:
                    raise ValueError(f"{name} {text[:40]!r}... is {len(ids)} tokens with its templates; "
                                     f"the budget is max_prompt_tokens={self.max_prompt_tokens}: shorten it, or "
                                     f"raise max_prompt_tokens (a keyword of the rollout envs) to {len(ids)} or more")
            rng = torch.Generator(device=device).manual_seed(seed)
            # Drawn exactly as Cosmos3OmniPipeline.prepare_latents draws x(sigma_0) from its generator.
            start = {"video": torch.randn((1, *self.latent_shape), generator=rng, device=device)[0]}
            if self.sound:
                start["sound"] = torch.randn(self.stream_shapes["sound"], generator=rng, device=device)
            if self.robot:
                start["action"] = torch.randn(self.stream_shapes["action"], generator=rng, device=device)
            clean = () if condition is None else tuple(condition.clean_frames)
            if clean:
                m = torch.zeros((self.latent_shape[1], 1, 1), device=device)
                m[list(clean)] = 1.0
                start["video"] = m * condition.latent.to(device) + (1.0 - m) * start["video"]
            clean_actions = tuple(condition.clean_actions) if self.robot else ()
            if self.robot:
                m = torch.zeros((self.robot.chunk, 1), device=device)
                m[list(clean_actions)] = 1.0
                start["action"] = m * condition.action.to(device) + (1.0 - m) * start["action"]
                start["action"][:, raw_dim:] = 0
            row = RowSpec((), *self.latent_shape[1:], self.fps, clean,
                          sound_len=self.stream_shapes["sound"][1] if self.sound else 0,
                          sound_fps=float(self.model.transformer.config.sound_latent_fps),
                          action_len=self.robot.chunk if self.robot else 0, clean_actions=clean_actions,
                          domain_id=domain_id, raw_action_dim=raw_dim)
            latents = {name: torch.zeros((n + 1, *x.shape), device=device) for name, x in start.items()}
            for name, x in start.items():
                latents[name][0] = x
            episodes.append(Episode(
                seed=seed, prompt=prompt, negative_prompt=negative, cond_ids=tuple(cond), uncond_ids=tuple(uncond),
                row=row, domain=domain if self.robot else "",
                sigmas=grid.sigmas.to(device).clone(), timesteps=grid.timesteps.to(device).clone(), rng=rng, step=0,
                done=False, x0_pred=start["video"].clone(), log_probs=torch.zeros(n, device=device),
                log_prob_sums=torch.zeros(n, device=device),
                guidance_scales=torch.zeros(n, device=device), noise_levels=torch.zeros(n, device=device),
                weights_versions=torch.full((n,), -1, dtype=torch.long, device=device), latents=latents,
                noises={name: torch.zeros((n, *x.shape), device=device) for name, x in start.items()},
                stream_log_prob_sums={name: torch.zeros(n, device=device) for name in start},
            ))
        return episodes

    def reset_slots(self, slots: list[int], seeds: list[int], prompts: list[str], negative_prompts: list[str],
                    grid: SigmaGrid | None = None, conditions: list[Condition | None] | None = None,
                    domains: list[str] | None = None) -> None:
        """Start a new episode in each of ``slots``: seed, tokenize, draw the initial latents."""
        episodes = self.prepare_reset(slots, seeds, prompts, negative_prompts, grid, conditions, domains)
        self.commit(resets=dict(zip(slots, episodes)))

    # --- step -----------------------------------------------------------------------
    def _packed_for(self, episodes: list[Episode], unconditional: bool):
        requests = tuple((e.cond_ids, e.uncond_ids, e.row) for e in episodes)
        if self._packed[0] != requests:
            self._packed = (requests, {})
        return cfg_packing(self._packed[1], self.model, requests, unconditional)

    def prepare_step(self, slots: list[int], guidance: torch.Tensor, noise_level: torch.Tensor,
                     noise: dict[str, torch.Tensor] | None = None, episodes: dict[int, Episode] | None = None
                     ) -> Transition:
        """Compute one step of ``slots`` (noise from their generators unless ``noise``, per stream
        ``[b, ...]``, is given) without installing it; ``episodes`` overrides slots' episodes (pending resets)."""
        current = [(episodes or {}).get(s) or self.episode(s) for s in slots]
        for slot, episode in zip(slots, current):
            if episode.done:
                raise RuntimeError(f"slot {slot} has finished its episode; reset it before stepping")
        k = torch.tensor([e.step for e in current], device=self.device)
        sigmas = torch.stack([e.sigmas for e in current])
        rows = torch.arange(len(current), device=self.device)
        sigma, sigma_next, sigma_max = sigmas[rows, k], sigmas[rows, k + 1], sigmas[:, 1]
        timestep = torch.stack([e.timesteps[e.step] for e in current])
        x = {name: torch.stack([e.current(name) for e in current]) for name in self.streams}
        guidance = guidance.float().to(self.device)
        noise_level = noise_level.float().to(self.device)
        rngs = [_fork_rng(e.rng) for e in current]
        if noise is None:  # each slot draws its video noise, then its sound, then its action noise
            noise = {name: torch.stack([torch.randn(shape, generator=rng, device=self.device) for rng in rngs])
                     for name, shape in self.stream_shapes.items()}
        noise = {name: noise[name].float().to(self.device) for name in self.streams}
        version = self.model.weights_version
        packed = self._packed_for(current, needs_unconditional(guidance))
        out = transition(self.model, packed, x, timestep.tolist(), guidance, sigma, sigma_next,
                         noise_level, sigma_max, self.kind, noise=noise)
        finite = torch.stack([torch.isfinite(v).flatten(1).all(dim=1) for v in out.next_sample.values()]).all(dim=0)
        last = torch.tensor([e.step + 1 >= self.num_steps for e in current], device=self.device)
        return Transition(
            slots=list(slots), latents=out.next_sample,
            x0_pred=x["video"] - sigma.view(-1, 1, 1, 1, 1) * out.velocity["video"],
            noise=noise, log_prob=out.log_prob, log_prob_sum=out.log_prob_sum, log_prob_sums=out.log_prob_sums,
            deterministic=out.deterministic, sigma=sigma, sigma_next=sigma_next, timestep=timestep,
            guidance=guidance, noise_level=noise_level, weights_version=version, rngs=rngs, finite=finite,
            done=last | ~finite,
        )

    @torch.no_grad()
    def step(self, slots: list[int], guidance: torch.Tensor, noise_level: torch.Tensor,
             noise: dict[str, torch.Tensor] | None = None) -> Transition:
        """Advance ``slots`` by one step (prepare, then commit)."""
        result = self.prepare_step(slots, guidance, noise_level, noise)
        self.commit(result)
        return result

    def commit(self, transition: Transition | None = None, resets: dict[int, Episode] | None = None) -> None:
        """Install a prepared step and/or prepared episodes, as one section that a Ctrl-C
        cannot split (:func:`~cosmos3_gym.model.interrupts.deferred_interrupts`)."""
        with deferred_interrupts():
            self._install(transition, resets or {})

    def _install(self, transition: Transition | None, resets: dict[int, Episode]) -> None:
        if transition is not None:
            for j, slot in enumerate(transition.slots):
                episode = resets.get(slot) or self.episode(slot)
                k = episode.step
                for name in self.streams:
                    episode.latents[name][k + 1] = transition.latents[name][j]
                    episode.noises[name][k] = transition.noise[name][j]
                    episode.stream_log_prob_sums[name][k] = transition.log_prob_sums[name][j]
                episode.log_probs[k] = transition.log_prob[j]
                episode.log_prob_sums[k] = transition.log_prob_sum[j]
                episode.guidance_scales[k] = transition.guidance[j]
                episode.noise_levels[k] = transition.noise_level[j]
                episode.weights_versions[k] = transition.weights_version
                episode.x0_pred = transition.x0_pred[j].clone()
                episode.rng, episode.step, episode.done = transition.rngs[j], k + 1, bool(transition.done[j])
        for slot, episode in resets.items():
            self.episodes[slot] = episode

    # --- outputs --------------------------------------------------------------------
    def decode(self, slots: list[int], x0: bool = False) -> np.ndarray:
        """uint8 frames ``[b, F, H, W, 3]`` of the slots' current latents (or x0-predictions)."""
        episodes = [self.episode(s) for s in slots]
        return self.model.decode(torch.stack([e.x0_pred if x0 else e.latent for e in episodes]))

    def actions(self, slots: list[int]) -> list[np.ndarray]:
        """Each slot's current action chunk, float32 ``[chunk, raw_dim]`` in its embodiment's units
        (the action latent without the padded channels, as the pipeline's ``output.action``)."""
        return [self.episode(s).current("action")[:, : self.episode(s).row.raw_action_dim].cpu().numpy()
                for s in slots]

    def waveforms(self, slots: list[int]) -> np.ndarray:
        """float32 ``[b, channels, samples]``: the slots' current sound latents, decoded."""
        return self.model.decode_sound(torch.stack([self.episode(s).current("sound") for s in slots]))

    def trajectory(self, slot: int, episode: Episode | None = None) -> Trajectory:
        """The episode of ``slot`` so far (the full trajectory once it has taken its last step)."""
        e = episode or self.episode(slot)
        k = e.step

        def host(tensor, end):  # one copy, whether the engine runs on the CPU or not
            return None if tensor is None else tensor[:end].detach().to("cpu", copy=True)

        streams = {}  # flattened into the trajectory's (file format's) field names
        for name in self.streams:
            streams.update({LATENTS[name]: host(e.latents[name], k + 1), NOISES[name]: host(e.noises[name], k),
                            LOG_PROB_SUMS[name]: host(e.stream_log_prob_sums[name], k)})
        return Trajectory(
            log_probs=host(e.log_probs, k), log_prob_sums=host(e.log_prob_sums, k), sigmas=host(e.sigmas, None),
            timesteps=host(e.timesteps, None), guidance_scales=host(e.guidance_scales, k),
            noise_levels=host(e.noise_levels, k), weights_versions=host(e.weights_versions, k), seed=e.seed,
            prompt=e.prompt, negative_prompt=e.negative_prompt, cond_ids=list(e.cond_ids),
            uncond_ids=list(e.uncond_ids), clean_frames=list(e.clean_frames), kind=self.kind,
            num_frames=self.num_frames, height=self.height, width=self.width, fps=self.fps,
            action_mode=self.robot.mode if self.robot else "", domain=e.domain,
            clean_actions=list(e.row.clean_actions), **streams,
        )

    # --- state ----------------------------------------------------------------------
    def _config(self) -> dict:
        """What a snapshot must agree on to be restored here."""
        cfg = self.model.transformer.config
        return {"latent_shape": tuple(self.latent_shape), "num_steps": self.num_steps, "kind": self.kind,
                "fps": self.fps, "streams": dict(self.stream_shapes), "robot": self.robot, "model": (type(self.model.transformer).__name__, cfg.hidden_size,
                                           cfg.num_hidden_layers, cfg.vocab_size)}

    def get_state(self) -> dict:
        """A deep copy of every slot's episode (latents, generator state, step, grid, tokens, history)."""
        return {"episodes": [None if e is None else e.copy() for e in self.episodes], **self._config()}

    def _check_episode(self, i, e, call: str = "set_state") -> None:
        """Raise ``ValueError`` unless ``e`` is an episode this engine can continue."""
        n, shape, device = self.num_steps, tuple(self.latent_shape), self.device

        def fail(what):
            raise ValueError(f"{call}: env {i}'s episode {what}; it does not come from an env of this configuration")

        if not isinstance(e, Episode):
            fail(f"is a {type(e).__name__}")
        if isinstance(e.step, bool) or not isinstance(e.step, int) or not 0 <= e.step <= n:
            fail(f"has step={e.step!r} (expected an int in [0, {n}])")
        if not isinstance(e.done, bool) or not isinstance(e.rng, torch.Generator):
            fail("has a malformed 'done' flag or generator")
        expected = {"x0_pred": (shape, torch.float32), "sigmas": ((n + 1,), torch.float32),
                    "timesteps": ((n + 1,), torch.float32), "weights_versions": ((n,), torch.long)}
        expected.update({name: ((n,), torch.float32) for name in
                         ("log_probs", "log_prob_sums", "guidance_scales", "noise_levels")})
        for field_name, length in (("latents", n + 1), ("noises", n), ("stream_log_prob_sums", n)):
            value = getattr(e, field_name)
            if not isinstance(value, dict) or set(value) != set(self.stream_shapes):
                fail(f"has {field_name} for streams {sorted(value) if isinstance(value, dict) else value!r}; "
                     f"this env generates {sorted(self.stream_shapes)}")
            for name, stream_shape in self.stream_shapes.items():
                want = (length, *stream_shape) if field_name != "stream_log_prob_sums" else (length,)
                expected[f"{field_name}[{name!r}]"] = (value[name], want, torch.float32)
        for name, spec in expected.items():
            value, want_shape, dtype = spec if len(spec) == 3 else (getattr(e, name), *spec)
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != want_shape or value.dtype != dtype:
                fail(f"has {name} {getattr(value, 'shape', type(value).__name__)}; expected {want_shape} {dtype}")
            if value.device != device:
                fail(f"lives on {value.device}; this env runs on {device}")
        vocab = self.model.transformer.config.vocab_size
        if not all(isinstance(t, int) and 0 <= t < vocab for t in (*e.cond_ids, *e.uncond_ids)):
            fail(f"has token ids outside [0, {vocab})")
        if not isinstance(e.row, RowSpec) or tuple(e.row.input_ids) or (
                e.row.latent_frames, e.row.latent_height, e.row.latent_width) != shape[1:]:
            fail("has a request description (row) of another shape")
        if not all(isinstance(f, int) and 0 <= f < shape[1] for f in e.clean_frames):
            fail(f"has clean_frames={e.clean_frames!r}")

    def set_state(self, state: dict) -> None:
        """Restore a :meth:`get_state` snapshot exactly. The snapshot is checked whole first: one
        from another configuration raises ``ValueError`` naming the mismatch and changes nothing."""
        if not isinstance(state, dict) or "episodes" not in state:
            raise ValueError("set_state expects a dict returned by get_state()")
        for name, value in self._config().items():
            if state.get(name) != value:
                raise ValueError(f"set_state: the state has {name}={state.get(name)!r}; this env has {value!r}")
        episodes = state["episodes"]
        if not isinstance(episodes, list) or len(episodes) != self.num_slots:
            raise ValueError(f"set_state: the state holds {len(episodes)} envs; this env has {self.num_slots}")
        for i, e in enumerate(episodes):
            if e is not None:
                self._check_episode(i, e)
        restored = [None if e is None else e.copy() for e in episodes]
        with deferred_interrupts():
            self.episodes = restored

    def prepare_fork(self, src: int | Episode, dst: list[int], seeds: list[int | None]) -> dict[int, Episode]:
        """Copies of slot ``src``'s episode (or of the episode ``src``, from an engine of this
        configuration, e.g. on another worker) for ``dst``, child ``j`` reseeded with ``seeds[j]``
        (``None`` keeps the parent's generator state, so that child reproduces the parent)."""
        if len(seeds) != len(dst):
            raise ValueError(f"fork: {len(seeds)} seeds for {len(dst)} children")
        seeds = [None if s is None else checked_seed(s, "seeds[j]") for s in seeds]
        if isinstance(src, int):
            parent = self.episode(src)
        else:
            self._check_episode("source", src, call="fork")
            parent = src
        children = {}
        for slot, seed in zip(dst, seeds):
            child = parent.copy()
            if seed is not None:
                child.rng.manual_seed(seed)
                child.seed = seed
            children[slot] = child
        return children

    # --- training hooks -------------------------------------------------------------
    def replay_log_probs(self, trajectories, steps=None, micro_batch=None) -> torch.Tensor:
        """:func:`cosmos3_gym.rollout.transition.replay_log_probs` on this engine's model."""
        return replay_log_probs(self.model, trajectories, steps=steps, micro_batch=micro_batch)

    def update_weights(self, weights) -> int:
        """:meth:`Cosmos3Model.update_weights` (the version lives on the model, shared by its envs)."""
        return self.model.update_weights(weights)
