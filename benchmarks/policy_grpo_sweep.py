"""The sweep behind ``examples/policy_grpo.py``'s defaults: flag sets x seeds, many runs at once.

    python benchmarks/policy_grpo_sweep.py --parallel 16      # benchmarks/policy_grpo.txt (one H200, ~40 min)

Each run is the example itself, one process with one CPU thread; a flag set counts when its
success rate rises across seeds, not on one seed (the first and the last fifth of the iterations
are compared, as the example prints). A run stopped early still counts the iterations it recorded
(the example rewrites its ``policy_grpo.json`` every iteration).
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

from cosmos3_gym.args import parse_args, require_at_least
from cosmos3_gym.plots import first_and_last

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "policy_grpo.py"


@dataclass
class SweepArgs:
    flag_sets: str = ";".join(f"--iterations 80 --num-groups {g} --group-size {n} {rest}" for g, n, rest in [
        (4, 4, "--learning-rate 1e-5"), (4, 4, "--learning-rate 3e-5"), (4, 4, "--learning-rate 1e-4"),
        (4, 4, "--learning-rate 3e-5 --epochs 4"), (4, 4, "--learning-rate 3e-5 --noise-level 0.5"),
        (4, 8, "--learning-rate 3e-5"), (4, 8, "--learning-rate 1e-4"), (8, 8, "--learning-rate 1e-4"),
        (16, 4, "--learning-rate 1e-4"), (8, 8, "--learning-rate 2e-4")])  # separated by ';'
    seeds: str = "0,1,2,3"
    parallel: int = 4  # runs at once
    out: str = "out/policy_grpo_sweep"

    def __post_init__(self):
        require_at_least(self, parallel=1)


def run(flags: str, seed: int, out: Path) -> Path:
    """One run of the example; its per-iteration record (an earlier sweep's is removed first, so a
    run that fails at once is reported as failed, not as that record)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "policy_grpo.json").unlink(missing_ok=True)
    with open(out / "log.txt", "w") as log:
        subprocess.run([sys.executable, str(EXAMPLE), *flags.split(), "--seed", str(seed), "--out", str(out)],
                       stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return out / "policy_grpo.json"


def main(args: SweepArgs) -> None:
    flag_sets = [flags.strip() for flags in args.flag_sets.split(";")]
    seeds = [int(seed) for seed in args.seeds.split(",")]
    jobs = [(flags, seed, Path(args.out) / f"{i}-s{seed}") for i, flags in enumerate(flag_sets) for seed in seeds]
    with ThreadPoolExecutor(args.parallel) as pool:
        records = list(pool.map(lambda job: run(*job), jobs))
    for i, flags in enumerate(flag_sets):
        rows = []
        for seed, record in zip(seeds, records[i * len(seeds):(i + 1) * len(seeds)]):
            if not record.exists():
                print(f"{flags} --seed {seed}: no iteration recorded; see {record.parent / 'log.txt'}")
                continue
            success = json.loads(record.read_text())["success_rate"]
            rows.append((seed, len(success), *first_and_last(success, windows=5)[:2]))
        runs = " | ".join(f"seed {s}, {n} it: {a:.3f} -> {b:.3f}" for s, n, a, b in rows)
        means = f"mean {np.mean([r[2] for r in rows]):.3f} -> {np.mean([r[3] for r in rows]):.3f}" if rows else "no run"
        print(f"{flags}: {runs}; {means}")


if __name__ == "__main__":
    main(parse_args(SweepArgs, description=__doc__))
