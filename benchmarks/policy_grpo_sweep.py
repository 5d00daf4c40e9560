"""The sweep behind ``examples/policy_grpo.py``'s defaults: flag sets x seeds, many runs at once.

    python benchmarks/policy_grpo_sweep.py --parallel 12   # benchmarks/policy_grpo.txt, docs/policy_grpo_sweep.png (one H200, ~17 min)

Each run is the example itself, one process with one CPU thread; a flag set counts when its
success rate rises across seeds, not on one seed (the first and the last fifth of the iterations
are compared, as the example prints). A run stopped early still counts the iterations it recorded
(the example rewrites its ``policy_grpo.json`` every iteration). The figure has one panel per
flag set and one curve per seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cosmos3_gym.train.args import parse_args, require_at_least
from cosmos3_gym.train.plots import first_and_last

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "policy_grpo.py"


@dataclass
class SweepArgs:
    flag_sets: str = ";".join(f"--iterations 80 --learning-rate {lr}" for lr in ("5e-5", "1e-4", "2e-4"))  # ';' between
    seeds: str = "0,1,2,3"
    parallel: int = 4  # runs at once
    out: str = "out/policy_grpo_sweep"

    def __post_init__(self):
        require_at_least(self, parallel=1)
        if not all(seed.strip().isdigit() for seed in self.seeds.split(",")):
            raise ValueError(f"--seeds {self.seeds!r}: give seeds as integers >= 0 separated by ',', e.g. 0,1,2,3")


def run(flags: str, seed: int, out: Path) -> None:
    """One run of the example; its per-iteration record (an earlier sweep's is removed first, so a
    run that fails at once is reported as failed, not as that record)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy_grpo.json").unlink(missing_ok=True)
    with open(out / "log.txt", "w") as log:
        subprocess.run([sys.executable, str(EXAMPLE), *flags.split(), "--seed", str(seed), "--out", str(out)],
                       stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})


def report(flag_sets: list[str], seeds: list[int], out: Path) -> None:
    """Print each run's first and last fifth from its record, with the mean over seeds, and draw
    every run's success rate (``out / "policy_grpo_sweep.png"``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(flag_sets), figsize=(3.6 * len(flag_sets), 3.0), sharey=True, squeeze=False)
    for i, (flags, ax) in enumerate(zip(flag_sets, axes[0])):
        rows = []
        for seed in seeds:
            record = out / f"{i}-s{seed}" / "policy_grpo.json"
            if not record.exists():
                print(f"{flags} --seed {seed}: no iteration recorded; see {record.parent / 'log.txt'}")
                continue
            success = json.loads(record.read_text())["success_rate"]
            first, last, window = first_and_last(success, windows=5)
            rows.append((seed, len(success), first, last))
            ax.plot(np.arange(window - 1, len(success)), np.convolve(success, np.ones(window) / window, "valid"),
                    label=f"seed {seed}")
        runs = " | ".join(f"seed {s}, {n} it: {a:.3f} -> {b:.3f}" for s, n, a, b in rows)
        means = f"mean {np.mean([r[2] for r in rows]):.3f} -> {np.mean([r[3] for r in rows]):.3f}" if rows else "no run"
        print(f"{flags}: {runs}; {means}")
        ax.set_title(f"{flags}\n{means}", fontsize=8)
        ax.set_xlabel("GRPO iteration")
        ax.legend(fontsize=7, loc="upper left")
    axes[0][0].set_ylabel("success rate (moving mean of a fifth)")
    fig.tight_layout()
    fig.savefig(out / "policy_grpo_sweep.png", dpi=110)
    plt.close(fig)
    print(f"wrote {out / 'policy_grpo_sweep.png'}")


def main(args: SweepArgs) -> None:
    flag_sets = [flags.strip() for flags in args.flag_sets.split(";")]
    seeds = [int(seed) for seed in args.seeds.split(",")]
    jobs = [(flags, seed, Path(args.out) / f"{i}-s{seed}") for i, flags in enumerate(flag_sets) for seed in seeds]
    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(lambda job: run(*job), jobs))
    report(flag_sets, seeds, Path(args.out))


if __name__ == "__main__":
    main(parse_args(SweepArgs, description=__doc__))
