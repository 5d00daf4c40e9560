"""How far can the dream be trusted? ``Cosmos3World-v0`` scored against ``ProceduralWorld-v0``, or
``Cosmos3PushT-v0`` against gym-pusht (``--world pusht``).

    cosmos3-gym world-eval --out out/world_eval   # world_eval.json, .md, .png there (2-core CPU: ~13 min)
    cosmos3-gym world-eval --num-steps 4 --episodes 4   # a quicker look (~4 min)
    cosmos3-gym world-eval --world pusht --num-steps 4 --episodes 10 --out out/pusht_eval   # ~27 min

The .md explains its terms (exploits, MMRV, ...) and ends each setting with its verdict against the
targets of its world (procedural: sensitivity ratio <= 0.2, Spearman rho >= 0.95, exploit rate
<= 5 %; PushT: 0.3, 0.9 on return, 10 %). An exploit rate of a few percent needs a hundred or more
seeds: split a run by ``--seed`` over processes and join them with benchmarks/pool_world_eval.py.

For each number of denoising steps per imagined chunk (``--num-steps``, comma-separated; 8 is
``Cosmos3World-v0``'s default), :func:`cosmos3_gym.world.harness.evaluate_world` runs the imagined
world against its twin over reset seeds ``seed .. seed + episodes - 1``: action sensitivity (the
imagined-vs-true object-centre error under the true, shuffled and zero actions, per step of the
horizon: ``--horizon`` chunks per episode in both worlds), the procedural world's scripted policies
in both worlds (success and return with bootstrap intervals; Pearson r, Spearman rho, MMRV across
policies) and the exploit rate (imagined successes whose actions fail when replayed in the truth).
One shared model serves every setting.

With ``--world pusht`` the same measurements use :mod:`cosmos3_gym.world.pusht_eval`'s pieces: the
agent's and the block's position error, block IoU and coverage error per step, random walks of the
agent's target, PushT's reference policies (``--noise-levels`` in canvas units; a nearest-neighbour
clone of ``--clone-clips`` scripted pushes made with gym-pusht), and the figure's bars show the mean
return (successes from gym-pusht's random starts are rare).
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import ClassVar

import gymnasium as gym

from .train.args import comma_separated, guidance_override, parse_args, require_at_least
from .world.harness import evaluate_world, key_numbers, markdown_report, plot_report, scripted_policies
from .rollout.procedural_world import GOALS, checked_success_margin
from .rollout.seeding import per_env_seeds
from .world.pusht_coverage import require_gym_pusht


WORLD_ENVS = {"procedural": "Cosmos3World-v0", "pusht": "Cosmos3PushT-v0"}  # --world: the imagined env it scores
WORLDS = tuple(WORLD_ENVS)
# The trust targets of each world: sensitivity ratio at most, Spearman rho (the figure's metric) at least,
# exploit rate at most
TARGETS = {"procedural": {"ratio": 0.2, "spearman": 0.95, "exploit_rate": 0.05},
           "pusht": {"ratio": 0.3, "spearman": 0.9, "exploit_rate": 0.10}}
LEGEND = """How to read it (cosmos3_gym.world.harness): the dream and its twin start every episode from the same
reset seed.
- Action sensitivity: the object's centre in the dream against the twin's, in pixels, under the episode's own
  actions, another episode's (shuffled) and zero actions. The ratio is the median error under the true actions over
  the median under shuffled ones: 0 when the dream follows the actions, about 1 when it ignores them. A step pair is
  one step compared where both episodes still run; a drift of n/a is a step no episode reached (success ends one).
- Per policy: success and return in each world, the mean over the episodes with a 95 % bootstrap interval [low, high].
  "object lost": the share of imagined episodes whose last frame shows no object.
- Exploits k/n: of n imagined successes, k whose actions, replayed open loop in the twin from the same seed, never
  succeed there. A policy can succeed as often in both worlds and still exploit: other episodes succeed in each.
- Across policies: Pearson r and Spearman rho of the scores in the two worlds, and MMRV (mean maximum rank violation:
  for each policy, the largest true-score gap to a policy the dream orders the other way; 0 = the dream's ranking
  loses nothing, in the units of the score).
