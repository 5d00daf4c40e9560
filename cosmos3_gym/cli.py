"""cosmos3-gym demo | rollout | check | bench | evaluate | world-eval: Cosmos 3 envs from the command line.

Inputs, the device and output paths are checked before any model loads (exit code 2 on a bad
one); existing outputs are kept unless --overwrite. demo, rollout, evaluate, world-eval and bench --cpu run
torch on 1 CPU thread unless --threads N or OMP_NUM_THREADS says otherwise.
`cosmos3-gym COMMAND --help` lists a command's flags.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from . import __version__, preset_tables
from .model.tasks import ROBOT_TASKS, TASKS, Task
from .train.args import unknown_flags_error

# The modes of `bench` (the keys of cosmos3_gym.bench.BENCH_MODES, which imports torch: --help does not).
BENCH_MODES = (str(Task.T2V), str(Task.POLICY), str(Task.FORWARD_DYNAMICS), "world")
# What SB3's checker says of an unbounded Box (noise mode's action space, by design).
SB3_UNBOUNDED = "finite lower and upper bound"
LOG_PROB_NOTE = ("log_prob depends only on the step's sampled noise and its scale (sigma, noise_level), not on "
                 "the predicted mean: at one seed it is the same for every prompt.")


def _upscaled(frames: np.ndarray, min_side: int = 256) -> np.ndarray:
    """Nearest-neighbour upscaling so that tiny videos are visible in a player."""
    factor = max(1, min_side // min(frames.shape[1:3]))
    return frames.repeat(factor, axis=1).repeat(factor, axis=2)


class OutputError(Exception):
    """An output file that could not be written once the command ran; :func:`main` reports it
    the way argparse reports a bad argument (one line, exit code 2), not as a traceback."""


def _written_through(path: Path) -> bool:
    """Whether ``path`` is (or links to) a character device or FIFO: ``/dev/null``, ``/dev/full``, a
    named pipe. Those are written in place and keep their name (see ``rollout.trajectory.write_bytes``)."""
    import stat

    try:
        mode = Path(path).stat().st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def video_path(path: Path, num_frames: int) -> Path:
    """The file :func:`write_video` writes for ``path``: a single frame becomes a ``.png`` (a device
    or FIFO such as ``/dev/null`` keeps its name)."""
    path = Path(path)
    return path.with_suffix(".png") if num_frames == 1 and not _written_through(path) else path


def video_format(path: Path, num_frames: int) -> str:
    """The suffix that picks imageio's writer for ``path``: ``.png`` for one frame, else the path's
    own, ``.mp4`` for a suffix-less device or FIFO (``/dev/null``); ``""`` when there is none."""
    if num_frames == 1:
        return ".png"
    suffix = Path(path).suffix.lower()
    return ".mp4" if not suffix and _written_through(path) else suffix


def _writing(flag: str, path, write) -> None:
    """Run ``write()``; an ``OSError`` (no space left, permission denied) becomes an :class:`OutputError`
    naming ``flag`` and ``path``."""
    try:
        write()
    except OSError as error:
        import errno

        hint = "free some space" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "check its permissions"
        raise OutputError(f"argument {flag}: cannot write {str(path)!r}: {error.strerror or error}; {hint}, or "
                          f"choose another path") from error


def write_video(path: Path, frames: np.ndarray, fps: float) -> Path:
    """Write uint8 ``[F, H, W, 3]`` with imageio: mp4 (ffmpeg) or gif for videos, png for one frame.

    The file is encoded in a temporary folder, then written with ``write_bytes``: a regular file is
    replaced atomically (a failed write leaves the old one), a symlink is written through, and
    ``/dev/null`` or a FIFO is written in place, never replaced. ``OSError`` names ``path``.
    """
    import imageio.v2 as imageio

    from .rollout.trajectory import write_bytes

    path = video_path(path, len(frames))
    suffix = video_format(path, len(frames))
    frames = _upscaled(frames)
    with tempfile.TemporaryDirectory() as folder:
        staged = Path(folder) / f"video{suffix}"
        if len(frames) == 1:
            imageio.imwrite(staged, frames[0])
        elif suffix == ".gif":
            imageio.mimwrite(staged, list(frames), duration=1000.0 / fps, loop=0)
        else:
            imageio.mimwrite(staged, list(frames), fps=fps, macro_block_size=1)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, staged.read_bytes())
    return path


def demo(args) -> int:
    import gymnasium as gym
    import torch
    from tqdm import tqdm

    import cosmos3_gym  # noqa: F401

    overrides = {"num_steps": args.steps} if args.steps is not None else {}
    env = gym.make(args.env, device=args.device, **overrides)
    options = {"prompt": args.prompt} if args.prompt else None
    _, info = env.reset(seed=args.seed, options=options)
    print(f"env {args.env}  prompt {info['prompt']!r}  seed {info['seed']}")
    rows, seconds, terminated = [], [], False
    with tqdm(total=env.unwrapped.engine.num_steps, desc="denoising", unit="step", file=sys.stderr) as bar:
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
    print(LOG_PROB_NOTE)
    engine = env.unwrapped.engine
    threads = torch.get_num_threads()
    print(f"device {engine.device} ({threads} CPU thread{'s' * (threads != 1)}), dtype {engine.model.dtype}, "
          f"attention {engine.model.attention}; "
          f"median seconds per step {np.median(seconds):.4f} (step 0 computes the prompt tokens and, on a GPU, "
          f"compiles the attention kernels; the last step also decodes what the reward reads)")
    if "frames" in step_info:
        fps, frames = env.unwrapped.preset.fps / 3, step_info["frames"]
        _writing("--out", video_path(Path(args.out), len(frames)), lambda: write_video(Path(args.out), frames, fps))
        kind = "image (a one-frame env)" if len(frames) == 1 else "video"
        print(f"reward {reward:.4f}  {kind} {video_path(Path(args.out), len(frames))}")
    elif step_info.get("error"):  # a non-finite latent ended the episode: nothing to decode
        print(f"reward {reward:.4f}  no video: {step_info['error']}")
    else:  # a reward that reads no frames (reward="none", as inverse dynamics has by default): nothing decoded
        print(f"reward {reward:.4f}  (no frames decoded: this env's reward reads none, so no video was written)")
    if "actions" in step_info:
        actions = np.asarray(step_info["actions"])
        given = TASKS[env.unwrapped.preset.task].robot_chunk == "given"  # forward dynamics is given them
        print(f"{'given' if given else 'generated'} actions {actions.shape} (the embodiment's units), first: "
              f"{np.array2string(actions[0], precision=3, separator=', ')}")
    if args.trajectory:
        _writing("--trajectory", args.trajectory, lambda: step_info["trajectory"].save(args.trajectory))
        print(f"trajectory {args.trajectory}")
    return 0


def rollout(args) -> int:
    import gymnasium as gym
    from tqdm import tqdm

    import cosmos3_gym  # noqa: F401

    env = gym.make(args.env, device=args.device)
    out = Path(args.out)
    for episode in tqdm(range(args.episodes), desc="episodes", file=sys.stderr):
        env.reset(seed=args.seed + episode)
        terminated = False
        while not terminated:
            _, reward, terminated, _, info = env.step(env.unwrapped.default_action)
        info["trajectory"].extra["reward"] = reward
        path = out / f"episode_{episode:04d}.safetensors"
        _writing("--out", path, lambda: info["trajectory"].save(path))
        tqdm.write(f"{path}: seed {args.seed + episode}, prompt {info['trajectory'].prompt!r}, reward {reward:.4f}")
    print(f"{args.episodes} trajectories in {out}")
    return 0


def check(args) -> int:
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env as gym_check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    import cosmos3_gym

    wanted = args.env or _registered_env_ids()
    cases = [(env_id, {"action_mode": mode, "num_steps": 2}, mode) for env_id in cosmos3_gym.ENV_IDS
             for mode in ("control", "noise") if env_id in wanted]
    from .world.pusht_coverage import PUSHT_INSTALL

    has_gym_pusht = importlib.util.find_spec("gym_pusht") is not None
    pusht = [env_id for env_id in cosmos3_gym.PUSHT_ENV_IDS if env_id in wanted]
    if pusht and not has_gym_pusht:  # on stderr: stdout keeps one line per check
        print(f"{' and '.join(pusht)} not checked: gym-pusht is not installed: {PUSHT_INSTALL}", file=sys.stderr)
        if args.env:  # asked for by name: nothing it asked for may go unchecked quietly
            return 2
        pusht = []
    cases += [(env_id, {"num_steps": 2} if env_id.startswith("Cosmos3") else {}, "") for env_id in
              (*[w for w in cosmos3_gym.WORLD_ENV_IDS if w in wanted], *pusht)]
    failures = refused = advice = 0
    for env_id, kwargs, mode in cases:
        caught: list[warnings.WarningMessage] = []
        for checker in ("gymnasium", "sb3"):
            try:
                with warnings.catch_warnings(record=True) as recorded:  # reported below, once each
                    warnings.simplefilter("always")
                    env = gym.make(env_id, **kwargs).unwrapped
                    try:
                        if checker == "gymnasium":
                            gym_check_env(env)
                        else:
                            sb3_check_env(env, warn=True)
                    finally:
                        env.close()
                caught += recorded
                status = "ok"
                if checker == "sb3" and isinstance(env.action_space, gym.spaces.Dict):
                    status = ("checked, but SB3's algorithms take no Dict action space (noise mode of a "
                              "multi-stream env is for custom trainers)")
            except Exception as error:  # report every failure, then exit non-zero
                if checker == "sb3" and mode == "noise" and SB3_UNBOUNDED in str(error):
                    refused += 1
                    status = f"refused by SB3, as designed (noise mode is for custom trainers): {error}"
                else:
                    failures += 1
                    status = f"FAILED: {error}"
                caught += recorded
            print(f"{env_id:<34} {mode or '-':<8} {checker:<10} {status}")
        for message in _plain_warnings(caught):  # on stderr: stdout keeps one line per check
            advice += 1
            print(f"{env_id:<34} {mode or '-':<8} warning    {message}", file=sys.stderr)
    print(f"{2 * len(cases)} checks ({len(cases)} " + ("env in one action mode" if len(cases) == 1 else
                                                        "envs and action modes") + " x Gymnasium, SB3): "
          + (f"{failures} FAILED (above)" if failures else "none failed")
          + (f", {refused} refused by SB3 as designed (noise mode)" if refused else "")
          + (f"; {advice} lines of the checkers' advice on stderr" if advice else ""))
    return 1 if failures else 0


def _plain_warnings(caught) -> list[str]:
    """The text of each distinct warning, in order, without the terminal colour codes Gymnasium
    wraps its own in (``\\x1b[33mWARN: ...\\x1b[0m``) or its ``WARN:`` prefix."""
    messages = []
    for warning in caught:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(warning.message)).strip()
        text = text.removeprefix("WARN:").strip()
        if text not in messages:
            messages.append(text)
    return messages


def world_eval(argv: list[str]) -> int:
    from . import world_eval as harness

    harness.main(argv)
    return 0


def bench(args) -> int:
    from . import bench as benchmarks

    if args.mode == "world":
        benchmarks.bench_world(args.model, args.num_envs, args.height, (args.frames or 9) - 1, args.steps or 4,
                               args.guidance, args.pipeline_samples, args.episodes,
                               device="cpu" if args.cpu else "cuda")
    elif args.cpu:
        benchmarks.bench_cpu(args.num_envs, args.steps or 8, args.episodes, args.env)
    elif args.workers:
        benchmarks.bench_workers(args.model, args.num_envs, args.height, args.width or 832, args.frames or 21,
                                 args.steps or 10, args.guidance, args.episodes, args.workers)
    else:
        frames = args.frames or (21 if args.mode == "t2v" else 17)
        benchmarks.bench_gpu(args.model, args.num_envs, args.height, args.width or 832, frames, args.steps or 10,
                             args.guidance, args.pipeline_samples, args.episodes, mode=args.mode)
    return 0


def evaluate(args) -> int:
    from .evaluate import action_accuracy, adherence, report

    action = preset_tables()[args.env].get("conditioning") in ROBOT_TASKS
    measure = action_accuracy if action else adherence
    flags = (("noise_level", args.noise_level), ("guidance_scale", args.guidance_scale), ("num_steps", args.steps))
    sampler = {name: value for name, value in flags if value is not None}
    checkpoint = {} if args.checkpoint is None else {"checkpoint": args.checkpoint}
    result = measure(args.env, args.samples, args.seed, device=args.device, **checkpoint, **sampler)
    text = report(result)
    print(text)
    if args.out:
        from .rollout.trajectory import write_bytes

        _writing("--out", args.out, lambda: write_bytes(args.out, (text + "\n").encode()))
    return 0


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (0 or a negative count used to be ignored or run silently)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; use an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is invalid; use an integer >= 1")
    return value


def _prompt(text: str) -> str:
    """argparse type: a non-blank prompt (an empty one used to fall back to a preset prompt unnoticed)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty; pass a non-blank prompt, or omit --prompt to draw "
                                         "one of the preset's prompts")
    return text


def folder_error(folder: Path) -> str | None:
    """Why ``folder`` cannot be written (it is made if missing and proven writable with a temporary
    file), or None: a bad path fails before the work, not after it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return f"cannot write to folder {str(folder)!r} ({error.strerror or error}); choose a writable path"
    return None


def _check_folder(parser, flag: str, folder: Path) -> None:
    """Create ``folder`` and prove it writable now, so that a bad path fails before the episode runs."""
    error = folder_error(folder)
    if error:
        parser.error(f"argument {flag}: {error}")


def _check_file(parser, flag: str, path: Path, overwrite: bool) -> None:
    """``path`` (the file that will actually be written) must be new unless --overwrite, in a writable
    folder; a character device or FIFO (``/dev/null``) is written in place, so it must be writable."""
    import os

    from .rollout.trajectory import output_target

    if path.is_dir():
        parser.error(f"argument {flag}: {str(path)!r} is a directory; pass a file path")
    try:
        target, _ = output_target(path)  # refuses a block device or socket
    except ValueError as error:
        parser.error(f"argument {flag}: {error}")
    if path.exists() and not overwrite:
        action = "write into it" if _written_through(path) else "replace it"
        parser.error(f"argument {flag}: {str(path)!r} exists; pass --overwrite to {action}, or choose another path")
    if _written_through(path):
        if not os.access(target, os.W_OK):
            parser.error(f"argument {flag}: {str(path)!r} is not writable; choose another path")
        return
    _check_folder(parser, flag, target.parent)


def _resolve_bench_defaults(parser, args) -> None:
    """bench's size defaults follow the machine: the embedded model at 32x32 for the world on the CPU (Edge
    at 480x480 would not finish there), Edge at 480 elsewhere; --cpu times one env, so --mode is refused."""
    if args.cpu and args.mode not in ("t2v", "world"):
        parser.error(f"--mode {args.mode} does not apply with --cpu: the CPU bench times the env of --env "
                     "(default Cosmos3Rollout-v0; e.g. --env Cosmos3PolicyRollout-v0), or --mode world the world env")
    args.model = args.model or ("tiny" if args.cpu and args.mode == "world" else "edge")
    args.height = args.height or (32 if args.model == "tiny" else 480)


def _check_seed(parser, args) -> None:
    """--seed and the seeds it implies (seed .. seed + count - 1: demo's one episode, rollout's
    episodes, evaluate's padded batches) lie in the envs' seed range: refused before any model loads."""
    from .rollout.seeding import per_env_seeds

    # evaluate resets 32 envs at a time (16 in the action modes), the last batch padded: its seeds run to
    # the next multiple of 32 (cosmos3_gym.evaluate.generations)
    count = {"demo": 1, "rollout": getattr(args, "episodes", 1), "evaluate": -(-getattr(args, "samples", 1) // 32) * 32}
    if args.command not in count:
        return
    try:
        per_env_seeds(args.seed, count[args.command])
    except ValueError:
        implied = f" (the seeds used are seed .. seed + {count[args.command] - 1})" if count[args.command] > 1 else ""
        parser.error(f"argument --seed: {args.seed} is invalid; use a seed in [0, 2**63 - {count[args.command]}]"
                     f"{implied}")


def _check_outputs(parser, args) -> None:
    for flag in ("out", "trajectory"):  # an empty path would be skipped unnoticed, writing nothing
        value = getattr(args, flag, None)
        if value is not None and not value.strip():
            parser.error(f"argument --{flag}: {value!r} is empty; name a path, or leave the flag out")
    if args.command == "demo":
        from imageio.config import known_extensions

        num_frames = preset_tables()[args.env].get("num_frames", 9)
        suffix = video_format(Path(args.out), num_frames)
        if suffix not in known_extensions:
            what = f"its extension {suffix!r} is no format imageio knows" if suffix else "it has no file extension"
            parser.error(f"argument --out: {args.out!r}: {what} (imageio picks the video format by it); end it in "
                         ".mp4 or .gif (a one-frame env writes a .png)")
        _check_file(parser, "--out", video_path(Path(args.out), num_frames), args.overwrite)
        if args.trajectory:
            _check_file(parser, "--trajectory", Path(args.trajectory), args.overwrite)
    elif args.command == "rollout":
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            parser.error(f"argument --out: {args.out!r} is a file; rollout writes a folder of trajectories")
        existing = [out / f"episode_{k:04d}.safetensors" for k in range(args.episodes)]
        existing = [p for p in existing if p.exists()]
        if existing and not args.overwrite:
            parser.error(f"argument --out: {len(existing)} of the {args.episodes} trajectory files exist in "
                         f"{args.out!r} (e.g. {existing[0].name}); pass --overwrite to replace them, or choose "
                         "another folder")
        _check_folder(parser, "--out", out)
    elif args.command == "evaluate" and args.out:
        _check_file(parser, "--out", Path(args.out), args.overwrite)


def _check_device(parser, args) -> None:
    """Resolve --device (default: cuda if available) and refuse one torch cannot use, before any model loads."""
    from .model.model import checked_device

    try:
        args.device = str(checked_device(args.device, name="argument --device", cpu_hint="--device cpu"))
    except ValueError as error:
        parser.error(str(error))


THREADS_HELP = ("torch's CPU threads (default: 1 when running on the CPU, unless OMP_NUM_THREADS is set; "
                "the tiny model's ops are too small to use more, and spare threads spin against other "
                "processes: a demo step went from 6 ms to 1.46 s on a busy 2-core machine)")


def _unknown_env_id(text: str, env_ids: list[str]) -> argparse.ArgumentTypeError:
    """argparse's own "invalid choice" message, with the closest id first (as gym.make suggests one)."""
    close = difflib.get_close_matches(text, env_ids, n=1)
    return argparse.ArgumentTypeError(f"invalid choice: {text!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                                      + f" (choose from {', '.join(env_ids)})")


def _rollout_env_id(text: str) -> str:
    """``--env``'s value; a world env's id gets where world envs are used instead of a bare invalid choice."""
    import cosmos3_gym

    if text in (*cosmos3_gym.WORLD_ENV_IDS, *cosmos3_gym.PUSHT_ENV_IDS):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a world env, and --env takes a rollout env ({', '.join(preset_tables())}). The world envs: "
            f"`cosmos3-gym world-eval` scores them (--world pusht for PushT), `bench --mode world` times "
            f"Cosmos3World-v0, `check` checks them all, and gym.make({text!r}) makes one "
            f"(examples/dream_to_real.py, examples/pusht_dream.py)")
    if text not in preset_tables():
        raise _unknown_env_id(text, list(preset_tables()))
    return text


def _registered_env_ids() -> list[str]:
    """Every id the package registers: the rollout presets, then the world envs."""
    import cosmos3_gym

    return [*cosmos3_gym.ENV_IDS, *cosmos3_gym.WORLD_ENV_IDS, *cosmos3_gym.PUSHT_ENV_IDS]


def _any_env_id(text: str) -> str:
    """``check --env``'s value: any registered id, rollout preset or world env."""
    env_ids = _registered_env_ids()
    if text not in env_ids:
        raise _unknown_env_id(text, env_ids)
    return text


def build_parser() -> argparse.ArgumentParser:
    env_ids = list(preset_tables())
    env_help = "env id, one per envs/*.toml: " + ", ".join(env_ids) + " (default: %(default)s)"
    parser = argparse.ArgumentParser(prog="cosmos3-gym", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, **kwargs) -> argparse.ArgumentParser:
        """A subcommand whose own --help opens with its one-line summary (unless given a description)."""
        kwargs.setdefault("description", help[0].upper() + help[1:] + ".")
        # allow_abbrev=False: a prefix is not taken for a longer flag (evaluate's --guidance for --guidance-scale)
        return sub.add_parser(name, help=help, allow_abbrev=False, **kwargs)

    def common(p, device=True, threads=True, overwrite=True):
        p.add_argument("--env", default="Cosmos3Rollout-v0", type=_rollout_env_id, choices=env_ids, metavar="ENV_ID",
                       help=env_help)
        if device:
            p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda if available)")
        if threads:
            p.add_argument("--threads", type=_positive_int, default=None, metavar="N", help=THREADS_HELP)
        if overwrite:
            p.add_argument("--overwrite", action="store_true", help="replace existing output files "
                           "(default: refuse, before anything runs)")

    p = command("demo", help="run one episode, print per-step log-probs, write the video",
                description="Run one episode of a rollout preset (--env: Cosmos3Rollout-v0 and the other generation "
                "presets), print per-step log-probs, write the video. The world envs (Cosmos3World-v0, "
                "Cosmos3PushT-v0) are not demo targets: the README's world section and examples/ run them.")
    common(p)
    p.add_argument("--seed", type=int, default=0, help="the episode's seed (default: %(default)s)")
    p.add_argument("--prompt", type=_prompt, default=None, help="the prompt (default: one of the preset's)")
    p.add_argument("--steps", type=_positive_int, default=None, help="denoising steps, >= 1 (default: the preset's "
                   "num_steps)")
    p.add_argument("--out", default="out/demo.mp4", help="the video (any format imageio writes: .mp4, .gif, "
                   "...; a one-frame env writes a .png of the same name) (default: %(default)s)")
    p.add_argument("--trajectory", default=None, help="also save the trajectory here (.safetensors)")
    p.set_defaults(func=demo)

    p = command("rollout", help="run episodes and save their trajectories")
    common(p)
    p.add_argument("--episodes", type=_positive_int, default=4, help="episodes, >= 1 (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of episode 0; episode k uses seed + k "
                   "(default: %(default)s)")
    p.add_argument("--out", default="out/trajectories", help="folder for episode_NNNN.safetensors "
                   "(default: %(default)s)")
    p.set_defaults(func=rollout)

    p = command("check", help="run Gymnasium's and SB3's env checkers on every env id",
                       description="Run Gymnasium's check_env and SB3's check_env on every registered env id: the "
                       "rollout presets in control and noise action modes (2 denoising steps each) and the world "
                       "envs; print one line per check and exit 1 if any failed, and on stderr each distinct warning "
                       "the checkers raised for an env, once, as plain text. SB3 refuses noise mode by design "
                       "(an unbounded action space): that line reports SB3's own message; where SB3's checker "
                       "passes a Dict action space (noise mode of the sound and action envs), the line says that "
                       "SB3's algorithms do not take it. All of them take about 2.5 minutes on a 2-core CPU; "
                       "--env ID (again for more) checks those alone.")
    p.add_argument("--env", action="append", type=_any_env_id, default=None, metavar="ENV_ID",
                   help="check only this env id (give it again for more; default: every registered id)")
    p.add_argument("--threads", type=_positive_int, default=None, metavar="N", help=THREADS_HELP)
    p.set_defaults(func=check)

    p = command("bench", help="samples/s of the vector env against diffusers' pipeline (GPU) or "
                       "SyncVectorEnv (--cpu)")
    p.add_argument("--cpu", action="store_true", help="on the CPU: the embedded model against SyncVectorEnv (with "
                   "--mode world: the world bench)")
    common(p, device=False, overwrite=False)
    p.add_argument("--model", choices=["edge", "nano", "tiny"], default=None, help="GPU: random weights at this "
                   "size; tiny: the embedded model (--mode world only) (default: edge; tiny with --cpu --mode world)")
    p.add_argument("--num-envs", type=_positive_int, default=16, help="envs stepped together (default: %(default)s)")
    p.add_argument("--height", type=_positive_int, default=None, help="GPU: pixels (default: 480; 32 with --model "
                   "tiny)")
    p.add_argument("--width", type=_positive_int, default=None, help="GPU: pixels (default: 832; --mode world is "
                   "square, --height pixels)")
    p.add_argument("--frames", type=_positive_int, default=None, help="GPU: video frames (default 21; 17 in an "
                   "action mode: a chunk of 16 actions)")
    p.add_argument("--workers", type=_positive_int, default=None, metavar="W", help="GPU: samples/s on W GPUs "
                   "(one Ray actor each, the [ray] extra) against 1, same episodes")
    p.add_argument("--mode", choices=BENCH_MODES, default="t2v", help="GPU: text-to-video, or an action rollout "
                   "(each env conditioned on its own frame, and actions) against the pipeline's "
                   "CosmosActionCondition; world: Cosmos3World-v0's vector env (--height pixels square, "
                   "--frames - 1 actions per chunk, default 8; --episodes timed env steps) against the "
                   "pipeline in forward-dynamics mode once per env and chunk (default: %(default)s)")
    p.add_argument("--steps", type=_positive_int, default=None, help="denoising steps (default 10 on GPU, 8 with "
                   "--cpu, 4 in --mode world)")
    p.add_argument("--guidance", type=float, default=6.0, help="GPU: guidance scale (default: %(default)s)")
    p.add_argument("--pipeline-samples", type=_positive_int, default=4, help="GPU: timed diffusers pipeline calls "
                   "(default: %(default)s)")
    p.add_argument("--episodes", type=_positive_int, default=2, help="timed episodes of the vector env "
                   "(default: %(default)s)")
    p.set_defaults(func=bench)

    p = command("evaluate", help="colour and direction accuracy of generated videos for the world's "
                       "captions, read back with its detector (an audio-video env's sound is not scored)")
    common(p)
    p.add_argument("--samples", type=_positive_int, default=128, help="generated videos (default: %(default)s)")
    p.add_argument("--seed", type=int, default=2024, help="seed of the captions and of the episodes "
                   "(default: %(default)s)")
    p.add_argument("--out", default=None, help="also write the report to this file")
    p.add_argument("--noise-level", type=float, default=None, help="the SDE's noise level in [0, 1]; 0 samples "
                   "deterministically (default: the preset's, 0.7)")
    p.add_argument("--guidance-scale", type=float, default=None, help="classifier-free guidance in [1, 10]; 1 runs "
                   "no unconditional pass (default: the preset's, 4)")
    p.add_argument("--steps", type=_positive_int, default=None, help="denoising steps, >= 1 (default: the preset's "
                   "num_steps)")
    p.add_argument("--checkpoint", default=None, metavar="DIR", help="score these weights: a local diffusers-layout "
                   "Cosmos 3 checkpoint, such as the --out of python -m cosmos3_gym.train.world_model (default: the "
                   "preset's, the embedded model)")
    p.set_defaults(func=evaluate)

    p = command("world-eval", add_help=False, help="score Cosmos3World-v0 against ProceduralWorld-v0 "
                       "(action sensitivity, policy ranking, exploit rate); `world-eval --help` lists its flags",
                       description="How far can the dream be trusted? See `cosmos3-gym world-eval --help`.")
    p.set_defaults(func=world_eval)  # main() hands the flags to cosmos3_gym.world_eval's own parser
    parser.commands = sub.choices
    return parser


