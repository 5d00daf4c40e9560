"""Vector-env info entries of Python objects (prompts, trajectories, messages), one per env.

Gymnasium's vector envs put such entries in numpy object arrays, and its array conversions
(``NumpyToTorch``, ``ArrayConversion``) move every array through DLPack, which carries numbers
only: an object array, or a string in ``reset(options=...)``, stops them. An
:class:`ObjectColumn` is a numpy object array that those conversions hand over unchanged, so
the numeric entries convert and the prompts and trajectories stay what they are. Importing
this module (every vector env does) registers that with Gymnasium, and strings too (a string
in reset options recursed without end).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np


class ObjectColumn(np.ndarray):
    """A numpy object array (``dtype=object``, one entry per env) that array conversions keep."""


def object_column(values: Iterable[Any] | None = None, size: int | None = None) -> ObjectColumn:
    """``values`` as an object column, or ``size`` entries of None; entries stay whole (an array
    entry is not split into the column the way ``np.array(list_of_arrays)`` would)."""
    values = [None] * size if values is None else list(values)
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column.view(ObjectColumn)


def as_object_column(array: np.ndarray) -> np.ndarray:
    """``array`` as an :class:`ObjectColumn` when it holds objects; any other array unchanged."""
    return array.view(ObjectColumn) if array.dtype == object and not isinstance(array, ObjectColumn) else array


def _kept(value, xp, device=None):
    return value


def _register_with_gymnasium() -> None:
    """Let Gymnasium's array conversions keep object columns and strings."""
    try:
        from gymnasium.wrappers.array_conversion import array_conversion
    except ImportError:  # without array-api-compat (gymnasium[torch]) there are no conversions to register with
        return
    array_conversion.register(ObjectColumn)(_kept)
    array_conversion.register(str)(_kept)


_register_with_gymnasium()
