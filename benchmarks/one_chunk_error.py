"""One imagined chunk against the truth, from the same true frame: the error of the object's centre at
the chunk's last frame (px of the 32x32 frame), and its mean component toward the goal (a dream that
runs ahead of slow pushes would show a positive bias) and across it. 48 tasks (seeds 2000-2047) per
command kind: 0.15 and 0.5 of the greedy command, greedy plus Gaussian noise 1 and 4 (the harness's
"greedy noise 1" and "greedy noise 4"), and zero commands; the shipped weights and the checkpoints
named, at each number of denoising steps given (the env's default, 8, unless ``--num-steps``), with the
env's sampler (``--kind sde --noise-level 0.7`` unless given; ``--kind ode``: the deterministic imagination).

Usage: python benchmarks/one_chunk_error.py [--num-steps 8,16] [--kind ode] [CHECKPOINT ...]   (about 2
minutes per checkpoint and number of steps on a 2-core CPU)
"""
import argparse
import numpy as np, torch
from cosmos3_gym.world import envs as E
from cosmos3_gym.rollout import procedural_world as pw
from cosmos3_gym.train.args import comma_separated


def step_counts(text: str) -> list[int]:
    """``--num-steps``, parsed as the other scripts' list flags are (an argparse error, not a traceback)."""
    try:
        counts = comma_separated("--num-steps", text, int, "integers")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--num-steps {text}: use integers >= 1")
    return counts


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--num-steps", type=step_counts, default=[8],
                    help="denoising steps per chunk, comma-separated (default: 8)")
parser.add_argument("--kind", choices=("sde", "cps", "ode"), default="sde", help="the sampler (default: sde)")
parser.add_argument("--noise-level", type=float, default=0.7,
                    help="the sde or cps sampler's noise level, in [0, 1] (default: 0.7; the ode sampler has none)")
parser.add_argument("checkpoints", nargs="*", help="checkpoints to score after the shipped weights")
args = parser.parse_args()
if not 0 <= args.noise_level <= 1 or (args.kind == "ode" and args.noise_level != 0.7):
    parser.error(f"--noise-level {args.noise_level}: use a number in [0, 1], with --kind sde or cps")
torch.set_num_threads(2)
N = 16
for ck, steps in [(ck, n) for ck in ["", *args.checkpoints] for n in args.num_steps]:
    imag = E.Cosmos3WorldVectorEnv(N, device="cpu", checkpoint=ck, num_steps=steps, kind=args.kind,
                                   noise_level=args.noise_level)
    for gain, noise in [(0.15, 0), (0.5, 0), (1.0, 1.0), (1.0, 4.0), (0.0, 0.0)]:
        along, across, err, lost = [], [], [], 0
        for rep in range(3):
            seeds = 2000 + rep * N
            obs, info = imag.reset(seed=seeds)
            acts, tr = [], []
            for i in range(N):
                true = E.ProceduralWorldEnv(); true.reset(seed=seeds + i)
                rng = np.random.default_rng(i + 7 * rep)
                h = np.array(pw.GOALS[true.task.goal]) * 32 - np.array(true.task.start)
                c = np.clip(gain * np.tile(h / (pw.MAX_SPEED * 8), (8, 1)) + rng.normal(0, noise, (8, 2)) * (noise > 0), -1, 1).astype(np.float32)
                acts.append(c); tr.append((true.step(c), h / np.linalg.norm(h), pw.locate(obs[i])))
            o2, r, term, trunc, inf2 = imag.step(np.stack(acts))
            for i in range(N):
                (_, _, _, _, ti), u, s0 = tr[i]
                a = pw.locate(inf2["frames"][i][-1]); b = pw.locate(ti["frames"][-1])
                if a is None or b is None:  # a frame without the object: counted, not measured
                    lost += 1
                    continue
                d = (np.array(a) - np.array(b)) * 32
                along.append(d @ u); across.append(d @ np.array([-u[1], u[0]])); err.append(np.linalg.norm(d))
        print(ck or "ship", f"{steps} steps", args.kind if args.kind == "ode" else f"{args.kind} {args.noise_level:g}", "gain", gain, "noise", noise, "toward-goal bias %.2f +- %.2f, across %.2f, median err %.2f" % (np.mean(along), np.std(along) / np.sqrt(len(along)), np.mean(across), np.median(err)) + (f" ({lost} of {3 * N} chunks without the object left out)" if lost else ""), flush=True)