def main(argv=None) -> int:
    """Parse, check every input and output path (exit 2 on a bad one), set torch's threads, run the command."""
    from .model.threads import configure_threads

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["world-eval"]:  # its flags are a dataclass's (cosmos3_gym.world_eval.WorldEvalArgs)
        return world_eval(argv[1:])
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    command_parser = parser.commands[args.command]  # its errors start "cosmos3-gym demo: error:"
    before = argv[:argv.index(args.command)]  # the top level takes no flag but --help
    if before:
        parser.error(f"unrecognized arguments: {' '.join(before)}; a command's flags go after it: cosmos3-gym "
                     f"{args.command} {' '.join(before)} ...")
    if unknown:  # with the command's usage, not the top level's
        unknown_flags_error(command_parser, unknown, f"cosmos3-gym {args.command}")
    if hasattr(args, "device"):
        _check_device(command_parser, args)
    _check_seed(command_parser, args)
    _check_outputs(command_parser, args)  # after the device check: it creates the output folders
    if args.command == "bench":
        _resolve_bench_defaults(command_parser, args)
    if args.command == "bench" and args.model == "tiny" and args.mode != "world":
        command_parser.error(f"--model tiny is for --mode world only (got --mode {args.mode}); use edge or nano")
    if args.command == "bench" and args.mode == "world":
        for flag, value in (("--workers", args.workers), ("--width", args.width)):
            if value is not None:
                command_parser.error(f"{flag} {value} does not apply to --mode world (one GPU, square frames of "
                                     "--height pixels); leave it out")
        if args.frames is not None and args.frames < 2:
            command_parser.error(f"--frames {args.frames} is invalid in --mode world: use >= 2 (the first frame "
                                 "and one per action of the chunk)")
    if args.command == "evaluate":
        if args.checkpoint is not None:
            from .model.model import check_checkpoint

            if not args.checkpoint.strip():
                command_parser.error(f"argument --checkpoint: {args.checkpoint!r} is empty; pass a checkpoint "
                                     "folder, or leave the flag out for the preset's model")
            try:
                check_checkpoint(args.checkpoint)
            except (FileNotFoundError, ValueError) as error:
                command_parser.error(f"argument --checkpoint: {error}")
        preset = preset_tables()[args.env]
        for flag, value, bounds in (("--noise-level", args.noise_level, preset["noise_level_bounds"]),
                                    ("--guidance-scale", args.guidance_scale, preset["guidance_bounds"])):
            if value is not None and not bounds[0] <= value <= bounds[1]:
                command_parser.error(f"{flag} {value} is outside {args.env}'s bounds [{bounds[0]}, {bounds[1]}]; "
                                     "pick a value inside them or leave the flag out for the preset's")
    if args.command == "bench" and not args.cpu:
        import torch

        if not torch.cuda.is_available():
            command_parser.error("the GPU bench needs a CUDA device and none is available; "
                                 "use --cpu for the CPU bench (embedded model against SyncVectorEnv)")
    device = ("cpu" if args.cpu else "cuda") if args.command == "bench" else getattr(args, "device", None)
    configure_threads(getattr(args, "threads", None), device)
    try:
        return args.func(args)
    except (OutputError, ValueError) as error:  # no space left, a seed or prompt the env refuses: one line, exit 2
        command_parser.error(str(error))


if __name__ == "__main__":
    sys.exit(main())
