"""Train PPO in imagination (Cosmos3World-v0), score it in reality (ProceduralWorld-v0).

Three policies are evaluated on the same ``eval_episodes`` seeds of the true world: uniform
random commands, PPO trained in the true world, and PPO trained only inside Cosmos 3's
forward-dynamics imagination with the same budget. The dream-to-real gap is the last two's
ratio. Writes a table (stdout and ``out/dream_to_real.txt``) and a bar plot.

The policies see only pixels, so the goal corner is fixed (``--goal``); both worlds draw their
tasks from a seed the same way. The imagined envs are one :class:`Cosmos3WorldVectorEnv` (one batched
generation per step for all envs) behind SB3's VecEnv interface.

    python examples/dream_to_real.py                   # out/dream_to_real.txt and .png (2-core CPU, two side
                                                       # by side: 22-26 min, most of it the imagined steps);
                                                       # seeds 0-4: dream / real 0.97-1.03, mean 1.00
    python examples/dream_to_real.py --timesteps 8192 --num-envs 32
    python examples/dream_to_real.py --quick           # half the budget, 50 episodes: 13 min beside another
                                                       # run; seed 0: imagination 96 %, true world 82 %,
                                                       # random 14 %: dream / real 1.17; with
                                                       # --success-margin 2.5 0.56 (its rarer imagined
                                                       # successes need the full budget: 0.94-1.10 there)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv
from tqdm import tqdm

import cosmos3_gym  # noqa: F401  (registers the env ids)
from cosmos3_gym.train.args import apply_quick, guidance_override, parse_args, require_at_least
from cosmos3_gym.model.model import check_checkpoint
from cosmos3_gym.rollout.procedural_world import checked_success_margin
from cosmos3_gym.env.sb3 import Cosmos3SB3VecEnv


@dataclass
class Args:
    timesteps: int = 4096  # PPO env steps (chunks), the same for both worlds
    num_envs: int = 16  # envs PPO steps together, in each world
    n_steps: int = 32  # PPO rollout length per env
    num_steps: int = 4  # denoising steps of one imagined chunk
    guidance: float = 0.0  # the imagined world's classifier-free guidance scale (0: Cosmos3World-v0's default)
    success_margin: float = 0.0  # pixels, in [0, 4.8): the dream calls success only this much inside the true radius (4.8 px; 0: the same rule)
    goal: str = "top left"  # the corner of every episode (a pixel-only policy cannot read the prompt)
    eval_episodes: int = 100  # true-world episodes that score each policy
    device: str = "cuda" if torch.cuda.is_available() else "cpu"  # the world model's
    checkpoint: str = ""  # the world model's weights, e.g. train_world_model's --out (default: the embedded model)
    seed: int = 0  # PPO's, the envs' resets and the evaluation's
    out: str = "out"  # the folder of dream_to_real.txt and .png
    quick: bool = False  # --timesteps 2048 --eval-episodes 50 (unless given): the gap, in about half the time
    QUICK: ClassVar[dict] = {"timesteps": 2048, "eval_episodes": 50}
    FLAG_ALIASES: ClassVar[dict] = {"guidance": ("--guidance-scale",)}  # Cosmos3World-v0's keyword also works

    def __post_init__(self):
        if self.quick:
            apply_quick(self, self.QUICK)
        require_at_least(self, timesteps=1, num_envs=1, n_steps=2, num_steps=1, eval_episodes=1)
        guidance_override(self)
        checked_success_margin(self.success_margin, name="--success-margin")
        if self.checkpoint:  # now, not after the true-world agent has trained
            try:
                check_checkpoint(self.checkpoint)
            except (FileNotFoundError, ValueError) as error:
                raise ValueError(f"--checkpoint: {error}") from None


def success_rate(policy, episodes: int, seed: int, goal: str) -> float:
    """Fraction of true-world episodes (seeds ``seed ..``) that end in the goal; ``policy(obs)``."""
    env, wins = gym.make("ProceduralWorld-v0", goal=goal), 0
    for episode in tqdm(range(episodes), desc="evaluating in the true world", leave=False):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        wins += bool(info["success"])
    return wins / episodes


class Progress(BaseCallback):
    """A labelled progress bar over PPO's environment steps (SB3's own bar has no label)."""

    def __init__(self, label: str, total: int):
        super().__init__()
        self.bar = tqdm(total=total, desc=label, unit="chunk")

    def _on_step(self) -> bool:
        self.bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


def train_ppo(envs: VecEnv, args: Args, label: str) -> PPO:
    model = PPO("MlpPolicy", envs, n_steps=args.n_steps, batch_size=64, seed=args.seed, verbose=0)
    model.learn(args.timesteps, callback=Progress(label, args.timesteps))
    return model


def main(args: Args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    eval_seed = 10**6  # evaluation tasks never seen in training
    # the imagined world first: its checkpoint loads (or fails) before anything trains
    guidance = guidance_override(args)
    dream_envs = Cosmos3SB3VecEnv.make("Cosmos3World-v0", num_envs=args.num_envs, goal=args.goal,
                                       num_steps=args.num_steps, checkpoint=args.checkpoint, device=args.device,
                                       success_margin=args.success_margin, **guidance)
    rng = np.random.default_rng(args.seed)
    results = {"random commands": success_rate(lambda obs: rng.uniform(-1, 1, (8, 2)).astype(np.float32),
                                               args.eval_episodes, eval_seed, args.goal)}

    real = train_ppo(DummyVecEnv([lambda: gym.make("ProceduralWorld-v0", goal=args.goal)] * args.num_envs), args,
                     "PPO in the true world")
    results["PPO trained in the true world"] = success_rate(lambda obs: real.predict(obs, deterministic=True)[0],
                                                            args.eval_episodes, eval_seed, args.goal)

    dream = train_ppo(dream_envs, args, "PPO in imagination")
    results["PPO trained in imagination"] = success_rate(lambda obs: dream.predict(obs, deterministic=True)[0],
                                                         args.eval_episodes, eval_seed, args.goal)

    real_rate = results["PPO trained in the true world"]
    ratio = (f"{results['PPO trained in imagination'] / real_rate:.2f}" if real_rate > 0
             else "undefined (no success in the true world: raise --timesteps)")
    lines = [f"success rate in ProceduralWorld-v0 over {args.eval_episodes} episodes "
             f"(goal: {args.goal}; PPO budget {args.timesteps} chunks each, seed {args.seed}; imagined with "
             f"{args.num_steps} denoising steps, guidance {dream_envs.venv.preset.guidance_scale:g}"
             + (f", success margin {dream_envs.venv.success_margin:g} px" if dream_envs.venv.success_margin else "")
             + ")"]
    lines += [f"{name:<32} {rate:6.1%}" for name, rate in results.items()]
    lines.append(f"dream / real: {ratio}")
    text = "\n".join(lines)
    print(text)
    (out / "dream_to_real.txt").write_text(text + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    ax.bar(range(len(results)), [100 * r for r in results.values()], color=["grey", "tab:green", "tab:purple"])
    ax.set_xticks(range(len(results)), [name.replace("PPO trained ", "PPO\n") for name in results], fontsize=8)
    ax.set_ylabel("success in the true world (%)")
    ax.set_title(f"Dream to real: {args.timesteps} PPO steps each", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "dream_to_real.png", dpi=110)
    plt.close(fig)
    print(f"wrote {out / 'dream_to_real.txt'} and {out / 'dream_to_real.png'}")


if __name__ == "__main__":
    main(parse_args(Args, description=__doc__))
