"""Seconds per step of the embedded model's trainer at several batch sizes, per task.

    python benchmarks/train_step_time.py --device cuda               # benchmarks/train_step_time.txt

A step is timed as the difference of two runs of ``train_transformer`` (``short`` and ``long``
steps, the same untrained weights), so model loading, the action pool and the first steps'
warm-up cancel out. On the H200 the trainer is bound by kernel launches and Python, not by the
GPU's arithmetic: a larger batch costs far less than its share, which is what sets the batch
of a run with a time budget.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import torch

from cosmos3_gym.train.args import parse_args, require_at_least
from cosmos3_gym.bench import sync_device
from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.tiny_model import build_tiny_components
from cosmos3_gym.train.world_model import TASKS, TrainArgs, train_transformer, trainable_model


@dataclass
class TimeArgs:
    device: str = "cuda" if torch.cuda.is_available() else "cpu"
    batches: str = "128,256,512"
    tasks: str = "t2i,forward_dynamics"  # tasks of cosmos3_gym.train.world_model.TASKS, timed one at a time
    short: int = 3
    long: int = 13
    action_pool: int = 256

    def __post_init__(self):
        require_at_least(self, short=1, long=self.short + 1, action_pool=1)
        if not all(b.isdigit() and int(b) > 0 for b in self.batches.split(",")):
            raise ValueError(f"--batches {self.batches!r}: give positive integers separated by commas, e.g. 128,256")
        unknown = [task for task in self.tasks.split(",") if task not in TASKS]
        if unknown:
            raise ValueError(f"--tasks {self.tasks!r}: {unknown} are not tasks; choose from {TASKS}")


def step_seconds(model: Cosmos3Model, args: TimeArgs, batch: int, task: str) -> float:
    seconds = []
    for steps in (args.short, args.long):
        run = TrainArgs(device=args.device, batch=batch, steps=steps, action_pool=args.action_pool,
                        task_weights=f"{task}=1", log_every=10**9)
        sync_device(args.device)
        start = time.perf_counter()
        train_transformer(model, run, [], float("inf"))
        sync_device(args.device)
        seconds.append(time.perf_counter() - start)
    return (seconds[1] - seconds[0]) / (args.long - args.short)


def main(argv=None) -> int:
    args = parse_args(TimeArgs, argv, __doc__)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = trainable_model(build_tiny_components(0), args.device)
    step_seconds(model, args, 2, args.tasks.split(",")[0])  # warm-up: the first steps' one-off costs
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"# ms per trainer step ({args.long} - {args.short} steps), {name}, torch {torch.__version__}")
    print("batch  " + "  ".join(f"{task:>18}" for task in args.tasks.split(",")) + "  samples/s (mean)")
    for batch in map(int, args.batches.split(",")):
        ms = [1000 * step_seconds(model, args, batch, task) for task in args.tasks.split(",")]
        print(f"{batch:5d}  " + "  ".join(f"{m:18.0f}" for m in ms) + f"  {1000 * batch / (sum(ms) / len(ms)):9.0f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
