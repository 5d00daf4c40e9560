"""Weight updates from a trainer into a rollout transformer: checked whole, then applied all or nothing."""

from __future__ import annotations

import copy
import warnings

import torch


def _pairs(weights) -> list[tuple[str, object]]:
    usage = "pass a state dict, (name, tensor) pairs (module.named_parameters()) or a peft.PeftModel"
    if isinstance(weights, torch.nn.Module):
        raise ValueError(f"update_weights: got the module itself ({type(weights).__name__}); {usage}, "
                         f"e.g. update_weights(module.state_dict())")
    if isinstance(weights, dict):
        return list(weights.items())
    try:
        pairs = list(weights)
    except TypeError:
        raise ValueError(f"update_weights: got a {type(weights).__name__}; {usage}") from None
    if not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        raise ValueError(f"update_weights: expected (name, tensor) pairs; {usage} (parameters() has no names)")
    return pairs


def checked_updates(module: torch.nn.Module, weights) -> dict[str, torch.Tensor]:
    """``weights`` as ``{name: tensor}`` cast to the module's dtypes and device, or ``ValueError``
    naming the first tensor that cannot be loaded. Nothing of ``module`` changes here."""
    current = module.state_dict()
    pairs = _pairs(weights)
    if not pairs:
        raise ValueError("update_weights got no tensors; pass a state dict or (name, tensor) pairs")
    staged = {}
    for name, tensor in pairs:
        if name not in current:
            close = [k for k in current if k.split(".")[-1] == str(name).split(".")[-1]][:3]
            raise ValueError(f"update_weights: unknown tensor {name!r}; names are the transformer's "
                             f"state_dict keys (e.g. {close or list(current)[:3]})")
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"update_weights: {name!r} is a {type(tensor).__name__}, not a torch.Tensor")
        target = current[name]
        if tuple(tensor.shape) != tuple(target.shape):
            raise ValueError(f"update_weights: {name!r} has shape {tuple(tensor.shape)}; "
                             f"expected {tuple(target.shape)}")
        if tensor.is_meta:
            raise ValueError(f"update_weights: {name!r} is a meta tensor (no data); load or materialise it first")
        if tensor.layout != torch.strided:
            raise ValueError(f"update_weights: {name!r} is a {tensor.layout} tensor; pass dense tensors "
                             f"(tensor.to_dense())")
        if not tensor.dtype.is_floating_point or not target.dtype.is_floating_point:
            if tensor.dtype != target.dtype:
                raise ValueError(f"update_weights: {name!r} has dtype {tensor.dtype}; expected a floating dtype "
                                 f"(cast to {target.dtype})")
        value = tensor.detach().to(device=target.device, dtype=target.dtype, copy=True)
        if value.dtype.is_floating_point and not bool(torch.isfinite(value).all()):
            raise ValueError(f"update_weights: {name!r} holds NaN or Inf (after casting to {target.dtype}); "
                             f"nothing was loaded")
        staged[name] = value
    return staged


def staged_update(module: torch.nn.Module, weights) -> None:
    """Check every tensor, then copy them into ``module``; restore the old values if a copy fails."""
    staged = checked_updates(module, weights)
    current = module.state_dict()
    backup = {name: current[name].detach().clone() for name in staged}
    done = []
    try:
        with torch.no_grad():
            for name, value in staged.items():
                done.append(name)
                current[name].copy_(value)
    except BaseException:
        with torch.no_grad():
            for name in done:
                current[name].copy_(backup[name])
        raise


def merged_lora_weights(peft_model: torch.nn.Module, transformer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """All weights of a peft model (a ``peft.PeftModel`` over a copy of ``transformer``) with its
    adapters merged by peft itself, on a copy: plain LoRA, DoRA, layers merged already,
    ``modules_to_save`` and trained biases all come out as the trainer would evaluate them."""
    if not hasattr(peft_model, "merge_and_unload"):
        raise ValueError("update_weights: the peft adapters must come as a peft.PeftModel "
                         "(peft.get_peft_model(copy_of_the_transformer, LoraConfig(...)))")
    with warnings.catch_warnings():  # a trainer that merged its adapters itself is as welcome as one that did not
        warnings.filterwarnings("ignore", "All adapters are already merged", UserWarning)
        merged = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    unknown = sorted(set(merged) - set(transformer.state_dict()))
    if unknown:
        raise ValueError(f"update_weights: the peft model's base has weights this transformer does not have "
                         f"({unknown[:3]}); apply the adapter to a copy of the rollout transformer")
    return merged
