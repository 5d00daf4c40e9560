"""Clean conditioning of a request (a first frame, a whole video, the given robot actions),
encoded exactly as ``Cosmos3OmniPipeline.prepare_latents`` encodes it and remembered by content.

:class:`ConditionEncoding` is the part of :class:`~cosmos3_gym.model.model.Cosmos3Model` that
turns pixels and robot action chunks into the clean part of a request; it uses the model's
pipeline, VAE and device.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

from . import diffusers_private as private
from .tasks import TASKS, Task

CONDITION_CACHE_SIZE = 256


def unit_frames(frames) -> list[np.ndarray]:
    """uint8 frames ``[H, W, 3]`` as the float32 arrays in [0, 1] that diffusers' video processor
    takes (it reads numpy frames as [0, 1] floats: uint8 ones would come out 255 times too bright)."""
    return [np.asarray(frame, dtype=np.float32) / 255.0 for frame in frames]


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


class ConditionEncoding:
    """Encodes of conditioning inputs for :class:`~cosmos3_gym.model.model.Cosmos3Model` (a mixin:
    it reads ``pipeline``, ``vae``, ``transformer``, ``device`` and holds the model for each encode)."""

    _conditions: OrderedDict

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
        with self.exclusive("encode a condition"):  # the VAE's causal cache and this cache are the model's
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
        pipe, dtype = self.pipeline, self.vae.dtype
        if image is not None:
            frames = private.preprocess_conditioning_image(image, height=height, width=width).to(self.device, dtype)
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
        return self._padded(private.encode_video(self.pipeline, frames).float()[0], num_frames)

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
        batches: batching changes the encode's rounding, not its math). Only the ``given`` frames' canvases
        are built: the pipeline pads each frame on its own and repeats the last one to ``num_frames``,
        so a frame's canvas does not depend on the frames after it, and the world envs' one-frame
        canvases cost ``1 / num_frames`` of the whole clip's. The latents are those of the whole clip's
        canvas bit for bit for one-frame clips and for ``given=None`` (every caller here); a longer clip
        encoded in part can round differently (about 1e-6: the VAE reads a shorter tensor)."""
        if given is not None and given < 1:
            raise ValueError(f"given={given}: encode at least one frame (None: all {num_frames})")
        canvas, content = self.action_canvases(clips, resolution_tier, min(given or num_frames, num_frames))
        with self.exclusive("encode_action_clips"):
            latent = private.encode_video(self.pipeline, canvas).float()
        return private.crop_action_latent(self.pipeline, latent, content)

    def action_canvases(self, clips, resolution_tier: int, num_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 clips ``[F, H, W, 3]`` of one shape padded into the tier's canvas as
        ``Cosmos3OmniPipeline`` pads the ``num_frames`` frames of an action request: the pixels
        ``[B, 3, num_frames, canvas_h, canvas_w]`` in [-1, 1] and the pipeline's size record, which
        crops a latent of them back to the content (what the VAE must encode faithfully, padding and all).

        The pipeline's own padding code runs once for the whole batch, on the device: the clips' frames
        go there as uint8 in one copy and are divided by 255 there, where the pipeline would divide each
        clip on the host and copy it alone (16 first frames of 256x256 took 618 ms that way on an H100
        machine's host, ``benchmarks/profile_world_step.txt``). The same canvases bit for bit: a float32
        division is correctly rounded on either side (a 0-dim tensor divisor, which torch divides by
        rather than multiply by its reciprocal), and the rest is the pipeline's ops on the same values
        (tested against :func:`unit_frames` and the pipeline per clip, on the CPU and on a GPU)."""
        frames = torch.from_numpy(np.stack([np.asarray(clip)[:num_frames] for clip in clips]))  # [B, F, H, W, 3]
        unit = frames.to(self.device).permute(0, 1, 4, 2, 3).float() / torch.tensor(255.0, device=self.device)
        canvas, content, *_ = private.action_canvas(self.pipeline, unit, resolution_tier, num_frames,
                                                    self.device, self.vae.dtype)
        return canvas, content

    @staticmethod
    def action_canvas(height: int, width: int, resolution_tier: int) -> tuple[int, int]:
        """The padded canvas ``(height, width)`` an action request of this frame size is conditioned
        on (``Cosmos3OmniPipeline``'s bin of ``resolution_tier`` for the frame's aspect ratio)."""
        from diffusers.video_processor import VideoProcessor

        bins = private.ACTION_RESOLUTION_BINS.get(str(resolution_tier))
        if bins is None:
            raise ValueError(f"resolution_tier={resolution_tier!r} is not supported; choose one of "
                             f"{sorted(int(k) for k in private.ACTION_RESOLUTION_BINS)}")
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
        spec = TASKS[Task(mode)]
        clip = [image] if image is not None else video
        given = None if spec.clean_frames == "all" else 1  # every frame, or the first alone (the VAE is causal)
        encoded = self.encode_action_clips([clip], resolution_tier, chunk + 1, given)[0]
        return self._action_condition(mode, chunk, encoded, actions)

    @torch.no_grad()
    def encode_action_conditions(self, mode: str, chunk: int, resolution_tier: int, images,
                                 actions=None) -> list[Condition]:
        """:meth:`encode_action_condition` of many first-frame requests (``policy``, ``forward_dynamics``)
        of one mode and frame size: ``images`` uint8 ``[b, H, W, 3]``, ``actions`` ``[b, chunk, raw_dim]``
        for ``forward_dynamics``. Their canvases are encoded in one VAE call (the world envs encode every
        env's current frame each step): on a 2-core CPU, 0.19-0.24 CPU-seconds a frame in batches of 4 to
        16 against 0.35-0.39 one at a time.

        Not remembered by content, unlike :meth:`encode_action_condition`: an imagined frame hardly ever
        recurs, and a remembered latent would make a step depend on which envs stepped beside it before.
        Batching changes the encode's rounding, not its math: on the CPU in fp32 a latent differs from its
        one-at-a-time encode by 1.3e-6 at most (16 frames, ``benchmarks/world_batching_cpu.txt``); a batch
        of one is :meth:`encode_action_condition`'s latent bit for bit."""
        spec = TASKS[Task(mode)]
        if spec.clean_frames == "all":
            raise ValueError(f"mode={mode!r} is conditioned on whole videos; encode_action_conditions takes first "
                             f"frames (policy, forward_dynamics): use encode_action_condition(..., video=...)")
        if spec.robot_chunk == "given" and (actions is None or len(actions) != len(images)):
            raise ValueError(f"mode={mode!r} needs one action chunk per image ({len(images)} images)")
        latents = self.encode_action_clips([[image] for image in images], resolution_tier, chunk + 1, given=1)
        return [self._action_condition(mode, chunk, encoded, None if actions is None else actions[j])
                for j, encoded in enumerate(latents)]

    def _action_condition(self, mode: str, chunk: int, encoded: torch.Tensor, actions) -> Condition:
        """The :class:`Condition` of one encoded, cropped clip: its latent padded to ``chunk + 1`` frames,
        and the ``chunk`` given ``actions`` zero-padded to the model's ``action_dim`` (``forward_dynamics``)."""
        spec = TASKS[Task(mode)]
        latent, clean = self._padded(encoded, chunk + 1)
        action = torch.zeros((chunk, int(self.transformer.config.action_dim)), device=self.device)
        if spec.robot_chunk == "given":
            given = torch.as_tensor(np.asarray(actions), dtype=torch.float32, device=self.device)
            action[:, : given.shape[1]] = given
        return Condition(latent=latent, clean_frames=clean, action=action,
                         clean_actions=tuple(range(chunk)) if spec.robot_chunk == "given" else ())
