"""Vector-env infos laid out as Gymnasium's own vector envs lay them out.

Entries of Python objects (prompts, trajectories, messages), one per env: Gymnasium puts such
entries in numpy object arrays, and its array conversions (``NumpyToTorch``,
``ArrayConversion``) move every array through DLPack, which carries numbers only: an object
array, or a string in ``reset(options=...)``, stops them. An :class:`ObjectColumn` is a numpy
object array that those conversions hand over unchanged, so the numeric entries convert and
the prompts and trajectories stay what they are. Importing this module (every vector env
does) registers that with Gymnasium, and strings too (a string in reset options recursed
without end).

``SAME_STEP`` autoreset: :func:`split_final_info` moves the ended envs' step infos into
``final_info``, as ``SyncVectorEnv`` does.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import torch


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


def split_final_info(infos: dict, ended: np.ndarray) -> dict:
    """Gymnasium's ``SAME_STEP`` layout: returns ``final_info``, copies of ``infos``' entries with
    their masks narrowed to the ``ended`` envs, and clears those envs from the masks left in
    ``infos`` (which then takes the new episodes' reset infos)."""
    final_info = {}
    for key in [k for k in infos if not k.startswith("_")]:
        value = infos[key]
        final_info[key] = value.clone() if isinstance(value, torch.Tensor) else value.copy()
        final_info[f"_{key}"] = infos[f"_{key}"] & ended
        infos[f"_{key}"] = infos[f"_{key}"] & ~ended
    return final_info


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
