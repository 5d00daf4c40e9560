"""Cosmos3Model: the diffusers components of a Cosmos 3 checkpoint, resident on one device.

It answers three questions for the rollout engine: which tokens a prompt becomes (exactly
``Cosmos3OmniPipeline.tokenize_prompt``), what velocity the transformer predicts for a
batch of rows (one forward for all of them), and what video a latent decodes to. It also
owns its weights: :meth:`Cosmos3Model.update_weights` and ``weights_version`` live here, so
every env sharing one model reports the same version.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from .attention import install_processors
from .checkpoint import check_checkpoint, component_config, load_component, naming_component, read_json
from .conditions import ConditionEncoding
from .diffusers_private import action_heads_without_host_checks, quiet_legacy_weight_norm, sound_hop_size
from .graphs import ForwardGraph
from .interrupts import installing
from .packing import ATTENTION_BACKENDS, PackedRows, RowSpec
from . import vae_layers
from .tiny_model import TINY_CHECKPOINT
from .weights import merged_lora_weights, staged_update



def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def checked_device(device, *, name: str = "device", cpu_hint: str = "device='cpu'") -> torch.device:
    """``device`` (None: :func:`default_device`) as a ``torch.device``; ``ValueError``, naming it
    as ``name``, for one this torch cannot use, before anything loads onto it."""
    if device is None:
        return default_device()
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{name}: {device!r} is not a torch device; use cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}: {device!r} was requested but no CUDA device is available "
                         f"(torch.cuda.is_available() is False); use {cpu_hint}")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(f"{name}: {device!r}: there are only {torch.cuda.device_count()} CUDA device(s); "
                         f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return resolved


def default_dtype(device) -> torch.dtype:
    """fp32 on the CPU, bf16 on an accelerator."""
    return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16


def compiles_by_default(device: torch.device, transformer_config) -> bool:
    """Whether the vision pathway's norms and MLPs are compiled unless asked otherwise:
    torch.compile fuses their elementwise work (a third of an uncompiled bf16 Edge forward),
    worth its warm-up on an accelerator at real head sizes, not on the CPU or for toy models."""
    return torch.device(device).type != "cpu" and transformer_config.head_dim >= 64


def checked_cuda_graphs(cuda_graphs: bool | None, device: torch.device) -> bool:
    """``cuda_graphs`` (None: off) as a bool; ``ValueError`` for graphs off CUDA.

    Opt-in: on an H100 a graphed Edge forward took 460.0 ms against 460.3 eager (text-to-video) and
    1-2 % less in the action modes, while its private memory pool held 10 GiB more at Nano size,
    which then no longer fit the card (``BENCHMARKS.md``)."""
    if cuda_graphs is None:
        return False
    if not isinstance(cuda_graphs, bool):
        raise ValueError(f"cuda_graphs={cuda_graphs!r} is not a bool; pass True, False or None")
    if cuda_graphs and device.type != "cuda":
        raise ValueError(f"cuda_graphs=True needs a CUDA device, not {device}; pass cuda_graphs=False or None")
    return bool(cuda_graphs)


class Cosmos3Model(ConditionEncoding):
    """Transformer, VAE, tokenizer and scheduler config of one checkpoint on one device.

    Load with :meth:`from_pretrained` (a local diffusers-layout directory, safetensors
    only) or :meth:`embedded` (the tiny model shipped with the package).
    The components are held by a ``Cosmos3OmniPipeline`` (``self.pipeline``), whose prompt
    templates and token handling are reused verbatim; the transformer's attention
    processor is replaced by :class:`~cosmos3_gym.model.attention.PackedRowsAttnProcessor` so that
    many rows share one forward without seeing each other. ``cuda_graphs=True`` (CUDA only)
    replays each packing's forwards after the first over its cached text from a CUDA graph
    (:mod:`cosmos3_gym.model.graphs`; the eager forward's numbers bit for bit).
    """

    def __init__(self, pipeline, device, dtype, attention: str = "auto", compile: bool | None = None,
                 cuda_graphs: bool | None = None):
        self.pipeline = pipeline
        self.device = _with_index(torch.device(device))
        self.dtype = dtype
        self.transformer = pipeline.transformer
        # SDPA over runs of equal rows everywhere (on Hopper it takes cuDNN's flash kernel, faster
        # than FlexAttention's block-sparse one: 464 against 491 ms per Edge forward); "flex" on request.
        if attention == "auto":
            attention = "sdpa"
        if attention not in ATTENTION_BACKENDS:
            raise ValueError(f"attention={attention!r} is not supported; choose 'auto' or one of {ATTENTION_BACKENDS}")
        self.attention = attention
        self.compile = compiles_by_default(self.device, self.transformer.config) if compile is None else compile
        # Opt-in: mid-episode forwards replay a CUDA graph captured at the packing's first cached forward.
        self.cuda_graphs = checked_cuda_graphs(cuda_graphs, self.device)
        self.vae = pipeline.vae
        self.tokenizer = pipeline.text_tokenizer
        self.scheduler = pipeline.scheduler
        self.sound_tokenizer = pipeline.sound_tokenizer
        self.install_processors()
        self.transformer.requires_grad_(False).eval()
        self.vae.requires_grad_(False).eval()
        if self.sound_tokenizer is not None:
            _fold_weight_norm(self.sound_tokenizer)
            self.sound_tokenizer.requires_grad_(False).eval()
        self.weights_version = 0
        self.checkpoint_path: Path | None = None  # the folder from_pretrained read (None: built in memory)
        self._conditions: OrderedDict = OrderedDict()  # encoded conditions by input digest (LRU)
        self._owner: int | None = None  # the thread inside a forward, an encode, a decode or an update
        self._depth = 0  # how deeply that thread's calls nest
        self._guard = threading.Lock()

    @classmethod
    def from_components(cls, transformer, vae, tokenizer, scheduler, device=None, dtype=None,
                        attention: str = "auto", compile: bool | None = None, sound_tokenizer=None,
                        cuda_graphs: bool | None = None, **pipeline_config) -> "Cosmos3Model":
        """Wrap in-memory diffusers components, moved to ``device`` and cast to ``dtype``
        (modules the model keeps in fp32, such as the time embedder, stay fp32)."""
        from diffusers import Cosmos3OmniPipeline

        device = torch.device(device) if device is not None else default_device()
        checked_cuda_graphs(cuda_graphs, device)  # before anything moves
        dtype = dtype or default_dtype(device)
        for model in (transformer, vae) + ((sound_tokenizer,) if sound_tokenizer is not None else ()):
            model.to(device=device)
            if model.dtype == dtype:
                continue
            model.to(dtype=dtype)
            keep = getattr(model, "_keep_in_fp32_modules", None) or []
            for name, module in model.named_modules():
                if any(part in keep for part in name.split(".")):
                    module.float()
        pipeline = Cosmos3OmniPipeline(transformer=transformer, text_tokenizer=tokenizer, vae=vae,
                                       scheduler=scheduler, sound_tokenizer=sound_tokenizer,
                                       enable_safety_checker=False, **pipeline_config)
        return cls(pipeline, device, dtype, attention, compile, cuda_graphs)

    @classmethod
    def from_pretrained(cls, path: str | Path, device=None, dtype=None, attention: str = "auto",
                        compile: bool | None = None, cuda_graphs: bool | None = None) -> "Cosmos3Model":
        """Load a local diffusers-layout checkpoint without running any code it ships.

        :func:`check_checkpoint` vets it first; then only allow-listed classes are built,
        weights come from safetensors, the scheduler from its JSON config alone and the
        tokenizer with ``trust_remote_code=False``.
        """
        import diffusers
        from diffusers import AutoencoderKLWan, Cosmos3AVAEAudioTokenizer, Cosmos3OmniTransformer
        from transformers import AutoTokenizer

        path = check_checkpoint(path)
        device = checked_device(device)
        checked_cuda_graphs(cuda_graphs, device)  # before anything loads
        dtype = dtype or default_dtype(device)
        transformer = load_component(Cosmos3OmniTransformer, path, "transformer", dtype)
        vae = load_component(AutoencoderKLWan, path, "vae", dtype)
        sound_tokenizer = None
        if (path / "sound_tokenizer").is_dir():
            with quiet_legacy_weight_norm():
                sound_tokenizer = load_component(Cosmos3AVAEAudioTokenizer, path, "sound_tokenizer", dtype)
        with naming_component(path, "text_tokenizer"):
            tokenizer = AutoTokenizer.from_pretrained(path / "text_tokenizer", trust_remote_code=False)
        scheduler_config = component_config(path, "scheduler")
        scheduler = getattr(diffusers, scheduler_config["_class_name"]).from_config(scheduler_config)
        index_file = path / "model_index.json"
        index = read_json(index_file, "model_index.json") if index_file.is_file() else {}
        model = cls.from_components(
            transformer, vae, tokenizer, scheduler, device, dtype, attention, compile, sound_tokenizer, cuda_graphs,
            default_use_system_prompt=index.get("default_use_system_prompt", True),
            use_native_flow_schedule=index.get("use_native_flow_schedule", False),
        )
        model.checkpoint_path = path.resolve()
        return model

    @classmethod
    def embedded(cls, device=None, dtype=None, cuda_graphs: bool | None = None) -> "Cosmos3Model":
        """The tiny model shipped in the package, trained on the procedural world (:mod:`cosmos3_gym.model.tiny_model`)."""
        return cls.from_pretrained(TINY_CHECKPOINT, device=device, dtype=dtype, cuda_graphs=cuda_graphs)

    def install_processors(self) -> None:
        """(Re)install the row-isolating attention processors on the transformer, and the VAE's layers
        that make fewer memory passes (the same numbers; the norms' elementwise work fused where the
        model compiles, on CUDA)."""
        self.context = install_processors(self.transformer, compile=self.compile)
        vae_layers.install(self.vae, fuse_norms=self.compile and self.device.type == "cuda")

    # --- geometry -------------------------------------------------------------------
    @property
    def temporal_compression(self) -> int:
        return int(self.vae.config.scale_factor_temporal)

    @property
    def spatial_compression(self) -> int:
        return int(self.vae.config.scale_factor_spatial)

    def latent_shape(self, num_frames: int, height: int, width: int) -> tuple[int, int, int, int]:
        """``(C, T, H, W)`` of the latent for a video of this size (``num_frames = 1``: an image)."""
        st, ss = self.temporal_compression, self.spatial_compression
        if num_frames < 1 or (num_frames - 1) % st:
            raise ValueError(f"num_frames={num_frames} is not allowed: use 1 (an image) or 1 + a multiple of {st}")
        for name, value in (("height", height), ("width", width)):
            if value < ss or value % ss:
                raise ValueError(f"{name}={value} is not allowed: use a positive multiple of {ss}")
        return (int(self.vae.config.z_dim), (num_frames - 1) // st + 1, height // ss, width // ss)

    # --- text -----------------------------------------------------------------------
    def tokenize(self, prompt: str, negative_prompt: str, num_frames: int, height: int, width: int, fps: float,
                 action_mode: str | None = None, view_point: str | None = None):
        """``(cond_ids, uncond_ids)`` exactly as ``Cosmos3OmniPipeline.tokenize_prompt`` builds them
        (for an action request: the structured action caption, sized by the conditioning canvas)."""
        return self.pipeline.tokenize_prompt(
            prompt, negative_prompt, num_frames=num_frames, height=height, width=width, fps=fps,
            action_mode=action_mode, action_view_point=view_point if action_mode else None,
        )

    # --- sound ----------------------------------------------------------------------
    def sound_frames(self, num_frames: int, fps: float) -> int:
        """The sound latent's length for a video of ``num_frames`` at ``fps`` (the pipeline's count)."""
        samples = int(num_frames / fps * self.sound_tokenizer.config.sampling_rate)
        hop = sound_hop_size(self.sound_tokenizer)
        return (samples + hop - 1) // hop

    @torch.no_grad()
    def decode_sound(self, latents: torch.Tensor) -> np.ndarray:
        """Sound latents ``[B, C, T]`` -> float32 waveforms ``[B, channels, samples]`` in [-1, 1]."""
        decoder_dtype = next(self.sound_tokenizer.parameters()).dtype
        with self.exclusive("decode_sound"):
            return self.sound_tokenizer.decode(latents.to(device=self.device, dtype=decoder_dtype)).float().cpu().numpy()

    # --- model ----------------------------------------------------------------------
    def pack(self, rows: list[RowSpec]) -> PackedRows:
        return PackedRows(rows, self.transformer.config, self.temporal_compression, self.device, self.attention)

    def __getstate__(self):  # copy.deepcopy: a copy gets its own guard, and no owner
        return {k: v for k, v in self.__dict__.items() if k not in ("_guard", "_owner", "_depth")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._owner, self._depth, self._guard = None, 0, threading.Lock()

    @contextmanager
    def exclusive(self, what: str):
        """Hold the model for one call; a second thread using it meanwhile gets a clear error.

        Every call that touches the model's modules or its caches holds it: a forward (the attention
        processors share per-forward state, so two forwards at once would mix their rows), a VAE
        encode or decode (the causal VAE keeps a per-call feature cache on its modules), a weight
        update. Re-entrant within one thread. Use one model per thread (or per process) to run envs
        concurrently.
        """
        me = threading.get_ident()
        with self._guard:
            if self._owner not in (None, me):
                raise RuntimeError(f"{what}: this Cosmos3Model is in use by another thread; an engine (and the model "
                                   f"it shares) is used from one thread at a time: give each thread its own model")
            # Same thread: only the nesting depth counts, so an owner left behind by a call cut short
            # never blocks the next one.
            self._owner, self._depth = me, self._depth + 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth:
                self._owner = None

    @torch.no_grad()
    def velocity(self, packed: PackedRows, latents: dict[str, list[torch.Tensor]], timesteps: list[float]
                 ) -> list[dict[str, torch.Tensor]]:
        """One transformer forward for all rows; returns each row's velocity per stream in fp32
        (``"video"`` ``[C, T, H, W]``, and ``"sound"`` ``[C, T]`` / ``"action"`` ``[chunk, action_dim]``
        where the rows have them; zero on clean conditioning).

        The first forward over ``packed`` computes the text tokens and caches their keys and
        values (tagged with ``weights_version``); later forwards over the same ``packed`` and
        the same weights compute the vision tokens only.
        """
        return self.forward_rows(packed, latents, timesteps)

    def forward_rows(self, packed: PackedRows, latents: dict[str, list[torch.Tensor]], timesteps: list[float]
                     ) -> list[dict[str, torch.Tensor]]:
        """:meth:`velocity` with autograd left as the caller set it (training, policy gradients).

        With autograd on, the text tokens are recomputed in every forward (no cache), so that
        gradients reach the text pathway from every step. The cache is published only after a
        forward succeeds: an exception (or Ctrl-C) mid-forward leaves ``packed`` as it was.
        """
        with self.exclusive("forward"):
            version = self.weights_fingerprint()
            use_cache = packed.text_cache is not None and packed.text_cache_version == version \
                and not torch.is_grad_enabled()
            building = None if use_cache else [None] * self.transformer.config.num_hidden_layers
            self.context.packed, self.context.text_cached = packed, use_cache
            self.context.new_text_cache = building
            try:
                kwargs = packed.transformer_kwargs(latents, timesteps, self.dtype, use_cache)
                if use_cache and self._graphs_on():
                    video, sound, action = self._graphed_forward(packed, kwargs, version)
                else:
                    video, sound, action = self.transformer(**kwargs)
            finally:
                self.context.packed, self.context.new_text_cache = None, None
            if building is not None and not torch.is_grad_enabled():
                packed.text_cache, packed.text_cache_version = building, version
            streams = packed.split_outputs(video, sound, action)
            return [{name: preds[j] for name, preds in streams.items()} for j in range(len(packed.rows))]

    def _graphs_on(self) -> bool:
        return self.cuda_graphs and not torch.cuda.is_current_stream_capturing()

    def _graphed_forward(self, packed: PackedRows, kwargs: dict, version: tuple):
        """The transformer forward through ``packed``'s CUDA graph: replayed where one was captured
        against these weights, these processors and this text cache, else captured now (its eager
        warm-up is this forward's result) and published on ``packed`` once the capture succeeded."""
        key = (version, self.context, tuple(p.data_ptr() for p in self.transformer.parameters()))
        graph = packed.forward_graph
        if graph is not None and graph.key == key and graph.fits(kwargs):
            return graph.replay(kwargs)
        packed.forward_graph = None  # stale: never replayed again; its memory goes before a new capture takes more
        with action_heads_without_host_checks(self.transformer):  # the packing's domain ids are valid
            graph, outputs = ForwardGraph.capture(lambda **inputs: self.transformer(**inputs), kwargs, key)
        packed.forward_graph = graph
        return outputs

    # --- weights --------------------------------------------------------------------
    def update_weights(self, weights) -> int:
        """Load new transformer weights from a trainer, all or nothing; returns the new version.

        ``weights``: a state dict, ``(name, tensor)`` pairs (e.g. ``named_parameters()``), or a
        ``peft.PeftModel`` over a copy of this transformer (LoRA, DoRA, ...: merged by peft's own
        ``merge_and_unload`` on a copy, every weight sent). Names are the transformer's ``state_dict`` keys.
        Floating tensors are cast to the rollout dtype (an fp32 trainer feeding a bf16
        rollout is the normal case) and may live on any device. Unknown names, wrong shapes,
        non-floating, sparse or non-finite tensors raise ``ValueError`` before anything
        changes; if copying fails (or is interrupted) midway, the old weights are restored.
        ``weights_version`` increases by one; cached text keys/values of older versions are
        not used again.
        """
        # Once the copy begins, a Ctrl-C is held until the new version is returned (through the model's
        # release too): it then says that the update took effect, never leaving a caller to apply it twice.
        with installing("update_weights") as section, self.exclusive("update_weights"):
            updates = merged_lora_weights(weights, self.transformer) if _is_peft_model(weights) else weights
            section.hold()  # the weights and their version change together
            staged_update(self.transformer, updates)
            self.weights_version += 1
            return self.weights_version

    def weights_fingerprint(self) -> tuple:
        """``weights_version`` plus torch's in-place write counters of every transformer parameter:
        it changes whenever a weight changes, through :meth:`update_weights` or behind its back
        (``load_state_dict``, an optimizer step on this model), so cached text keys/values computed
        with other weights are never reused."""
        return (self.weights_version, tuple(p._version for p in self.transformer.parameters()))

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """Latents ``[B, C, T, H, W]`` -> uint8 frames ``[B, F, H, W, 3]`` (the pipeline's VAE path)."""
        dtype = self.vae.dtype
        mean = torch.tensor(self.vae.config.latents_mean, dtype=dtype).to(self.device).view(1, -1, 1, 1, 1)
        inv_std = (1.0 / torch.tensor(self.vae.config.latents_std, dtype=dtype)).to(self.device).view(1, -1, 1, 1, 1)
        z = latents.to(device=self.device, dtype=dtype) / inv_std + mean
        with self.exclusive("decode"):
            video = self.vae.decode(z).sample.float()
        # Scaled and rounded where the video is (a GPU's), then copied as uint8: a quarter of the bytes, and
        # no numpy passes over float frames (16 x 17 frames at 256x256 on a 2-core CPU: 0.9 s against 4.4).
        frames = self.pipeline.video_processor.postprocess_video(video, output_type="pt")  # [B, F, 3, H, W]
        return (frames * 255.0).round().to(torch.uint8).permute(0, 1, 3, 4, 2).contiguous().cpu().numpy()


def _fold_weight_norm(module: torch.nn.Module) -> None:
    """Fold ``weight_norm`` (the AVAE decoder's convolutions) into plain weights: the same weights,
    computed once instead of at every call, and a model that ``copy.deepcopy`` can copy."""
    from torch.nn.utils import remove_weight_norm
    from torch.nn.utils.weight_norm import WeightNorm

    for child in module.modules():
        if any(isinstance(hook, WeightNorm) for hook in child._forward_pre_hooks.values()):
            remove_weight_norm(child)


def _is_peft_model(weights) -> bool:
    return isinstance(weights, torch.nn.Module) and hasattr(weights, "peft_config")


def _with_index(device: torch.device) -> torch.device:
    """``cuda`` as ``cuda:<current>``, so that it compares equal to the device of tensors placed there."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
