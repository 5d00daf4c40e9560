"""CUDA graphs of the transformer forward: captured once per packing, replayed for its later steps.

Within an episode every forward after the first has the same shapes (the text keys and values
are cached, the rows stay the same); only the latents and timesteps change. Replaying a captured
graph launches the whole forward at once: no Python, no per-kernel launch, no gaps between
kernels. A graph runs the kernels the eager forward it was captured from ran, on the same
inputs, so its outputs equal the eager ones bit for bit.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


def _signature(leaves) -> tuple:
    """What must match for a replay: tensors by shape, dtype and device, everything else by value."""
    return tuple((tuple(x.shape), x.dtype, x.device) if isinstance(x, torch.Tensor) else x for x in leaves)


class ForwardGraph:
    """One captured forward ``fn(**kwargs)`` with its own copies of the tensor inputs.

    :meth:`capture` runs ``fn`` eagerly on a side stream (the warm-up CUDA graphs need; its
    outputs are this call's result), then captures it. :meth:`replay` copies new inputs of the
    same structure and shapes into the captured ones, replays, and returns copies of the outputs
    (the captured outputs are overwritten by the next replay).
    """

    def __init__(self, key, spec, signature, inputs, outputs, graph):
        self.key, self._spec, self._signature = key, spec, signature
        self._inputs, self._outputs, self._graph = inputs, outputs, graph

    @classmethod
    def capture(cls, fn, kwargs: dict, key) -> tuple["ForwardGraph", object]:
        """``(graph, outputs of the eager warm-up)``; ``key`` names what the graph was captured
        against (weights, cached keys and values), for the caller to compare before a replay."""
        leaves, spec = tree_flatten(kwargs)
        inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        static = tree_unflatten(inputs, spec)
        caller, side = torch.cuda.current_stream(), torch.cuda.Stream()
        side.wait_stream(caller)
        try:
            with torch.cuda.stream(side):
                warm = fn(**static)
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin()
                try:
                    outputs = fn(**static)
                except BaseException:
                    with contextlib.suppress(RuntimeError):  # the capture is void; its own end error would hide why
                        graph.capture_end()
                    raise
                graph.capture_end()
        finally:
            caller.wait_stream(side)
        return cls(key, spec, _signature(leaves), inputs, outputs, graph), warm

    def fits(self, kwargs: dict) -> bool:
        leaves, spec = tree_flatten(kwargs)
        return spec == self._spec and _signature(leaves) == self._signature

    def replay(self, kwargs: dict):
        leaves, _ = tree_flatten(kwargs)
        for static, new in zip(self._inputs, leaves):
            if isinstance(static, torch.Tensor):
                static.copy_(new)
        self._graph.replay()
        outputs, spec = tree_flatten(self._outputs)
        return tree_unflatten([x.clone() if isinstance(x, torch.Tensor) else x for x in outputs], spec)
