"""`cosmos3-gym demo | rollout | check | bench`."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np


def _upscaled(frames: np.ndarray, min_side: int = 256) -> np.ndarray:
    """Nearest-neighbour upscaling so that tiny videos are visible in a player."""
    factor = max(1, min_side // min(frames.shape[1:3]))
    return frames.repeat(factor, axis=1).repeat(factor, axis=2)


def write_video(path: Path, frames: np.ndarray, fps: float) -> Path:
    """Write uint8 ``[F, H, W, 3]`` with imageio: mp4 (ffmpeg) or gif for videos, png for one frame."""
    import imageio.v2 as imageio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = _upscaled(frames)
    if len(frames) == 1:
        path = path.with_suffix(".png")
        imageio.imwrite(path, frames[0])
    elif path.suffix == ".gif":
        imageio.mimwrite(path, list(frames), duration=1000.0 / fps, loop=0)
    else:
        imageio.mimwrite(path, list(frames), fps=fps, macro_block_size=1)
    return path


def demo(args) -> int:
    import gymnasium as gym
    from tqdm import tqdm

    import cosmos3_gym  # noqa: F401

    overrides = {"num_steps": args.steps} if args.steps else {}
    env = gym.make(args.env, device=args.device, **overrides)
    options = {"prompt": args.prompt} if args.prompt else None
    _, info = env.reset(seed=args.seed, options=options)
    print(f"env {args.env}  prompt {info['prompt']!r}  seed {info['seed']}")
    rows, seconds, terminated = [], [], False
    with tqdm(total=env.unwrapped.engine.num_steps, desc="denoising", unit="step") as bar:
        while not terminated:
            start = time.perf_counter()
            _, reward, terminated, _, step_info = env.step(env.unwrapped.default_action)
            seconds.append(time.perf_counter() - start)  # the step returns host values: device work is done
            rows.append(step_info)
            bar.update()
    print(f"{'step':>4} {'sigma':>9} {'sigma_next':>10} {'timestep':>9} {'log_prob':>10} {'log_prob_sum':>13} "
          f"{'seconds':>8}")
    for k, (row, sec) in enumerate(zip(rows, seconds)):
        print(f"{k:>4} {row['sigma']:>9.5f} {row['sigma_next']:>10.5f} {row['timestep']:>9.2f} "
              f"{row['log_prob']:>10.5f} {row['log_prob_sum']:>13.2f} {sec:>8.4f}")
    engine = env.unwrapped.engine
    print(f"device {engine.device}, dtype {engine.generator.dtype}, attention {engine.generator.attention}; "
          f"median seconds per step {np.median(seconds):.4f} (step 0 computes the prompt tokens and, on a GPU, "
          f"compiles the attention kernels; the last step also decodes the video)")
    path = write_video(Path(args.out), step_info["frames"], env.unwrapped.preset.fps / 3)
    print(f"reward {reward:.4f}  video {path}")
    if args.trajectory:
        step_info["trajectory"].save(args.trajectory)
        print(f"trajectory {args.trajectory}")
    return 0


def rollout(args) -> int:
    import gymnasium as gym
    from tqdm import tqdm

    import cosmos3_gym  # noqa: F401

    env = gym.make(args.env, device=args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for episode in tqdm(range(args.episodes), desc="episodes"):
        env.reset(seed=args.seed + episode)
        terminated = False
        while not terminated:
            _, reward, terminated, _, info = env.step(env.unwrapped.default_action)
        info["trajectory"].extra["reward"] = reward
        info["trajectory"].save(out / f"episode_{episode:04d}.safetensors")
    print(f"{args.episodes} trajectories in {out}")
    return 0


def check(args) -> int:
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env as gym_check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    import cosmos3_gym

    failures = 0
    for env_id in cosmos3_gym.ENV_IDS:
        for mode in ("control", "noise"):
            for checker in ("gymnasium", "sb3"):
                env = gym.make(env_id, action_mode=mode, num_steps=2).unwrapped
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if checker == "gymnasium":
                            gym_check_env(env)
                        else:  # noise mode is unbounded by design: SB3's bound warnings do not apply
                            sb3_check_env(env, warn=mode == "control")
                    status = "ok"
                except Exception as error:  # report every failure, then exit non-zero
                    failures += 1
                    status = f"FAILED: {error}"
                print(f"{env_id:<24} {mode:<8} {checker:<10} {status}")
    return 1 if failures else 0


def bench(args) -> int:
    from . import bench as benchmarks

    if args.cpu:
        benchmarks.bench_cpu(args.num_envs, args.steps or 8, args.episodes, args.env)
    else:
        benchmarks.bench_gpu(args.model, args.num_envs, args.height, args.width, args.frames, args.steps or 10,
                             args.guidance, args.pipeline_samples, args.episodes)
    return 0


def evaluate(args) -> int:
    from .evaluate import adherence, report

    result = adherence(args.env, args.samples, args.seed, device=args.device)
    text = report(result)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cosmos3-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="run one episode, print per-step log-probs, write the video")
    p.add_argument("--env", default="Cosmos3Rollout-v0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", default=None)
    p.add_argument("--steps", type=int, default=None, help="override the preset's num_steps")
    p.add_argument("--device", default=None, help="cpu / cuda (default: cuda if available)")
    p.add_argument("--out", default="out/demo.mp4")
    p.add_argument("--trajectory", default=None, help="also save the trajectory (.safetensors)")
    p.set_defaults(func=demo)

    p = sub.add_parser("rollout", help="run episodes and save their trajectories")
    p.add_argument("--env", default="Cosmos3Rollout-v0")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None)
    p.add_argument("--out", default="out/trajectories")
    p.set_defaults(func=rollout)

    p = sub.add_parser("check", help="run Gymnasium's and SB3's env checkers on every env id")
    p.set_defaults(func=check)

    p = sub.add_parser("bench", help="samples/s of the vector env against the usual alternative, side by side")
    p.add_argument("--cpu", action="store_true", help="embedded model on the CPU, against SyncVectorEnv")
    p.add_argument("--env", default="Cosmos3Rollout-v0", help="env id for --cpu")
    p.add_argument("--model", choices=["edge", "nano"], default="edge", help="GPU: random weights at this size")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--frames", type=int, default=21)
    p.add_argument("--steps", type=int, default=None, help="denoising steps (default 10 on GPU, 8 with --cpu)")
    p.add_argument("--guidance", type=float, default=6.0)
    p.add_argument("--pipeline-samples", type=int, default=4, help="GPU: timed diffusers pipeline calls")
    p.add_argument("--episodes", type=int, default=2, help="timed episodes of the vector env")
    p.set_defaults(func=bench)

    p = sub.add_parser("evaluate", help="colour and direction accuracy of generated videos (world captions)")
    p.add_argument("--env", default="Cosmos3Rollout-v0")
    p.add_argument("--samples", type=int, default=128)
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--device", default=None)
    p.add_argument("--out", default=None, help="also write the report to this file")
    p.set_defaults(func=evaluate)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
