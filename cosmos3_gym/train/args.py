"""Command-line flags from a typed dataclass (the examples' and the trainer's arguments)."""

from __future__ import annotations

import argparse
import dataclasses


def parse_args(cls, argv=None, description: str | None = None):
    """An instance of dataclass ``cls`` with each field settable as ``--field-name``.

    Also applies the package's thread policy (:func:`cosmos3_gym.model.threads.configure_threads`:
    one torch thread on the CPU unless ``OMP_NUM_THREADS`` says otherwise)."""
    from ..model.threads import configure_threads

    configure_threads()
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(cls):
        flag = f"--{field.name.replace('_', '-')}"
        if isinstance(field.default, bool):  # the action appends "(default: ...)" itself
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default, help="")
        else:
            parser.add_argument(flag, type=type(field.default), default=field.default,
                                help=f"{type(field.default).__name__} (default: %(default)s)")
    try:
        return cls(**vars(parser.parse_args(argv)))
    except ValueError as error:  # a dataclass's own checks (require_at_least): usage and message, exit 2
        parser.error(str(error))


def require_at_least(args, **minimums) -> None:
    """Raise ``ValueError`` for the first field of ``args`` below its minimum, named as its flag,
    so a budget too small to run fails before any model loads (call from ``__post_init__``)."""
    for name, minimum in minimums.items():
        value = getattr(args, name)
        if value < minimum:
            raise ValueError(f"--{name.replace('_', '-')} {value} is too small; use {minimum} or more")
