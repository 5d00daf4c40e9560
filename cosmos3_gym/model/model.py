"""Cosmos3Model: the diffusers components of a Cosmos 3 checkpoint, resident on one device.

It answers three questions for the rollout engine: which tokens a prompt becomes (exactly
``Cosmos3OmniPipeline.tokenize_prompt``), what velocity the transformer predicts for a
batch of rows (one forward for all of them), and what video a latent decodes to. It also
owns its weights: :meth:`Cosmos3Model.update_weights` and ``weights_version`` live here, so
every env sharing one model reports the same version.
"""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .interrupts import deferred_interrupts
from .packing import ATTENTION_BACKENDS, PackedRows, RowSpec, install_processors
from .tiny_model import TINY_CHECKPOINT
from .weights import merged_lora_weights, staged_update

COMPONENTS = {
    "transformer": "transformer/config.json and its *.safetensors weights",
    "vae": "vae/config.json and its *.safetensors weights",
    "text_tokenizer": "text_tokenizer/ (tokenizer files)",
    "scheduler": "scheduler/scheduler_config.json",
    "sound_tokenizer": "sound_tokenizer/config.json and its *.safetensors weights (optional: sound generation)",
}
CONFIG_FILES = {"transformer": "config.json", "vae": "config.json", "scheduler": "scheduler_config.json",
                "sound_tokenizer": "config.json"}
# The classes a checkpoint may name. A config is data, but its ``_class_name`` picks whose loader runs:
# resolving it by name would let a checkpoint point a model loader at a folder holding a pickle.
ALLOWED_CLASSES = {
    "transformer": ("Cosmos3OmniTransformer",),
    "vae": ("AutoencoderKLWan",),
    "sound_tokenizer": ("Cosmos3AVAEAudioTokenizer",),
    # Cosmos3OmniPipeline serves UniPC; FlowMatchEuler runs the same flow-matching sigmas.
    "scheduler": ("UniPCMultistepScheduler", "FlowMatchEulerDiscreteScheduler"),
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")  # torch.load / pickle formats: never read
CONDITION_CACHE_SIZE = 256


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


def unit_frames(frames) -> list[np.ndarray]:
    """uint8 frames ``[H, W, 3]`` as the float32 arrays in [0, 1] that diffusers' video processor
    takes (it reads numpy frames as [0, 1] floats: uint8 ones would come out 255 times too bright)."""
    return [np.asarray(frame, dtype=np.float32) / 255.0 for frame in frames]


def _json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{what}: {path} is not valid JSON ({e}); restore it from the original checkpoint") from e
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {path} must hold a JSON object")
    return data


def component_config(path: Path, name: str) -> dict:
    """The config of component ``name``, refused unless it names one of :data:`ALLOWED_CLASSES`."""
    file = path / name / CONFIG_FILES[name]
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component {name!r}: expected {COMPONENTS[name]}")
    config = _json(file, f"checkpoint component {name!r}")
    cls = config.get("_class_name")
    if cls not in ALLOWED_CLASSES[name]:
        raise ValueError(f"checkpoint component {name!r} names class {cls!r:.80} in {name}/{CONFIG_FILES[name]}; "
                         f"allowed: {', '.join(ALLOWED_CLASSES[name])}. Only these are loaded, so a config cannot "
                         f"send another class's loader to its files; set _class_name to one of them")
    return config


def _check_weights(path: Path, name: str) -> None:
    """Safetensors only: a ``.bin``/``.pt``/... weight file is a pickle, and unpickling runs code."""
    folder = path / name
    if not list(folder.glob("*.safetensors")):
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES) if folder.is_dir() else []
        found = (f"; its pickle weights {pickles[:5]} are refused (unpickling can run code): convert them once, "
                 f"in a process you trust, with save_pretrained(..., safe_serialization=True)") if pickles else ""
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component {name!r}: expected "
                                f"{COMPONENTS[name]} (only safetensors weights are accepted){found}")
    for index in folder.glob("*.index.json"):  # diffusers loads every shard an index names, pickles included
        shards = _json(index, f"checkpoint component {name!r}").get("weight_map")
        shards = shards.values() if isinstance(shards, dict) else [shards]
        bad = sorted({str(s)[:80] for s in shards if not str(s).endswith(".safetensors")})
        if bad:
            raise ValueError(f"checkpoint component {name!r}: {index.name} names non-safetensors shards {bad[:5]}; "
                             f"only *.safetensors shards are accepted: convert them with "
                             f"save_pretrained(..., safe_serialization=True)")


