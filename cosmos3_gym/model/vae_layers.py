"""The Wan VAE's causal convolutions, upsamplers and RMS norms without their extra memory passes:
the same numbers, fewer copies.

diffusers' ``WanCausalConv3d`` joins the frames it cached to its input (``torch.cat``) and then pads
the result (``F.pad``: a fill and a copy), ``WanUpsample`` upcasts to float32 around a nearest-neighbour
upsampling, and ``WanRMS_norm`` upcasts, divides, downcasts, scales, multiplies by its gain and adds
its zero bias, one pass over the tensor each. In a 16-env Edge world step those passes took half the
decoder's time (``benchmarks/decoder_variants.txt``). :func:`install` gives the VAE's modules
subclasses that do the same arithmetic with fewer passes:

* a convolution's input is written once into its padded buffer (borders zeroed, cached frames and
  input copied in): the convolution reads the very tensor ``F.pad`` would have made;
* nearest-neighbour upsampling selects values, so it runs in the input's dtype;
* with ``fuse_norms`` (CUDA, no autograd), the norm's elementwise chain after its reduction runs as
  one kernel compiled with Inductor's eager-numerics options (every intermediate rounded to bf16
  where eager rounds it, the division correctly rounded); the reduction stays eager's.

The encoded latents and decoded frames equal diffusers' bit for bit (tested on the CPU, and on the GPU
in bf16); any call outside the patterns diffusers' VAE makes (a cache of another shape, channels-last
inputs, float64) takes diffusers' own code. The subclasses keep every attribute, so a VAE with them
saves, loads and copies as before; it trains too, its gradients equal up to the order autograd sums
them (1e-7 apart in float32).
"""
from __future__ import annotations

import functools

import torch
from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d, WanRMS_norm, WanUpsample

# Inductor's options for eager's numbers: bf16 intermediates rounded as eager rounds them, x / y
# correctly rounded (Triton's default division is approximate). A torch whose Inductor lacks one runs
# the norms eagerly.
EAGER_NUMERICS = {"emulate_precision_casts": True, "eager_numerics.division_rounding": True}


class PaddedCausalConv3d(WanCausalConv3d):
    """``WanCausalConv3d`` whose input, cached frames and zero padding are written into one buffer."""

    def forward(self, x, cache_x=None) -> torch.Tensor:
        left, right, top, bottom, front, back = self._padding
        if x.dim() != 5 or (x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous()):
            return super().forward(x, cache_x)  # F.pad keeps a channels-last layout: the convolution's own
        parts = [x]
        if cache_x is not None and front > 0:
            cache_x = cache_x.to(x.device)
            if (cache_x.dtype != x.dtype or cache_x.dim() != 5 or cache_x.shape[2] > front
                    or cache_x.shape[:2] != x.shape[:2] or cache_x.shape[3:] != x.shape[3:]):
                return super().forward(x, cache_x)  # diffusers' promotion, crop or error, not a silent broadcast
            parts.insert(0, cache_x)
            front -= cache_x.shape[2]
        if not any((left, right, top, bottom, front, back)) and len(parts) == 1:
            return torch.nn.Conv3d.forward(self, x)  # nothing to pad (F.pad would only have cloned it)
        batch, channels, _, height, width = x.shape
        frames = front + sum(part.shape[2] for part in parts) + back
        buffer = x.new_empty(batch, channels, frames, height + top + bottom, width + left + right)
        for border in (buffer[:, :, :front], buffer[:, :, frames - back:], buffer[:, :, :, :top],
                       buffer[:, :, :, top + height:], buffer[..., :left], buffer[..., left + width:]):
            border.zero_()
        start = front
        for part in parts:
            buffer[:, :, start:start + part.shape[2], top:top + height, left:left + width].copy_(part)
            start += part.shape[2]
        return torch.nn.Conv3d.forward(self, buffer)


class SameDtypeUpsample(WanUpsample):
    """``WanUpsample`` without its float32 round trip where the mode only selects values."""

    def forward(self, x) -> torch.Tensor:
        if self.mode not in ("nearest", "nearest-exact") or x.dtype not in (torch.bfloat16, torch.float16,
                                                                             torch.float32):
            return super().forward(x)  # float64 is rounded to float32 there
        return torch.nn.Upsample.forward(self, x)


class FusedRMSNorm(WanRMS_norm):
    """``WanRMS_norm`` whose elementwise work after the reduction is one compiled kernel (channels first,
    contiguous bf16 or fp16, no autograd, ``fuse`` set by :func:`install` on CUDA); eager's path everywhere
    else."""

    fuse = False

    def forward(self, x) -> torch.Tensor:
        if not (self.fuse and self.channel_first and not torch.is_grad_enabled() and x.is_contiguous()
                and x.dtype in (torch.bfloat16, torch.float16)):
            return super().forward(x)  # (eager's output keeps a strided input's layout, which a convolution reads)
        # F.normalize's denominator, computed as F.normalize computes it (the float32 tensor's norm)
        norm = x.float().norm(2, dim=1, keepdim=True)
        # [B, C, everything else]: one rank for every norm of the VAE, so that a few compiled graphs serve them all;
        # detached, so that they are no views (Dynamo would guard on each view's base: a graph per layout)
        flat = [t.reshape(t.shape[0], t.shape[1], -1).detach() for t in (x, norm)]
        bias = self.bias.reshape(-1, 1) if isinstance(self.bias, torch.Tensor) else self.bias
        return _norm_tail_kernel(x.device.type)(*flat, self.scale, self.gamma.reshape(-1, 1), bias).view(x.shape)


def _norm_tail(x, norm, scale, gamma, bias):
    """``WanRMS_norm.forward`` after the reduction: F.normalize's clamp and division, then the gain."""
    return (x.float() / norm.clamp_min(1e-12)).to(x.dtype) * scale * gamma + bias


@functools.cache
def _norm_tail_kernel(device_type: str):
    """:func:`_norm_tail` compiled with eager's numbers on CUDA; as it is elsewhere (where :func:`install`
    never fuses: a test of the reshaping on the CPU) and where Inductor lacks an option of
    :data:`EAGER_NUMERICS` (the same numbers, eagerly)."""
    from torch._inductor import config

    if device_type != "cuda" or not set(EAGER_NUMERICS) <= set(config.get_config_copy()):
        return _norm_tail
    return torch.compile(_norm_tail, dynamic=True, options=EAGER_NUMERICS)


SUBCLASSES = {WanCausalConv3d: PaddedCausalConv3d, WanUpsample: SameDtypeUpsample, WanRMS_norm: FusedRMSNorm}


def install(vae: torch.nn.Module, fuse_norms: bool) -> None:
    """Give ``vae``'s convolutions, upsamplers and norms the subclasses above (in place; idempotent)."""
    for module in vae.modules():
        subclass = SUBCLASSES.get(type(module))
        if subclass is not None:
            module.__class__ = subclass
        if isinstance(module, FusedRMSNorm):
            module.fuse = fuse_norms


def restore(vae: torch.nn.Module) -> None:
    """diffusers' own classes again (what a benchmark of diffusers' pipeline should run)."""
    parents = {subclass: parent for parent, subclass in SUBCLASSES.items()}
    for module in vae.modules():
        module.__class__ = parents.get(type(module), type(module))
