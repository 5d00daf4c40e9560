"""Critical sections that a Ctrl-C cannot split.

Every call computes first and installs its result last. The installation itself (a few
tensor writes and list assignments) must not be cut in half by a Ctrl-C: inside
:func:`deferred_interrupts` a SIGINT is held back and raised once the section has finished,
so the env is always either before the call or after it, never in between.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


_active: list[bool] = []  # non-empty while the main thread is inside a section


@contextmanager
def deferred_interrupts():
    """Hold back SIGINT (Ctrl-C) until the block has run; then raise ``KeyboardInterrupt``.

    Only the main thread receives signals in Python, so elsewhere this is a plain block.
    Nested sections defer to the outermost one.
    """
    if threading.current_thread() is not threading.main_thread() or _active:
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    _active.append(True)
    try:
        yield
    finally:
        _active.pop()
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt("Ctrl-C arrived while a computed result was being installed; it is installed")
