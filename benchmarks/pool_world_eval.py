"""Join `cosmos3-gym world-eval` runs over disjoint reset seeds into one report.

A 36-seed evaluation takes about ten minutes on an H100 in one process; three processes of 12 seeds
(`--seed 0`, `--seed 12`, `--seed 24`) run side by side in a third of that. This reads their
`world_eval.json` files, pools each setting's records with `cosmos3_gym.world.harness.pool_records`
(episodes joined, every statistic recomputed), and prints the markdown report of each.

Usage: python benchmarks/pool_world_eval.py out/we_0 out/we_12 out/we_24 [--out out/we_pooled]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cosmos3_gym.world.harness import markdown_report, pool_records

PER_RUN = {"seed", "episodes", "out", "overwrite", "progress", "threads"}  # world-eval flags a part may set alone


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("runs", nargs="+", type=Path, help="world-eval --out folders (or their world_eval.json)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the pooled world_eval.json")
    args = parser.parse_args(argv)
    files = [run / "world_eval.json" if run.is_dir() else run for run in args.runs]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        parser.error(f"runs: no world_eval.json at {', '.join(missing)}; pass world-eval --out folders")
    runs = [json.loads(f.read_text()) for f in files]
    labels = list(runs[0]["records"])
    settings = {key: value for key, value in runs[0].get("args", {}).items() if key not in PER_RUN}
    for f, run in zip(files, runs):
        if list(run["records"]) != labels:
            parser.error(f"runs: {f} has settings {list(run['records'])}, the first run {labels}; "
                         "pool runs of the same settings")
        differ = sorted(key for key in set(settings) | set(run.get("args", {})) if key not in PER_RUN
                        and run.get("args", {}).get(key) != settings.get(key))
        if differ:
            parser.error(f"runs: {f} was run with other flags than {files[0]} ({', '.join(differ)}); "
                         "pool runs that differ only in --seed and --episodes")
    pooled = {label: pool_records([run["records"][label] for run in runs]) for label in labels}
    for label, record in pooled.items():
        print(f"## {label}, seeds {record['seeds'][0]}-{record['seeds'][-1]} pooled from {len(runs)} runs\n")
        print(markdown_report(record, heading=False) + "\n")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "world_eval.json").write_text(json.dumps({"runs": [str(f) for f in files], "records": pooled},
                                                             allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
