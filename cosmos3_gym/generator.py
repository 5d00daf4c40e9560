"""Cosmos3Generator: the diffusers components of a Cosmos 3 checkpoint, resident on one device.

It answers three questions for the rollout engine: which tokens a prompt becomes (exactly
``Cosmos3OmniPipeline.tokenize_prompt``), what velocity the transformer predicts for a
batch of rows (one forward for all of them), and what video a latent decodes to.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from .packing import ATTENTION_BACKENDS, PackedRows, RowSpec, install_processors
from .tiny_model import TINY_CHECKPOINT

COMPONENTS = {
    "transformer": "transformer/config.json and its *.safetensors weights",
    "vae": "vae/config.json and its *.safetensors weights",
    "text_tokenizer": "text_tokenizer/ (tokenizer files)",
    "scheduler": "scheduler/scheduler_config.json",
}


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device) -> torch.dtype:
    """fp32 on the CPU, bf16 on an accelerator."""
    return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16


def check_checkpoint(path: str | Path) -> Path:
    """Raise ``FileNotFoundError`` naming the first missing component of a checkpoint directory."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint={str(path)!r} is not a directory; pass a local diffusers-layout "
                                f"Cosmos 3 checkpoint (with {', '.join(COMPONENTS)}) or omit it for the embedded model")
    for name in ("transformer", "vae"):
        if not (path / name / "config.json").is_file() or not list((path / name).glob("*.safetensors")):
            raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component {name!r}: expected "
                                    f"{COMPONENTS[name]} (only safetensors weights are accepted)")
    if not (path / "text_tokenizer").is_dir() or not any((path / "text_tokenizer").iterdir()):
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component 'text_tokenizer': "
                                f"expected {COMPONENTS['text_tokenizer']}")
    if not (path / "scheduler" / "scheduler_config.json").is_file():
        raise FileNotFoundError(f"checkpoint={str(path)!r} is missing component 'scheduler': "
                                f"expected {COMPONENTS['scheduler']}")
    return path


