"""How many CPU threads torch uses for the CLI and the examples.

torch starts one intra-op thread per core. The embedded model's ops are tiny, so those
threads mostly spin-wait; on a small machine shared with other processes they fight them
for the cores (one demo step went from 6 ms to 1.46 s on a busy 2-core machine). One
thread is the deliberate default on the CPU; ``OMP_NUM_THREADS`` or an explicit count wins.
"""

from __future__ import annotations

import os


def configure_threads(n: int | None = None, device=None) -> int:
    """Set torch's intra-op thread count and return it.

    ``n``: use exactly ``n`` threads. ``None``: keep torch's count if ``OMP_NUM_THREADS`` is set
    (torch already honours it) or if ``device`` is an accelerator (the CPU only feeds it);
    otherwise (``device`` None or ``"cpu"``) use 1 thread.
    """
    import torch

    if n is not None:
        if n < 1:
            raise ValueError(f"threads={n!r} is invalid; use an integer >= 1")
    elif os.environ.get("OMP_NUM_THREADS") or (device is not None and torch.device(device).type != "cpu"):
        return torch.get_num_threads()
    else:
        n = 1
    torch.set_num_threads(n)
    return n
