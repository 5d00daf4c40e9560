"""The reward-curve figure the learning examples save (matplotlib, written to a PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def reward_curve(x, rewards, path: str | Path, *, title: str, xlabel: str, ylabel: str, points: str,
                 windows: int = 10) -> tuple[float, float, int]:
    """Plot ``rewards`` against ``x`` with a moving mean over ``len / windows`` points.

    Returns the mean of the first and of the last window, and the window length.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, rewards = np.asarray(x), np.asarray(rewards, dtype=float)
    window = max(1, len(rewards) // windows)
    first, last = rewards[:window].mean(), rewards[-window:].mean()
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
    return float(first), float(last), window
