"""RolloutEngine: B request slots advanced together, one transformer forward per step.

Each slot is one episode: its own ``torch.Generator`` (the only randomness of the
episode), prompt tokens, sigma grid and step index. :meth:`RolloutEngine.step` packs the
conditional and unconditional rows of every stepping slot into one forward, combines them
with classifier-free guidance, and takes one :func:`~cosmos3_gym.sde.sde_step` per slot.
Slot ``i``'s result depends only on its own seed and actions, never on its neighbours.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from .generator import Cosmos3Generator
from .packing import RowSpec
from .schedule import SigmaGrid
from .sde import KINDS, sde_step
from .trajectory import Trajectory


@dataclass
class StepResult:
    """What one :meth:`RolloutEngine.step` produced for the slots it advanced (``slots``)."""

    slots: list[int]
    latents: torch.Tensor  # [b, C, T, H, W] the new latents
    log_prob: torch.Tensor  # [b] mean convention
    log_prob_sum: torch.Tensor  # [b]
    sigma: torch.Tensor  # [b]
    sigma_next: torch.Tensor  # [b]
    timestep: torch.Tensor  # [b]
    finite: torch.Tensor  # [b] bool, False where the new latent holds NaN/Inf
    done: torch.Tensor  # [b] bool, True where the slot has taken its last step


class RolloutEngine:
    """B slots of one request shape (frames, height, width, fps) on one generator.

    Args:
        generator: the :class:`~cosmos3_gym.generator.Cosmos3Generator` to run.
        num_slots: B.
        num_frames, height, width, fps: the request shape (pixels), shared by all slots.
        grid: the default :class:`~cosmos3_gym.schedule.SigmaGrid` of an episode.
        kind: ``"sde"``, ``"cps"`` or ``"ode"`` (see :mod:`cosmos3_gym.sde`).
        max_prompt_tokens: token budget of a tokenized prompt (templates included).
    """

    def __init__(self, generator: Cosmos3Generator, num_slots: int, *, num_frames: int, height: int, width: int,
                 fps: float, grid: SigmaGrid, kind: str = "sde", max_prompt_tokens: int = 1024):
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} is not supported; choose one of {KINDS}")
        if num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}")
        self.generator = generator
        self.device = generator.device
        self.num_slots = num_slots
        self.num_frames, self.height, self.width, self.fps = num_frames, height, width, float(fps)
        self.latent_shape = generator.latent_shape(num_frames, height, width)
        self.grid = grid
        self.kind = kind
        self.max_prompt_tokens = max_prompt_tokens
        self.weights_version = 0
        n, shape = grid.num_steps, self.latent_shape
        self.rngs = [torch.Generator(device=self.device) for _ in range(num_slots)]
        self.latents = torch.zeros((num_slots, *shape), device=self.device)
        self.x0_pred = torch.zeros_like(self.latents)
        self.steps = [0] * num_slots
        self.seeds: list[int | None] = [None] * num_slots
        self.prompts = [""] * num_slots
        self.negative_prompts = [""] * num_slots
        self.cond_ids: list[tuple[int, ...]] = [()] * num_slots
        self.uncond_ids: list[tuple[int, ...]] = [()] * num_slots
        self.sigmas = grid.sigmas.to(self.device).repeat(num_slots, 1)
        self.timesteps = grid.timesteps.to(self.device).repeat(num_slots, 1)
        self.history = {
            "latents": torch.zeros((num_slots, n + 1, *shape), device=self.device),
            "noises": torch.zeros((num_slots, n, *shape), device=self.device),
            "log_probs": torch.full((num_slots, n), float("nan"), device=self.device),
            "log_prob_sums": torch.full((num_slots, n), float("nan"), device=self.device),
            "guidance_scales": torch.zeros((num_slots, n), device=self.device),
            "noise_levels": torch.zeros((num_slots, n), device=self.device),
        }
        self._packed_cache: dict = {}

    @property
    def num_steps(self) -> int:
        return self.sigmas.shape[1] - 1

    # --- episodes -------------------------------------------------------------------
    def reset_slots(self, slots: list[int], seeds: list[int], prompts: list[str], negative_prompts: list[str],
                    grid: SigmaGrid | None = None) -> None:
        """Start a new episode in each of ``slots``: seed, tokenize, draw the initial latent."""
        grid = grid or self.grid
        if grid.num_steps != self.num_steps:
            raise ValueError(f"grid has {grid.num_steps} steps; this engine runs {self.num_steps}")
        tokens = []
        for name, texts in (("prompt", prompts), ("negative_prompt", negative_prompts)):
            for text in texts:
                if not isinstance(text, str):
                    raise ValueError(f"{name} must be a str, got {type(text).__name__}: {text!r}")
        for prompt, negative in zip(prompts, negative_prompts, strict=True):
            cond, uncond = self.generator.tokenize(prompt, negative, self.num_frames, self.height, self.width, self.fps)
            for name, text, ids in (("prompt", prompt, cond), ("negative_prompt", negative, uncond)):
                if len(ids) > self.max_prompt_tokens:
                    raise ValueError(f"{name} {text[:40]!r}... is {len(ids)} tokens with its templates; "
                                     f"the budget is max_prompt_tokens={self.max_prompt_tokens}")
            tokens.append((tuple(cond), tuple(uncond)))
        for slot, seed, prompt, negative, (cond, uncond) in zip(slots, seeds, prompts, negative_prompts, tokens,
                                                                  strict=True):
            self.rngs[slot].manual_seed(int(seed))
            # Drawn exactly as Cosmos3OmniPipeline.prepare_latents draws x(sigma_0) from its generator.
            noise = torch.randn((1, *self.latent_shape), generator=self.rngs[slot], device=self.device)
            self.latents[slot] = noise[0]
            self.x0_pred[slot] = noise[0]
            self.steps[slot] = 0
            self.seeds[slot] = int(seed)
            self.prompts[slot], self.negative_prompts[slot] = prompt, negative
            self.cond_ids[slot], self.uncond_ids[slot] = cond, uncond
            self.sigmas[slot] = grid.sigmas.to(self.device)
            self.timesteps[slot] = grid.timesteps.to(self.device)
            for buffer in self.history.values():
                buffer[slot].zero_()
            self.history["log_probs"][slot] = float("nan")
            self.history["log_prob_sums"][slot] = float("nan")
            self.history["latents"][slot, 0] = noise[0]
        self._packed_cache.clear()

    def _pack_cfg_rows(self, requests):
        """Pack ``(cond_ids, uncond_ids, fps)`` requests as rows in the order :meth:`cfg_velocity`
        reads them back: the conditional row, then the unconditional one, per request."""
        grid = self.latent_shape[1:]
        return self.generator.pack([RowSpec(tuple(ids), *grid, fps)
                                    for cond, uncond, fps in requests for ids in (cond, uncond)])

    def _packed(self, slots: list[int]):
        key = tuple(slots)
        if key not in self._packed_cache:
            self._packed_cache = {key: self._pack_cfg_rows(
                [(self.cond_ids[slot], self.uncond_ids[slot], self.fps) for slot in slots])}
        return self._packed_cache[key]

    def cfg_velocity(self, slots: list[int], latents: torch.Tensor, timesteps: list[float],
                     guidance: torch.Tensor, packed=None) -> torch.Tensor:
        """CFG velocity ``u + g (c - u)`` in fp32 for ``latents[j]`` of slot ``slots[j]``, one forward
        (autograd as the caller set it)."""
        packed = packed or self._packed(slots)
        rows_latents = [latent.unsqueeze(0) for latent in latents for _ in range(2)]
        rows_timesteps = [t for t in timesteps for _ in range(2)]
        velocities = self.generator.forward_rows(packed, rows_latents, rows_timesteps)
        cond, uncond = torch.stack(velocities[0::2]), torch.stack(velocities[1::2])
        g = guidance.float().to(self.device).view(-1, *([1] * (cond.ndim - 1)))
        return uncond + g * (cond - uncond)

    @torch.no_grad()
    def step(self, slots: list[int], guidance: torch.Tensor, noise_level: torch.Tensor,
             noise: torch.Tensor | None = None) -> StepResult:
        """Advance ``slots`` by one step. ``noise`` [b, C, T, H, W] overrides the slots' own draws."""
        for slot in slots:
            if self.steps[slot] >= self.num_steps:
                raise RuntimeError(f"slot {slot} has finished its episode; reset it before stepping")
        index = torch.tensor(slots, device=self.device)
        k = torch.tensor([self.steps[s] for s in slots], device=self.device)
        sigma, sigma_next = self.sigmas[index, k], self.sigmas[index, k + 1]
        timestep = self.timesteps[index, k]
        x = self.latents[index]
        guidance = guidance.float().to(self.device)
        noise_level = noise_level.float().to(self.device)
        v = self.cfg_velocity(slots, x, timestep.tolist(), guidance)
        if noise is None:
            noise = torch.stack([
                torch.randn(self.latent_shape, generator=self.rngs[s], device=self.device) for s in slots
            ])
        out = sde_step(v, x, sigma, sigma_next, kind=self.kind, noise_level=noise_level,
                       sigma_max=self.sigmas[index, 1], noise=noise.to(self.device))
        finite = torch.isfinite(out.next_sample).flatten(1).all(dim=1)
        self.latents[index] = out.next_sample
        self.x0_pred[index] = x - sigma.view(-1, 1, 1, 1, 1) * v
        h = self.history
        h["latents"][index, k + 1] = out.next_sample
        h["noises"][index, k] = noise.float().to(self.device)
        h["log_probs"][index, k] = out.log_prob
        h["log_prob_sums"][index, k] = out.log_prob_sum
        h["guidance_scales"][index, k] = guidance
        h["noise_levels"][index, k] = noise_level
        for slot in slots:
            self.steps[slot] += 1
        done = torch.tensor([self.steps[s] >= self.num_steps for s in slots], device=self.device)
        return StepResult(slots, out.next_sample, out.log_prob, out.log_prob_sum, sigma, sigma_next, timestep,
                          finite, done | ~finite)

    def decode(self, slots: list[int], x0: bool = False) -> np.ndarray:
        """uint8 frames ``[b, F, H, W, 3]`` of the slots' current latents (or x0-predictions)."""
        source = self.x0_pred if x0 else self.latents
        return self.generator.decode(source[torch.tensor(slots, device=self.device)])

    def trajectory(self, slot: int) -> Trajectory:
        """The episode of ``slot`` so far (the full trajectory once it has taken its last step)."""
        k = self.steps[slot]
        h = {name: buffer[slot].detach().cpu().clone() for name, buffer in self.history.items()}
        return Trajectory(
            latents=h["latents"][: k + 1], log_probs=h["log_probs"][:k], log_prob_sums=h["log_prob_sums"][:k],
            sigmas=self.sigmas[slot].cpu().clone(), timesteps=self.timesteps[slot].cpu().clone(),
            guidance_scales=h["guidance_scales"][:k], noise_levels=h["noise_levels"][:k], noises=h["noises"][:k],
            seed=self.seeds[slot], prompt=self.prompts[slot], negative_prompt=self.negative_prompts[slot],
            cond_ids=list(self.cond_ids[slot]), uncond_ids=list(self.uncond_ids[slot]), kind=self.kind,
            num_frames=self.num_frames, height=self.height, width=self.width, fps=self.fps,
            weights_version=self.weights_version,
        )

    # --- state ----------------------------------------------------------------------
    _SLOT_LISTS = ("steps", "seeds", "prompts", "negative_prompts", "cond_ids", "uncond_ids")
    _SLOT_TENSORS = ("latents", "x0_pred", "sigmas", "timesteps")

    def get_state(self) -> dict:
        """A deep copy of every slot's episode (latents, generator states, step, grid, tokens, history)."""
        state = {name: copy.deepcopy(getattr(self, name)) for name in self._SLOT_LISTS}
        state.update({name: getattr(self, name).clone() for name in self._SLOT_TENSORS})
        state["history"] = {name: buffer.clone() for name, buffer in self.history.items()}
        state["rng_states"] = [rng.get_state() for rng in self.rngs]
        state["weights_version"] = self.weights_version
        return state

    def set_state(self, state: dict) -> None:
        """Restore a :meth:`get_state` snapshot exactly."""
        if len(state["rng_states"]) != self.num_slots:
            raise ValueError(f"state holds {len(state['rng_states'])} slots; this engine has {self.num_slots}")
        for name in self._SLOT_LISTS:
            setattr(self, name, copy.deepcopy(state[name]))
        for name in self._SLOT_TENSORS:
            getattr(self, name).copy_(state[name])
        for name, buffer in self.history.items():
            buffer.copy_(state["history"][name])
        for rng, rng_state in zip(self.rngs, state["rng_states"]):
            rng.set_state(rng_state)
        self._packed_cache.clear()

    def fork(self, src: int, dst: list[int], seeds: list[int | None]) -> None:
        """Copy slot ``src``'s whole episode into ``dst``; reseed child ``j`` with ``seeds[j]``
        (``None`` keeps the parent's generator state, so that child reproduces the parent)."""
        for slot, seed in zip(dst, seeds, strict=True):
            for name in self._SLOT_LISTS:
                getattr(self, name)[slot] = copy.deepcopy(getattr(self, name)[src])
            for name in self._SLOT_TENSORS:
                getattr(self, name)[slot] = getattr(self, name)[src]
            for buffer in self.history.values():
                buffer[slot] = buffer[src]
            self.rngs[slot].set_state(self.rngs[src].get_state())
            if seed is not None:
                self.rngs[slot].manual_seed(int(seed))
                self.seeds[slot] = int(seed)
        self._packed_cache.clear()

    # --- training hooks -------------------------------------------------------------
    def replay_log_probs(self, trajectories: Trajectory | list[Trajectory]) -> torch.Tensor:
        """Recompute the log-prob (mean convention) of every stored step with the current weights.

        Each step's CFG velocity is recomputed from the stored latent, timestep, guidance and
        tokens, and the stored next latent is scored with the same :func:`sde_step`. A list of
        trajectories is replayed the way a vector env rolled them out: step ``k`` of all of
        them in one forward, rows in list order, text keys/values cached after step 0. Passing
        the trajectories of one vector-env episode in env order therefore repeats the rollout's
        computation exactly (bit for bit, in bf16 too); other groupings agree up to the
        model dtype's rounding. Returns ``[N]`` for one trajectory, ``[B, N]`` for a list.

        Autograd is as the caller set it: a trainer holding its own engine over its own
        (trainable) generator gets log-probs it can differentiate (``torch.enable_grad()``).
        """
        batch = [trajectories] if isinstance(trajectories, Trajectory) else list(trajectories)
        n = batch[0].num_steps
        if any(t.num_steps != n for t in batch):
            raise ValueError(f"trajectories hold {[t.num_steps for t in batch]} steps; replay them in groups of "
                             f"equal length")
        kinds = {t.kind for t in batch}
        if len(kinds) != 1:
            raise ValueError(f"trajectories mix SDE kinds {sorted(kinds)}; replay each kind separately")
        kind = kinds.pop()
        packed = self._pack_cfg_rows([(t.cond_ids, t.uncond_ids, t.fps) for t in batch])
        latents = torch.stack([t.latents for t in batch]).to(self.device)  # [B, N+1, ...]
        sigmas = torch.stack([t.sigmas for t in batch]).to(self.device)
        timesteps = torch.stack([t.timesteps for t in batch])
        out = []
        for k in range(n):
            guidance = torch.stack([t.guidance_scales[k] for t in batch])
            v = self.cfg_velocity([], latents[:, k], timesteps[:, k].tolist(), guidance, packed=packed)
            replay = sde_step(v, latents[:, k], sigmas[:, k], sigmas[:, k + 1], kind=kind,
                              noise_level=torch.stack([t.noise_levels[k] for t in batch]).to(self.device),
                              sigma_max=sigmas[:, 1], next_sample=latents[:, k + 1])
            out.append(replay.log_prob)
        out = torch.stack(out, dim=1)
        return out[0] if isinstance(trajectories, Trajectory) else out

    def update_weights(self, weights) -> int:
        """Load new transformer weights (a state dict, or ``(name, tensor)`` pairs from a trainer).

        Every name, shape and dtype is checked before anything changes: a bad update raises
        ``ValueError`` naming the offending tensor and leaves the model as it was. Tensors may
        live on another device or require grad. Returns the new ``weights_version``.
        """
        updates = dict(weights.items() if hasattr(weights, "items") else weights)
        current = self.generator.transformer.state_dict()
        if not updates:
            raise ValueError("update_weights got no tensors")
        for name, tensor in updates.items():
            if name not in current:
                close = [k for k in current if k.split(".")[-1] == name.split(".")[-1]][:3]
                raise ValueError(f"update_weights: unknown tensor {name!r}; names are the transformer's "
                                 f"state_dict keys (e.g. {close or list(current)[:3]})")
            if not isinstance(tensor, torch.Tensor):
                raise ValueError(f"update_weights: {name!r} is a {type(tensor).__name__}, not a torch.Tensor")
            if tuple(tensor.shape) != tuple(current[name].shape):
                raise ValueError(f"update_weights: {name!r} has shape {tuple(tensor.shape)}; "
                                 f"expected {tuple(current[name].shape)}")
            if tensor.dtype != current[name].dtype:
                raise ValueError(f"update_weights: {name!r} has dtype {tensor.dtype}; expected {current[name].dtype}")
        with torch.no_grad():
            for name, tensor in updates.items():
                current[name].copy_(tensor.detach())
        self.weights_version += 1
        self._packed_cache.clear()  # cached text keys/values belong to the old weights
        return self.weights_version
