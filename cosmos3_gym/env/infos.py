"""Vector-env infos laid out as Gymnasium's own vector envs lay them out.

Entries of Python objects (prompts, trajectories, messages) are numpy object arrays, one
entry per env, as in Gymnasium's vector envs. Gymnasium's array conversions
(``NumpyToTorch``, ``ArrayConversion``) move every numpy array through DLPack, which carries
numbers only, so an object or string array (in the infos, or as prompts in
``reset(options=...)``) stopped them, and a plain string recursed without end. The single
env's infos hold the objects themselves (``info["trajectory"]`` is a
:class:`~cosmos3_gym.rollout.trajectory.Trajectory`), which Gymnasium refused ("No known
conversion"). Importing this module (every env does, single or vector) registers with
Gymnasium's ``array_conversion`` that numpy arrays of objects or strings, strings and
trajectories pass unchanged; numeric arrays convert as before.

``SAME_STEP`` autoreset: :func:`split_final_info` moves the ended envs' step infos into
``final_info``, as ``SyncVectorEnv`` does.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import torch

from ..rollout.trajectory import Trajectory


def object_column(values: Iterable[Any] | None = None, size: int = 0) -> np.ndarray:
    """``values`` as an object array, or ``size`` entries of None; entries stay whole (an array
    entry is not split into the column the way ``np.array(list_of_arrays)`` would)."""
    values = [None] * size if values is None else list(values)
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


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
    """Let Gymnasium's array conversions keep arrays of objects or strings, strings and trajectories."""
    try:
        from gymnasium.wrappers.array_conversion import array_conversion
    except ImportError:  # without array-api-compat (gymnasium[torch]) there are no conversions to register with
        return
    numeric = array_conversion.dispatch(np.ndarray)  # what numpy arrays reached so far
    if getattr(numeric, "__module__", None) == __name__:  # registered already (a module reload)
        return

    def numpy_array(value, xp, device=None):
        return value if value.dtype.kind in "OUS" else numeric(value, xp, device)

    array_conversion.register(np.ndarray)(numpy_array)
    array_conversion.register(str)(_kept)
    array_conversion.register(Trajectory)(_kept)  # the single env's info["trajectory"], as it is


_register_with_gymnasium()