class Cosmos3Generator:
    """Transformer, VAE, tokenizer and scheduler config of one checkpoint on one device.

    Load with :meth:`from_pretrained` (a local diffusers-layout directory, safetensors
    only) or :meth:`embedded` (the tiny model shipped with the package).
    The components are held by a ``Cosmos3OmniPipeline`` (``self.pipeline``), whose prompt
    templates and token handling are reused verbatim; the transformer's attention
    processor is replaced by :class:`~cosmos3_gym.packing.PackedRowsAttnProcessor` so that
    many rows share one forward without seeing each other.
    """

    def __init__(self, pipeline, device, dtype, attention: str = "auto", compile: bool | None = None):
        self.pipeline = pipeline
        self.device = torch.device(device)
        self.dtype = dtype
        self.transformer = pipeline.transformer
        # FlexAttention block-sparse kernels on accelerators (for real head sizes: its kernels need
        # head_dim >= 64); padded SDPA, exact and simple, on the CPU and for toy models.
        big_heads = self.transformer.config.head_dim >= 64
        if attention == "auto":
            attention = "flex" if self.device.type != "cpu" and big_heads else "sdpa"
        if attention not in ATTENTION_BACKENDS:
            raise ValueError(f"attention={attention!r} is not supported; choose 'auto' or one of {ATTENTION_BACKENDS}")
        self.attention = attention
        # torch.compile fuses the elementwise work (norms, rotary embeddings, MLP activations) that
        # otherwise costs a third of a bf16 forward; worth its warm-up where flex runs.
        self.compile = attention == "flex" if compile is None else compile
        self.vae = pipeline.vae
        self.tokenizer = pipeline.text_tokenizer
        self.scheduler = pipeline.scheduler
        self.install_processors()
        self.transformer.requires_grad_(False).eval()
        self.vae.requires_grad_(False).eval()

    @classmethod
    def from_components(cls, transformer, vae, tokenizer, scheduler, device=None, dtype=None,
                        attention: str = "auto", compile: bool | None = None, **pipeline_config
                        ) -> "Cosmos3Generator":
        """Wrap in-memory diffusers components, moved to ``device`` and cast to ``dtype``
        (modules the model keeps in fp32, such as the time embedder, stay fp32)."""
        from diffusers import Cosmos3OmniPipeline

        device = torch.device(device) if device is not None else default_device()
        dtype = dtype or default_dtype(device)
        for model in (transformer, vae):
            model.to(device=device)
            if model.dtype == dtype:
                continue
            model.to(dtype=dtype)
            keep = getattr(model, "_keep_in_fp32_modules", None) or []
            for name, module in model.named_modules():
                if any(part in keep for part in name.split(".")):
                    module.float()
        pipeline = Cosmos3OmniPipeline(transformer=transformer, text_tokenizer=tokenizer, vae=vae,
                                       scheduler=scheduler, enable_safety_checker=False, **pipeline_config)
        return cls(pipeline, device, dtype, attention, compile)

    @classmethod
    def from_pretrained(cls, path: str | Path, device=None, dtype=None, attention: str = "auto",
                        compile: bool | None = None) -> "Cosmos3Generator":
        import diffusers
        from diffusers import AutoencoderKLWan, Cosmos3OmniTransformer
        from transformers import AutoTokenizer

        path = check_checkpoint(path)
        device = torch.device(device) if device is not None else default_device()
        dtype = dtype or default_dtype(device)
        transformer = Cosmos3OmniTransformer.from_pretrained(path / "transformer", torch_dtype=dtype,
                                                             use_safetensors=True)
        vae = AutoencoderKLWan.from_pretrained(path / "vae", torch_dtype=dtype, use_safetensors=True)
        tokenizer = AutoTokenizer.from_pretrained(path / "text_tokenizer")
        scheduler_config = json.loads((path / "scheduler" / "scheduler_config.json").read_text())
        scheduler = getattr(diffusers, scheduler_config["_class_name"]).from_pretrained(path / "scheduler")
        index_file = path / "model_index.json"
        index = json.loads(index_file.read_text()) if index_file.is_file() else {}
        return cls.from_components(
            transformer, vae, tokenizer, scheduler, device, dtype, attention, compile,
            default_use_system_prompt=index.get("default_use_system_prompt", True),
            use_native_flow_schedule=index.get("use_native_flow_schedule", False),
        )

    @classmethod
    def embedded(cls, device=None, dtype=None) -> "Cosmos3Generator":
        """The tiny model shipped in the package, trained on the procedural world (:mod:`cosmos3_gym.tiny_model`)."""
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
    def tokenize(self, prompt: str, negative_prompt: str, num_frames: int, height: int, width: int, fps: float):
        """``(cond_ids, uncond_ids)`` exactly as ``Cosmos3OmniPipeline.tokenize_prompt`` builds them."""
        return self.pipeline.tokenize_prompt(
            prompt, negative_prompt, num_frames=num_frames, height=height, width=width, fps=fps
        )

    # --- model ----------------------------------------------------------------------
    def pack(self, rows: list[RowSpec]) -> PackedRows:
        return PackedRows(rows, self.transformer.config, self.temporal_compression, self.device, self.attention)

    @torch.no_grad()
    def velocity(self, packed: PackedRows, latents: list[torch.Tensor], timesteps: list[float]) -> list[torch.Tensor]:
        """One transformer forward for all rows; returns each row's velocity ``[C, T, H, W]`` in fp32.

        The first forward over ``packed`` computes the text tokens and caches their keys and
        values; later forwards over the same ``packed`` compute the vision tokens only.
        """
        return self.forward_rows(packed, latents, timesteps)

    def forward_rows(self, packed: PackedRows, latents: list[torch.Tensor], timesteps: list[float]
                     ) -> list[torch.Tensor]:
        """:meth:`velocity` with autograd left as the caller set it (training, policy gradients)."""
        text_cached = packed.text_cache is not None
        if not text_cached:
            packed.text_cache = [None] * self.transformer.config.num_hidden_layers
        self.context.packed, self.context.text_cached = packed, text_cached
        preds, _, _ = self.transformer(**packed.transformer_kwargs(latents, timesteps, self.dtype, text_cached))
        return [pred.squeeze(0).float() for pred in preds]

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
