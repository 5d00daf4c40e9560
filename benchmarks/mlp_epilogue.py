"""The Edge vision MLP (2048 -> 9216 -> 2048, ReLU^2) over one forward's 16 x 2 x 2340 tokens, on a GPU:
as the env runs it (cuBLAS GEMMs, the activation compiled alone: one extra pass over the 9216-wide
intermediate, 18 ms of the 461 ms forward) against the whole MLP compiled with Inductor's max-autotune,
which may pick Triton GEMM templates with the activation fused into the up-projection's epilogue.
Each variant's output is compared with the first's.

Usage: python benchmarks/mlp_epilogue.py   (a CUDA GPU; max-autotune compiles for a minute or two)
"""

import time

import torch

TOKENS, HIDDEN, INTER, LAYERS = 16 * 2 * 2340, 2048, 9216, 28


def relu2(h):
    return torch.relu(h).square()


def timed(fn, x, repeats=20) -> float:
    for _ in range(3):
        fn(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    torch.manual_seed(0)
    up = torch.nn.Linear(HIDDEN, INTER, bias=False, device="cuda", dtype=torch.bfloat16)
    down = torch.nn.Linear(INTER, HIDDEN, bias=False, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=torch.bfloat16)
    act = torch.compile(relu2)
    variants = {
        "env: cuBLAS GEMMs, activation compiled alone": lambda t: down(act(up(t))),
        "whole MLP, max-autotune": torch.compile(lambda t: down(relu2(up(t))), mode="max-autotune-no-cudagraphs"),
    }
    flops = 2 * 2 * TOKENS * HIDDEN * INTER
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {TOKENS} tokens, {flops / 1e12:.2f} TFLOP per MLP")
    reference = None
    for name, fn in variants.items():
        started = time.perf_counter()
        with torch.no_grad():
            out = fn(x)
            ms = timed(fn, x)
        reference = out if reference is None else reference
        diff = (out.float() - reference.float()).abs().max().item()
        print(f"{name}: {ms:.3f} ms per MLP ({flops / ms / 1e9:.0f} TFLOP/s), x{LAYERS} layers = {ms * LAYERS:.1f} ms; "
              f"max |out - first| {diff:.3e}; {time.perf_counter() - started:.0f} s with compiling", flush=True)


if __name__ == "__main__":
    main()