"""
# PushT's report reads positions otherwise (cosmos3_gym.world.pusht_eval): the two lines that differ
PUSHT_LEGEND = LEGEND.replace(
    "the object's centre in the dream against the twin's, in pixels, under the episode's own\n"
    "  actions, another episode's (shuffled) and zero actions.",
    "the agent's and the block's colour masses in the dream against the twin's (the mean of the\n"
    "  two errors, in pixels of the 96x96 frame; a frame without one counts its diagonal), under the episode's own\n"
    "  actions, another episode's (shuffled) and held ones (every target at the canvas centre; the JSON keeps the key\n"
    "  \"zero\" for them).").replace(
    '"object lost": the share of imagined episodes whose last frame shows no object.',
    '"object lost": the share of imagined episodes whose last frame no T pose fits (the block is lost).')
DTYPES = ("", "float32", "bfloat16")  # world-eval's --dtype ("": the model's default for its device)
OUTPUTS = ("world_eval.json", "world_eval.md", "world_eval.png")  # what a run writes in --out


@dataclass
class WorldEvalArgs:
    world: str = "procedural"  # procedural: Cosmos3World-v0 vs ProceduralWorld-v0; pusht: Cosmos3PushT-v0 vs gym-pusht
    episodes: int = 12  # reset seeds per policy (and per sensitivity condition), >= 2 (shuffling needs another)
    num_steps: str = "8,4"  # denoising steps per imagined chunk, comma-separated (8: the envs' default)
    guidance: float = 0.0  # classifier-free guidance scale of the imagined world (0: the env's default, Cosmos3World-v0's 1 and Cosmos3PushT-v0's 4; 1: none, half the rows)
    noise_levels: str = ""  # the greedy policies' command noise, comma-separated ("": 0,1,2,4,8; pusht: 0,20,40)
    sde_noise: str = ""  # the imagined world's SDE noise level in [0, 1] ("": the env's, 0.7; 0: deterministic)
    horizon: int = 8  # chunks per episode in both worlds (8: the procedural worlds' default; gym-pusht's 300 steps are 38)
    clone_clips: int = 400  # pusht: scripted pushes (gym-pusht) the nearest-neighbour clone policy learns from
    goal: str = ""  # "" a random corner per episode (the scripted policies read it from the prompt), or e.g. "top left"
    seed: int = 0  # reset seeds seed ..; also the shuffle, the random actions and the bootstrap
    checkpoint: str = ""  # the world model's weights (default: the embedded model; pusht: the shipped PushT model)
    disagreement: int = 0  # K >= 2: sample each imagined step K times (K times slower); AUROC of the spread
    success_margin: float = 0.0  # pixels, in [0, 4.8): imagined success needs the object this much nearer the goal than the true world's radius (4.8 px); 0: the same rule
    device: str = ""  # "": cuda where torch sees a GPU, else cpu
    dtype: str = ""  # the world model's: float32 or bfloat16 ("": the model's default, float32 on the CPU, bfloat16 on a GPU; bfloat16 on the CPU is 10-25x slower)
    out: str = "out/world_eval"  # a folder: world_eval.json, world_eval.md, world_eval.png
    overwrite: bool = False  # replace the world_eval files already in --out (kept otherwise: the run is refused)
    threads: int = 0  # torch's CPU threads (0: 1 unless OMP_NUM_THREADS is set)
    progress: bool = True  # tqdm bars
    # the imagined env's own keyword names, as `evaluate` spells them, also work
    FLAG_ALIASES: ClassVar[dict] = {"guidance": ("--guidance-scale",), "sde_noise": ("--noise-level",)}

    def __post_init__(self):
        require_at_least(self, episodes=2, horizon=1, clone_clips=1, threads=0)
        if self.world not in WORLDS:
            raise ValueError(f"--world {self.world!r} is not one of {list(WORLDS)}")
        if self.world == "pusht" and (self.goal or self.disagreement or self.success_margin):
            raise ValueError("--goal, --disagreement and --success-margin are the procedural world's; leave them out "
                             "with --world pusht")
        if self.world == "pusht":
            require_gym_pusht("--world pusht")
        defaults = {f.name: f.default for f in fields(self)}
        if self.world != "pusht" and self.clone_clips != defaults["clone_clips"]:
            raise ValueError("--clone-clips is PushT's; add --world pusht or leave it out")
        self.noise_levels = self.noise_levels or ("0,20,40" if self.world == "pusht" else "0,1,2,4,8")
        if self.disagreement == 1 or self.disagreement < 0:
            raise ValueError(f"--disagreement {self.disagreement}: use 0 (off) or a number of samples >= 2")
        self.steps_list = comma_separated("--num-steps", self.num_steps, int, "integers")
        self.noise_list = comma_separated("--noise-levels", self.noise_levels, float, "numbers")
        if min(self.steps_list) < 1 or len(set(self.steps_list)) < len(self.steps_list):
            raise ValueError(f"--num-steps {self.num_steps}: use distinct integers >= 1 (each is one evaluation)")
        try:  # the reset seeds, seed .. seed + episodes - 1, as a vector env of that many envs would take them
            per_env_seeds(self.seed, self.episodes)
        except ValueError:
            raise ValueError(f"--seed {self.seed}: use a seed in [0, 2**63 - {self.episodes}] (the reset seeds are "
                             f"seed .. seed + {self.episodes - 1}, and the envs take seeds in [0, 2**63 - 1])"
                             ) from None
        if not all(0 <= level < math.inf for level in self.noise_list) or len(set(self.noise_list)) < len(self.noise_list):
            raise ValueError(f"--noise-levels {self.noise_levels}: use distinct finite values >= 0")
        self.sampler = {**guidance_override(self), **self._sde_noise_override()}  # refused before anything loads
        self._check_sampler()
        checked_success_margin(self.success_margin, name="--success-margin")
        if self.goal and self.goal not in GOALS:
            raise ValueError(f"--goal {self.goal!r} is not a goal corner; use one of {list(GOALS)} (quoted), or "
                             "leave it out for a random corner per episode")
        from .model.model import check_checkpoint, checked_device, default_dtype

        self.device = str(checked_device(self.device or None, name="--device", cpu_hint="--device cpu"))
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype!r} is not one of {list(DTYPES)[1:]}; leave it out for the model's "
                             "default (float32 on the CPU, bfloat16 on a GPU)")
        self.dtype = self.dtype or str(default_dtype(self.device)).removeprefix("torch.")  # recorded as run
        if self.checkpoint:
            try:
                check_checkpoint(self.checkpoint)
            except FileNotFoundError as error:  # a usage error, as the other flags' (exit 2, no traceback)
                raise ValueError(f"--checkpoint: {error}") from None
            from .world.envs import trained_for

            found = trained_for(self.checkpoint)
            if found is not None and found[2] != WORLD_ENVS[self.world]:
                other = next(name for name, env_id in WORLD_ENVS.items() if env_id == found[2])
                raise ValueError(f"--checkpoint {self.checkpoint!r} was trained for {found[2]} ({found[0]}: python -m "
                                 f"{found[1]}), not for --world {self.world} ({WORLD_ENVS[self.world]}); add --world "
                                 f"{other}, or pass a checkpoint trained for {WORLD_ENVS[self.world]}")
        self._check_out()  # last: it makes the folder

    def _check_out(self) -> None:
        """``--out`` is a writable folder (made if missing) without this command's files, unless
        ``--overwrite``: refused now, not after the evaluation."""
        from .cli import folder_error

        if not self.out.strip():
            raise ValueError(f"--out {self.out!r} names no folder; name one (default: out/world_eval)")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {self.out!r} is a file; world-eval writes a folder (world_eval.json, .md, "
                             ".png): choose a folder")
        present = [name for name in OUTPUTS if (out / name).exists()]
        if present and not self.overwrite:
            raise ValueError(f"--out {self.out!r} already holds {', '.join(present)}; add --overwrite to replace "
                             "them, or choose another folder")
        error = folder_error(out)
        if error:
            raise ValueError(f"--out: {error}")

    def _check_sampler(self) -> None:
        """Each ``--num-steps`` with the sampler flags, against the imagined env's own preset rules (the
        forward-dynamics preset both world envs use): refused now, not once the model has loaded."""
        from .env.presets import load_preset

        preset = dataclasses.replace(load_preset("Cosmos3ForwardDynamicsRollout-v0"), id=WORLD_ENVS[self.world])
        for steps in self.steps_list:
            try:
                preset.override(num_steps=steps, **self.sampler)
            except ValueError as error:
                flags = "--num-steps" + ", --guidance" * ("guidance_scale" in self.sampler) + (
                    ", --sde-noise" * ("noise_level" in self.sampler))
                raise ValueError(f"{flags}: {error}") from None

    def _sde_noise_override(self) -> dict:
        """``--sde-noise`` as the imagined env's keyword arguments ("": the env's own noise level)."""
        if not self.sde_noise:
            return {}
        try:
            level = float(self.sde_noise)
        except ValueError:
            level = math.nan
        if not 0.0 <= level <= 1.0:  # also refuses nan
            raise ValueError(f"--sde-noise {self.sde_noise}: use a noise level in [0, 1] (0: deterministic "
                             "sampling), or leave it out for the env's 0.7")
        return {"noise_level": level}


def _worlds(args: WorldEvalArgs) -> tuple:
    """The model, the truth, the policies, ``make_dream(num_steps)``, the harness's keyword arguments,
    the figure's metric and the two worlds' names, for ``args.world``."""
    import torch

    from .model.model import Cosmos3Model

    goal = args.goal or None
    dtype = getattr(torch, args.dtype)
    sampler = args.sampler  # the imagined env's guidance_scale and noise_level, where the flags set them
    if args.world == "pusht":
        from .world.pusht import PUSHT_CHECKPOINT, checkpoint_action_frame
        from .world.pusht_data import generate
        from .world.pusht_eval import pusht_harness_kwargs, pusht_policies

        model = Cosmos3Model.from_pretrained(args.checkpoint or PUSHT_CHECKPOINT, device=args.device, dtype=dtype)
        action_frame = checkpoint_action_frame(args.checkpoint or PUSHT_CHECKPOINT)  # the frame it was trained in
        truth = gym.make("PushT-Twin-v0", horizon=args.horizon)
        clips = generate(args.clone_clips, seed=args.seed + 1, mix={"push": 1.0}, progress=args.progress)
        policies = pusht_policies(noise_levels=args.noise_list, clips=clips)
        return (model, truth, policies, lambda n: gym.make("Cosmos3PushT-v0", num_steps=n, horizon=args.horizon,
                                                           model=model, action_frame=action_frame, **sampler),
                pusht_harness_kwargs(), "return",
                (f"Cosmos3PushT-v0 (actions in the {action_frame} frame)", "PushT-Twin-v0 (gym-pusht)"))
    model = (Cosmos3Model.from_pretrained(args.checkpoint, device=args.device, dtype=dtype) if args.checkpoint
             else Cosmos3Model.embedded(device=args.device, dtype=dtype))
    truth = gym.make("ProceduralWorld-v0", goal=goal, horizon=args.horizon)
    policies = scripted_policies(chunk=truth.action_space.shape[0], noise_levels=args.noise_list)
    return (model, truth, policies, lambda n: gym.make("Cosmos3World-v0", num_steps=n, goal=goal, model=model,
                                                       horizon=args.horizon, disagreement=args.disagreement,
                                                       success_margin=args.success_margin, **sampler),
            {}, "success", ("Cosmos3World-v0", "ProceduralWorld-v0"))


def verdict(record: dict, world: str = "procedural", metric: str = "success") -> str:
    """One line: the record's sensitivity ratio, Spearman rho on ``metric`` and exploit rate against
    :data:`TARGETS` of ``world``, each met or missed (n/a where the record has none)."""
    numbers, target = key_numbers(record), TARGETS[world]
    checks = (("sensitivity ratio", numbers["ratio"], "<=", target["ratio"], "{:.2f}"),
              (f"Spearman rho on {metric}", numbers[metric]["spearman"], ">=", target["spearman"], "{:.2f}"),
              ("exploit rate", numbers["exploit_rate"], "<=", target["exploit_rate"], "{:.1%}"))
    parts = []
    for name, value, op, bound, fmt in checks:
        if value is None:
            parts.append(f"{name} n/a ({op} {fmt.format(bound)})")
        else:
            met = value <= bound if op == "<=" else value >= bound
            parts.append(f"{name} {fmt.format(value)} ({op} {fmt.format(bound)}: {'met' if met else 'missed'})")
    return "against the targets of this world: " + "; ".join(parts)


def main(argv=None) -> dict:
    args = parse_args(WorldEvalArgs, argv, __doc__, prog="cosmos3-gym world-eval")
    import torch  # after the flags: `world-eval --help` loads neither torch nor diffusers

    from .model.threads import configure_threads

    configure_threads(args.threads or None, args.device)
    out = Path(args.out)  # made and proven writable by the flags' check
    model, truth, policies, make_dream, harness_kwargs, metric, (dream_name, truth_name) = _worlds(args)
    records, started, cpu = {}, time.perf_counter(), time.process_time()
    for setting, num_steps in enumerate(args.steps_list, 1):
        label = f"num_steps={num_steps}" + (f", success_margin={args.success_margin}" if args.success_margin else "")
        if args.progress:
            print(f"setting {setting}/{len(args.steps_list)}: {label}", flush=True)
        records[label] = evaluate_world(make_dream(num_steps), truth, policies, episodes=args.episodes,
                                        seed=args.seed, label=label, progress=args.progress, **harness_kwargs)
        print(f"{label}: {json.dumps(key_numbers(records[label]))}", flush=True)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    goal_flag = f" --goal {args.goal!r}" if args.goal else ""
    pusht_flags = f" --world pusht --horizon {args.horizon} --clone-clips {args.clone_clips}" \
        if args.world == "pusht" else (f" --horizon {args.horizon}" if args.horizon != WorldEvalArgs.horizon else "")
    guidance_flag = (f" --guidance {args.guidance:g}" if args.guidance else "") + \
        (f" --sde-noise {args.sde_noise}" if args.sde_noise else "")
    header = (f"# cosmos3-gym world-eval{pusht_flags} --episodes {args.episodes} --num-steps {args.num_steps}"
              f"{guidance_flag} --noise-levels {args.noise_levels} --seed {args.seed}{goal_flag}"
              + (f" --checkpoint {args.checkpoint}" if args.checkpoint else "")
              + (f" --disagreement {args.disagreement}" if args.disagreement else "")
              + (f" --success-margin {args.success_margin}" if args.success_margin else "") +
              f" --device {args.device} --dtype {args.dtype}" +
              f"; {platform.machine()}, torch {torch.__version__}, "
              f"torch threads {torch.get_num_threads()}; {seconds:.0f} s in all ({cpu_seconds:.0f} s of CPU time)")
    sections = [header, "", PUSHT_LEGEND if args.world == "pusht" else LEGEND]
    for label, record in records.items():
        sec = record["seconds"]
        sections += [f"## {dream_name} {label} vs {truth_name} ({args.episodes} episodes per "
                     f"policy, seeds {args.seed}-{args.seed + args.episodes - 1}; sensitivity "
                     f"{sec['sensitivity']:.0f} s, policies {sec['policies']:.0f} s)", "",
                     markdown_report(record, heading=False), f"- {verdict(record, args.world, metric)}", ""]
    text = "\n".join(sections) + "\n"
    (out / "world_eval.md").write_text(text)
    (out / "world_eval.json").write_text(json.dumps({"args": {k: v for k, v in asdict(args).items()},
                                                     "seconds": seconds, "cpu_seconds": cpu_seconds,
                                                     "records": records}, allow_nan=False))
    plot_report(records, out / "world_eval.png", metric=metric)
    print(text)
    print(f"wrote {', '.join(OUTPUTS)} in {out}/")
    return records


if __name__ == "__main__":
    main()
