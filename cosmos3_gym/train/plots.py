"""The reward-curve figure the learning examples save (matplotlib, written to a PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def first_and_last(values, windows: int = 10) -> tuple[float, float, int]:
    """The mean of the first and of the last ``len / windows`` values (at least one), and that length:
    how every curve here is summarised, so printed numbers and plot titles agree."""
    values = np.asarray(values, dtype=float)
    window = max(1, len(values) // windows)
    return float(values[:window].mean()), float(values[-window:].mean()), window


def reward_curve(x, rewards, path: str | Path, *, title: str, xlabel: str, ylabel: str, points: str,
                 windows: int = 10) -> tuple[float, float, int]:
    """Plot ``rewards`` against ``x`` with a moving mean over ``len / windows`` points.

    Returns the mean of the first and of the last window, and the window length.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, rewards = np.asarray(x), np.asarray(rewards, dtype=float)
    first, last, window = first_and_last(rewards, windows)
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.plot(x, rewards, ".", alpha=0.25, label=points)
    ax.plot(x[window - 1:], np.convolve(rewards, np.ones(window) / window, mode="valid"), label=f"mean of {window}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}: {first:.2f} -> {last:.2f}", fontsize=10)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return first, last, window
