"""Command-line flags from a typed dataclass (the examples' and the trainer's arguments)."""

from __future__ import annotations

import argparse
import dataclasses


def parse_args(cls, argv=None, description: str | None = None):
    """An instance of dataclass ``cls`` with each field settable as ``--field-name``.

    Also applies the package's thread policy (:func:`cosmos3_gym.threads.configure_threads`:
    one torch thread on the CPU unless ``OMP_NUM_THREADS`` says otherwise)."""
    from .threads import configure_threads

    configure_threads()
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(cls):
        flag = f"--{field.name.replace('_', '-')}"
        if isinstance(field.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default)
        else:
            parser.add_argument(flag, type=type(field.default), default=field.default)
    return cls(**vars(parser.parse_args(argv)))