@contextmanager
def _naming_component(path: Path, name: str):
    """A component that passed :func:`check_checkpoint` but does not load (a truncated weight
    file, a tokenizer file that is not JSON) raises ``ValueError`` naming the checkpoint and it."""
    try:
        yield
    except (OSError, ValueError) as error:  # not RuntimeError: out of memory is no fault of the files
        raise ValueError(f"checkpoint={str(path)!r}: component {name!r} does not load ({type(error).__name__}: "
                         f"{str(error)[:300]}); restore it from the original checkpoint") from error


def load_component(cls, path: Path, name: str, dtype):
    """Component ``name`` of ``path`` as ``cls``, refused unless the weights and its config agree:
    diffusers only warns about weights the config has no place for, or places the weights lack,
    and would run a config of 2 layers on a file of 4 as half a model."""
    with _naming_component(path, name):
        module, info = cls.from_pretrained(path / name, torch_dtype=dtype, use_safetensors=True,
                                           output_loading_info=True)
    disagree = {key: sorted(map(str, info[key]))[:3] for key in ("missing_keys", "unexpected_keys", "mismatched_keys",
                                                               "error_msgs") if info.get(key)}
    if disagree:
        raise ValueError(f"checkpoint={str(path)!r}: the weights of component {name!r} do not fit its "
                         f"{CONFIG_FILES[name]} ({disagree}, at most 3 of each); use the config the weights were "
                         "saved with")
    return module


def check_checkpoint(path: str | Path) -> Path:
    """Vet a checkpoint directory before anything in it is loaded.

    ``FileNotFoundError`` names the first missing component (pickle weights count as missing:
    only safetensors are read); ``ValueError`` names a component whose config names a class
    outside :data:`ALLOWED_CLASSES`, whose shard index lists a non-safetensors file, or (the
    tokenizer) that asks for custom code.
    """
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint={str(path)!r} is not a directory; pass a local diffusers-layout "
                                f"Cosmos 3 checkpoint (with {', '.join(COMPONENTS)}) or omit it for the embedded model")
    for name in ("transformer", "vae") + (("sound_tokenizer",) if (path / "sound_tokenizer").is_dir() else ()):
        _check_weights(path, name)
        component_config(path, name)
    tokenizer = path / "text_tokenizer"
    if not tokenizer.is_dir() or not any(tokenizer.iterdir()):
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component 'text_tokenizer': "
                                f"expected {COMPONENTS['text_tokenizer']}")
    for file in ("tokenizer_config.json", "config.json"):  # AutoTokenizer reads both
        if (tokenizer / file).is_file() and "auto_map" in _json(tokenizer / file, "component 'text_tokenizer'"):
            raise ValueError(f"checkpoint component 'text_tokenizer': text_tokenizer/{file} has an 'auto_map': it asks "
                             f"to run custom code shipped with the checkpoint, which is refused; use a tokenizer class "
                             f"built into transformers (remove 'auto_map' and set 'tokenizer_class')")
    component_config(path, "scheduler")
    return path


