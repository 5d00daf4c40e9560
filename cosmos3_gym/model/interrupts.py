"""Critical sections that a Ctrl-C cannot split.

Every call computes first and installs its result last. Once it has begun to install, a Ctrl-C
must not cut in before the call has returned: the env would be after the call while the caller,
seeing a bare ``KeyboardInterrupt``, believes it before (and, retrying, takes a step too many or
applies an update twice). A call therefore runs in an :func:`installing` section: a Ctrl-C
interrupts its computation as usual (nothing has changed), but from :meth:`Section.hold`, just
before the first change, to the end of the outermost section (whose block builds the return
value and returns it) a SIGINT is held back. If one came, ``KeyboardInterrupt`` is raised once
that section has finished, with a message that says the call took effect; otherwise the call
returns. Sections nest: an inner one (the vector env's step inside the single env's) holds the
outermost one, so the hold lasts until the outermost call returns.
:func:`deferred_interrupts` is a section that holds from its start.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

TOOK_EFFECT = "it is installed: the call took effect (do not repeat it)"

_open: list["Section"] = []  # the main thread's open outermost section (at most one)


class Section:
    """An open :func:`installing` section (the outermost one's hold covers the nested ones)."""

    def __init__(self, what: str | None, root: "Section | None" = None, inert: bool = False):
        self.what, self._root, self._inert = what, root or self, inert
        self._received: list[int] = []
        self._previous = None
        self._held = False

    def hold(self) -> None:
        """From here to the end of the outermost section, hold SIGINT back (call it just before
        installing). Elsewhere than in the main thread (which alone receives signals) it does nothing,
        and so it does where the program has a SIGINT handler of its own (or ignores SIGINT): a Ctrl-C
        is then that handler's, as it would be without the section."""
        root = self._root
        if self._inert or root._held or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return
        root._previous = signal.signal(signal.SIGINT, lambda signum, frame: root._received.append(signum))
        root._held = True

    @property
    def interrupted(self) -> bool:
        """Whether a Ctrl-C has been held back so far (a call may still decide to undo its work)."""
        return bool(self._root._received)


@contextmanager
def installing(what: str | None = None):
    """A section for a call that computes, then installs: yields a :class:`Section`.

    Call ``section.hold()`` just before the first change; from there to the end of the
    outermost section a SIGINT is held back, then raised as ``KeyboardInterrupt`` saying that the
    call took effect (unless the block raised: its error goes on). Put everything the call does
    after installing (building its return value) inside the block, so that nothing but the
    ``return`` itself can be interrupted once the call has taken effect. A block may also read
    ``section.interrupted`` before its work stands, undo it and raise a ``KeyboardInterrupt`` of its
    own (the Ray env's calls do): an error leaving the block goes on unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield Section(what, inert=True)
        return
    if _open:  # nested: the outermost section holds, and raises
        yield Section(what, root=_open[0])
        return
    section = Section(what)
    try:
        _open.append(section)
        yield section
    finally:
        if section in _open:
            _open.remove(section)
        if section._held:  # SIGINT gets its handler back
            try:
                signal.signal(signal.SIGINT, section._previous)
            except KeyboardInterrupt:  # a Ctrl-C at the very moment it came back: the call took effect all the same
                section._received.append(signal.SIGINT)
    if section._received:
        result = "a computed result" if section.what is None else f"{section.what}'s computed result"
        raise KeyboardInterrupt(f"Ctrl-C arrived while {result} was being installed; {TOOK_EFFECT}")


@contextmanager
def deferred_interrupts():
    """Hold back SIGINT (Ctrl-C) until the block has run; then raise ``KeyboardInterrupt``
    (saying the call took effect). Inside an :func:`installing` section it holds that section
    until its end. Only the main thread receives signals in Python, so elsewhere this is a plain block.
    """
    with installing() as section:
        section.hold()
        yield
