"""Join `cosmos3-gym world-eval` runs over disjoint reset seeds into one report.

A 36-seed evaluation takes about ten minutes on an H100 in one process; three processes of 12 seeds
(`--seed 0`, `--seed 12`, `--seed 24`) run side by side in a third of that. This reads their
`world_eval.json` files, pools each setting's records with `cosmos3_gym.world.harness.pool_records`
(episodes joined, every statistic recomputed), and prints the markdown report of each with its verdict
against the procedural world's targets (also written to `--out` as world-eval writes a run: world_eval.md,
world_eval.json and the figure world_eval.png). The runs must
differ only in `--seed`, `--episodes` and where and how they ran (`--out`, `--threads`, ...): the
procedural world only (PushT's clone policy is trained from clips drawn from `--seed`, so its runs
score different clones under one name).

Usage: python benchmarks/pool_world_eval.py out/we_0 out/we_12 out/we_24 [--out out/we_pooled [--overwrite]]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cosmos3_gym.cli import folder_error
from cosmos3_gym.model.model import default_dtype
from cosmos3_gym.world.harness import markdown_report, plot_report, pool_records
from cosmos3_gym.world_eval import LEGEND, OUTPUTS, verdict

PER_RUN = {"seed", "episodes", "out", "overwrite", "progress", "threads"}  # world-eval flags a part may set alone


def settings(run: dict) -> dict:
    """A run's world-eval flags that every part must share (its dtype as it ran: a run recorded before
    --dtype, or with it empty, ran the model's default for its device)."""
    args = {key: value for key, value in run.get("args", {}).items() if key not in PER_RUN}
    if "device" in args and not args.get("dtype"):
        args["dtype"] = str(default_dtype(args["device"])).removeprefix("torch.")
    return args


def seed_ranges(seeds: list[int]) -> str:
    """``[0, 1, 2, 7, 8]`` -> ``"0-2, 7-8"``."""
    runs, start = [], None
    for k, seed in enumerate(seeds):
        start = seed if start is None else start
        if k + 1 == len(seeds) or seeds[k + 1] != seed + 1:
            runs.append(f"{start}-{seed}" if seed != start else f"{seed}")
            start = None
    return ", ".join(runs)


def out_folder(text: str) -> Path:
    """``--out``'s value: a folder's name (an empty one would mean the current folder without saying so)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} names no folder; name one (or leave --out out to only print)")
    return Path(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("runs", nargs="+", type=Path, help="world-eval --out folders (or their world_eval.json)")
    parser.add_argument("--out", type=out_folder, default=None,
                        help="a folder for the pooled world_eval.json, .md and .png")
    parser.add_argument("--overwrite", action="store_true", help="replace the world_eval files already in --out")
    args = parser.parse_args(argv)
    files = [run / "world_eval.json" if run.is_dir() else run for run in args.runs]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        parser.error(f"runs: no world_eval.json at {', '.join(missing)}; pass world-eval --out folders")
    if args.out is not None:
        if args.out.exists() and not args.out.is_dir():
            parser.error(f"--out {str(args.out)!r} is a file; pass a folder")
        if args.out.resolve() in {f.parent.resolve() for f in files}:
            parser.error(f"--out {str(args.out)!r} is one of the runs; pass another folder")
        present = [name for name in OUTPUTS if (args.out / name).exists()]
        if present and not args.overwrite:
            parser.error(f"--out {str(args.out)!r} already holds {', '.join(present)}; add --overwrite or choose "
                         "another folder")
    runs = []
    for f in files:
        try:
            run = json.loads(f.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            parser.error(f"runs: {f} is not JSON ({error}); pass world-eval --out folders")
        if not isinstance(run, dict) or not isinstance(run.get("records"), dict) or not run["records"]:
            parser.error(f"runs: {f} has no records; pass the world_eval.json of a world-eval run")
        if run.get("args", {}).get("world", "procedural") != "procedural":
            parser.error(f"runs: {f} is a --world {run['args']['world']} run; only the procedural world's runs pool "
                         "(PushT's clone policy is trained from clips drawn from --seed)")
        runs.append(run)
    labels = list(runs[0]["records"])
    for f, run in zip(files, runs):
        if list(run["records"]) != labels:
            parser.error(f"runs: {f} has settings {list(run['records'])}, {files[0]} {labels}; "
                         "pool runs of the same settings")
        ours, theirs = settings(runs[0]), settings(run)
        differ = sorted(key for key in set(ours) | set(theirs) if ours.get(key) != theirs.get(key))
        if differ:
            parser.error(f"runs: {f} was run with other flags than {files[0]} ({', '.join(differ)}); "
                         "pool runs that differ only in --seed and --episodes")
    try:
        pooled = {label: pool_records([run["records"][label] for run in runs]) for label in labels}
    except ValueError as error:
        parser.error(f"runs: {error}")
    error = args.out and folder_error(args.out)  # made and proven writable now, not after the report
    if error:
        parser.error(f"--out: {error}")
    shared = settings(runs[0])
    sections = [f"# {len(runs)} world-eval runs pooled ({', '.join(str(f) for f in files)}); the flags they share: "
                + ", ".join(f"{key}={value!r}" for key, value in sorted(shared.items())), "", LEGEND]
    for label, record in pooled.items():
        sections += [f"## {label}, seeds {seed_ranges(record['seeds'])} pooled from {len(runs)} runs", "",
                     markdown_report(record, heading=False), f"- {verdict(record)}", ""]
    text = "\n".join(sections)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        first = pooled[labels[0]]
        (args.out / "world_eval.json").write_text(json.dumps(
            {"args": {**shared, "seed": first["seed"], "episodes": first["episodes"]}, "runs": [str(f) for f in files],
             "records": pooled}, allow_nan=False))
        (args.out / "world_eval.md").write_text(text)
        plot_report(pooled, args.out / "world_eval.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