@dataclass(frozen=True)
class Condition:
    """Clean conditioning of one request: the encoded video ``latent`` ``[C, T, H, W]`` (fp32) and
    the latent frames of it that stay clean (the rest is generated, and zero here); for an action request also
    ``action`` ``[chunk, action_dim]`` (the given actions, zero-padded, or zeros) and the action
    tokens of it that stay clean."""

    latent: torch.Tensor
    clean_frames: tuple[int, ...]
    action: torch.Tensor | None = None
    clean_actions: tuple[int, ...] = ()


ACTION_MODES = ("policy", "forward_dynamics", "inverse_dynamics")


def compiles_by_default(device: torch.device, transformer_config) -> bool:
    """Whether the vision pathway's norms and MLPs are compiled unless asked otherwise:
    torch.compile fuses their elementwise work (a third of an uncompiled bf16 Edge forward),
    worth its warm-up on an accelerator at real head sizes, not on the CPU or for toy models."""
    return torch.device(device).type != "cpu" and transformer_config.head_dim >= 64


class Cosmos3Model:
    """Transformer, VAE, tokenizer and scheduler config of one checkpoint on one device.

    Load with :meth:`from_pretrained` (a local diffusers-layout directory, safetensors
    only) or :meth:`embedded` (the tiny model shipped with the package).
    The components are held by a ``Cosmos3OmniPipeline`` (``self.pipeline``), whose prompt
    templates and token handling are reused verbatim; the transformer's attention
    processor is replaced by :class:`~cosmos3_gym.model.packing.PackedRowsAttnProcessor` so that
    many rows share one forward without seeing each other.
    """

    def __init__(self, pipeline, device, dtype, attention: str = "auto", compile: bool | None = None):
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
        self._conditions: OrderedDict = OrderedDict()  # encoded conditions by input digest (LRU)
        self._owner: int | None = None  # the thread inside a forward or an update
        self._guard = threading.Lock()

    @classmethod
    def from_components(cls, transformer, vae, tokenizer, scheduler, device=None, dtype=None,
                        attention: str = "auto", compile: bool | None = None, sound_tokenizer=None,
                        **pipeline_config) -> "Cosmos3Model":
        """Wrap in-memory diffusers components, moved to ``device`` and cast to ``dtype``
        (modules the model keeps in fp32, such as the time embedder, stay fp32)."""
        from diffusers import Cosmos3OmniPipeline

        device = torch.device(device) if device is not None else default_device()
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
        return cls(pipeline, device, dtype, attention, compile)

    @classmethod
    def from_pretrained(cls, path: str | Path, device=None, dtype=None, attention: str = "auto",
                        compile: bool | None = None) -> "Cosmos3Model":
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
        dtype = dtype or default_dtype(device)
        transformer = load_component(Cosmos3OmniTransformer, path, "transformer", dtype)
        vae = load_component(AutoencoderKLWan, path, "vae", dtype)
        sound_tokenizer = None
        if (path / "sound_tokenizer").is_dir():
            with warnings.catch_warnings():  # diffusers' decoder still calls torch's deprecated weight_norm
                warnings.filterwarnings("ignore", r"`torch\.nn\.utils\.weight_norm` is deprecated", FutureWarning)
                sound_tokenizer = load_component(Cosmos3AVAEAudioTokenizer, path, "sound_tokenizer", dtype)
        with _naming_component(path, "text_tokenizer"):
            tokenizer = AutoTokenizer.from_pretrained(path / "text_tokenizer", trust_remote_code=False)
        scheduler_config = component_config(path, "scheduler")
        scheduler = getattr(diffusers, scheduler_config["_class_name"]).from_config(scheduler_config)
        index_file = path / "model_index.json"
        index = _json(index_file, "model_index.json") if index_file.is_file() else {}
        return cls.from_components(
            transformer, vae, tokenizer, scheduler, device, dtype, attention, compile, sound_tokenizer,
            default_use_system_prompt=index.get("default_use_system_prompt", True),
            use_native_flow_schedule=index.get("use_native_flow_schedule", False),
        )

    @classmethod
    def embedded(cls, device=None, dtype=None) -> "Cosmos3Model":
        """The tiny model shipped in the package, trained on the procedural world (:mod:`cosmos3_gym.model.tiny_model`)."""
        return cls.from_pretrained(TINY_CHECKPOINT, device=device, dtype=dtype)

    def install_processors(self) -> None:
        """(Re)install the row-isolating attention processors on the transformer."""
        self.context = install_processors(self.transformer, compile=self.compile)

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

    # --- conditioning -----------------------------------------------------------------
    def _cached(self, encode, *args, **arrays) -> Condition:
        """``encode(*args, **arrays)``, remembered for the same inputs (the VAE encode of a conditioning
        canvas costs seconds on a CPU, and GRPO groups and repeated scenes ask for the same one)."""
        digest = hashlib.blake2b(repr((encode.__name__, args)).encode(), digest_size=16)
        for name, array in sorted(arrays.items()):
            if array is not None:
                array = np.ascontiguousarray(array)
                digest.update(f"{name}{array.shape}{array.dtype}".encode())
                digest.update(array.tobytes())
        key = (digest.hexdigest(), tuple(p._version for p in self.vae.parameters()))
        if key in self._conditions:
            self._conditions.move_to_end(key)
            return self._conditions[key]
        condition = encode(*args, **arrays)
        self._conditions[key] = condition
        if len(self._conditions) > CONDITION_CACHE_SIZE:
            self._conditions.popitem(last=False)
        return condition

    def forget_conditions(self) -> None:
        """Drop the remembered encodes (benchmarks that must pay every encode, memory)."""
        self._conditions.clear()

    def encode_condition(self, num_frames: int, height: int, width: int, image: np.ndarray | None = None,
                         video: np.ndarray | None = None) -> Condition:
        """:meth:`_encode_condition`, remembered for repeated inputs."""
        return self._cached(self._encode_condition, num_frames, height, width, image=image, video=video)

    def encode_action_condition(self, mode: str, chunk: int, resolution_tier: int, image: np.ndarray | None = None,
                                video: np.ndarray | None = None, actions: np.ndarray | None = None) -> Condition:
        """:meth:`_encode_action_condition`, remembered for repeated inputs."""
        return self._cached(self._encode_action_condition, mode, chunk, resolution_tier, image=image, video=video,
                            actions=actions)

    @torch.no_grad()
    def _encode_condition(self, num_frames: int, height: int, width: int, image: np.ndarray | None = None,
                          video: np.ndarray | None = None) -> Condition:
        """The clean frames of an image-to-video (``image`` uint8 ``[H, W, 3]``) or video-to-video
        (``video`` uint8 ``[F, H, W, 3]``, ``F = 1 + 4k`` frames) request, as
        ``Cosmos3OmniPipeline.prepare_latents`` builds them. Latent frame ``j`` is clean when all
        the pixel frames it encodes are given: frame 0 for an image, frames ``0 .. (F - 1) // 4``
        for a video (the pipeline's ``condition_frame_indexes_vision``). The pipeline encodes the
        given frames padded to ``num_frames`` and keeps only those latent frames: see
        :meth:`_encode_leading`."""
        from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _preprocess_conditioning_image

        pipe, dtype = self.pipeline, self.vae.dtype
        if image is not None:
            frames = _preprocess_conditioning_image(image, height=height, width=width).to(self.device, dtype)
            frames = frames.unsqueeze(2)
        else:
            frames = pipe.video_processor.preprocess_video(unit_frames(video), height=height, width=width)
            frames = frames.to(self.device, dtype)
        latent, clean = self._encode_leading(frames, num_frames)
        return Condition(latent=latent, clean_frames=clean)

    def _encode_leading(self, frames: torch.Tensor, num_frames: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        """The latent ``[C, T, H, W]`` of a clip whose first ``F = frames.shape[2]`` frames are given,
        and its clean latent frames ``0 .. (F - 1) // 4``; the other latent frames are zero (they are
        generated: ``m * x0 + (1 - m) * noise`` never reads them). The VAE is causal in time (its
        first chunk is the first frame alone, then chunks of 4 with a cache of the past), so these
        latent frames are bit for bit those of the whole padded clip the pipeline encodes, at a
        fraction of the cost."""
        return self._padded(self.pipeline._encode_video(frames).float()[0], num_frames)

    def _padded(self, latent: torch.Tensor, num_frames: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        """The encoded leading latent frames ``[C, t, H, W]`` zero-padded to ``num_frames``' latent
        length, and the indices of the encoded (clean) ones."""
        clean = tuple(range(latent.shape[1]))
        total = (num_frames - 1) // self.temporal_compression + 1
        padded = latent.new_zeros((latent.shape[0], total, *latent.shape[2:]))
        padded[:, : len(clean)] = latent[:, :total]
        return padded, clean[:total]

    @torch.no_grad()
    def encode_action_clips(self, clips, resolution_tier: int, num_frames: int, given: int | None = None
                            ) -> torch.Tensor:
        """fp32 latents ``[B, C, T, h, w]`` of uint8 clips ``[F, H, W, 3]`` of one shape, each padded
        into the tier's canvas as ``Cosmos3OmniPipeline`` pads the ``num_frames`` frames of an action
        request, its first ``given`` frames (default: all) encoded in one VAE call and the latent
        cropped back to the content (the envs' conditions one clip at a time, the trainer's clips in
        batches: batching changes the encode's rounding, not its math)."""
        canvas, content = self.action_canvases(clips, resolution_tier, num_frames)
        latent = self.pipeline._encode_video(canvas[:, :, :given]).float()
        return self.pipeline._remove_action_video_padding_from_latent(latent, content)

    def action_canvases(self, clips, resolution_tier: int, num_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 clips ``[F, H, W, 3]`` of one shape padded into the tier's canvas as
        ``Cosmos3OmniPipeline`` pads the ``num_frames`` frames of an action request: the pixels
        ``[B, 3, num_frames, canvas_h, canvas_w]`` in [-1, 1] and the pipeline's size record, which
        crops a latent of them back to the content (what the VAE must encode faithfully, padding and all)."""
        canvases = [self.pipeline._prepare_action_video_conditioning(unit_frames(clip), resolution_tier, num_frames,
                                                                     device=self.device, dtype=self.vae.dtype)
                    for clip in clips]
        return torch.cat([canvas for canvas, *_ in canvases]), canvases[0][1]

    @staticmethod
    def action_canvas(height: int, width: int, resolution_tier: int) -> tuple[int, int]:
        """The padded canvas ``(height, width)`` an action request of this frame size is conditioned
        on (``Cosmos3OmniPipeline``'s bin of ``resolution_tier`` for the frame's aspect ratio)."""
        from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import _ACTION_RESOLUTION_BINS
        from diffusers.video_processor import VideoProcessor

        bins = _ACTION_RESOLUTION_BINS.get(str(resolution_tier))
        if bins is None:
            raise ValueError(f"resolution_tier={resolution_tier!r} is not supported; choose one of "
                             f"{sorted(int(k) for k in _ACTION_RESOLUTION_BINS)}")
        return VideoProcessor.classify_height_width_bin(height, width, ratios=bins)

    @torch.no_grad()
    def _encode_action_condition(self, mode: str, chunk: int, resolution_tier: int, image: np.ndarray | None = None,
                                 video: np.ndarray | None = None, actions: np.ndarray | None = None) -> Condition:
        """The clean part of an action request, built exactly as ``Cosmos3OmniPipeline.prepare_latents``
        builds it for ``CosmosActionCondition(mode=...)``: the frame (``image`` uint8 ``[H, W, 3]``) or
        the ``chunk + 1`` frames (``video``) padded into the tier's canvas, encoded, and the latent
        cropped back to the content; latent frame 0 clean (``policy``, ``forward_dynamics``: only the
        first frame is encoded, see :meth:`_encode_leading`) or all of them (``inverse_dynamics``);
        the ``chunk`` given ``actions`` ``[chunk, raw_dim]``, zero-padded to the model's
        ``action_dim``, clean (``forward_dynamics``) or all action tokens generated."""
        clip = [image] if image is not None else video
        given = None if mode == "inverse_dynamics" else 1  # every frame, or the first alone (the VAE is causal)
        latent, clean = self._padded(self.encode_action_clips([clip], resolution_tier, chunk + 1, given)[0], chunk + 1)
        action = torch.zeros((chunk, int(self.transformer.config.action_dim)), device=self.device)
        if mode == "forward_dynamics":
            given = torch.as_tensor(np.asarray(actions), dtype=torch.float32, device=self.device)
            action[:, : given.shape[1]] = given
        return Condition(latent=latent, clean_frames=clean, action=action,
                         clean_actions=tuple(range(chunk)) if mode == "forward_dynamics" else ())

    def sound_frames(self, num_frames: int, fps: float) -> int:
        """The sound latent's length for a video of ``num_frames`` at ``fps`` (the pipeline's count)."""
        samples = int(num_frames / fps * self.sound_tokenizer.config.sampling_rate)
        hop = self.sound_tokenizer._hop_size
        return (samples + hop - 1) // hop

    @torch.no_grad()
    def decode_sound(self, latents: torch.Tensor) -> np.ndarray:
        """Sound latents ``[B, C, T]`` -> float32 waveforms ``[B, channels, samples]`` in [-1, 1]."""
        decoder_dtype = next(self.sound_tokenizer.parameters()).dtype
        return self.sound_tokenizer.decode(latents.to(device=self.device, dtype=decoder_dtype)).float().cpu().numpy()

    # --- model ----------------------------------------------------------------------
    def pack(self, rows: list[RowSpec]) -> PackedRows:
        return PackedRows(rows, self.transformer.config, self.temporal_compression, self.device, self.attention)

    def __getstate__(self):  # copy.deepcopy: a copy gets its own guard, and no owner
        return {k: v for k, v in self.__dict__.items() if k not in ("_guard", "_owner")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._owner, self._guard = None, threading.Lock()

    @contextmanager
    def exclusive(self, what: str):
        """Hold the model for one call; a second thread using it meanwhile gets a clear error.

        The attention processors share per-forward state, so two forwards at once would mix
        their rows. Use one model per thread (or per process) to run envs concurrently.
        """
        me = threading.get_ident()
        with self._guard:
            if self._owner not in (None, me):
                raise RuntimeError(f"{what}: this Cosmos3Model is in use by another thread; an engine (and the model "
                                   f"it shares) is used from one thread at a time: give each thread its own model")
            # Same thread: a call that an exception (or Ctrl-C) cut short never blocks the next one.
            self._owner = me
        try:
            yield
        finally:
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
                video, sound, action = self.transformer(
                    **packed.transformer_kwargs(latents, timesteps, self.dtype, use_cache))
            finally:
                self.context.packed, self.context.new_text_cache = None, None
            if building is not None and not torch.is_grad_enabled():
                packed.text_cache, packed.text_cache_version = building, version
            streams = packed.split_outputs(video, sound, action)
            return [{name: preds[j] for name, preds in streams.items()} for j in range(len(packed.rows))]

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
        with self.exclusive("update_weights"):
            updates = merged_lora_weights(weights, self.transformer) if _is_peft_model(weights) else weights
            with deferred_interrupts():  # the weights and their version change together
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
        video = self.vae.decode(z).sample.float()
        frames = self.pipeline.video_processor.postprocess_video(video, output_type="np")
        return (np.asarray(frames) * 255.0).round().astype(np.uint8)


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
