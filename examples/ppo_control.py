"""PPO learns a per-step (guidance_scale, noise_level) schedule that raises prompt adherence.

The policy sees the noisy latent, sigma and the step index, and picks the classifier-free
guidance scale and SDE noise level of every denoising step; the reward is the preset's
prompt adherence of the final video. stable-baselines3 runs on ``Cosmos3SB3VecEnv``: all
envs share one batched forward per step.

    python examples/ppo_control.py            # out/ppo_reward.png; prompt adherence 0.823 -> 0.937
    python examples/ppo_control.py --quick    # 4096 steps, a quarter: 0.797 -> 0.918 (seed 0)

Times on a 2-core x86_64 CPU (torch's CPU build, one thread), on the shipped weights, the other
core busy: the full run 5.8-7.7 min, ``--quick`` (a quarter of the steps) 100 s (3.3 min with both
cores busy). The numbers repeat on one install; another install's library versions (SB3, numpy)
can end elsewhere (0.959 and 0.936 on an earlier one: benchmarks/ppo_control_cpu.txt).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor
from tqdm import tqdm

from cosmos3_gym.train.args import apply_quick, parse_args, require_at_least
from cosmos3_gym.train.plots import reward_curve
from cosmos3_gym.env.sb3 import Cosmos3SB3VecEnv


@dataclass
class Args:
    env_id: str = "Cosmos3Rollout-v0"  # a rollout preset (cosmos3-gym rollout --help lists them)
    num_envs: int = 16  # envs SB3 steps together (one batched forward)
    num_steps: int = 4  # denoising steps per episode
    total_timesteps: int = 16384  # PPO's budget: denoising steps over all envs
    n_steps: int = 16  # PPO rollout length per env
    learning_rate: float = 1e-3  # PPO's step size
    seed: int = 0  # PPO's and the envs' resets
    out: str = "out"  # the folder of ppo_reward.png
    quick: bool = False  # --total-timesteps 4096 (unless given): the rise in a quarter of the steps
    QUICK: ClassVar[dict] = {"total_timesteps": 4096}
    FLAG_ALIASES: ClassVar[dict] = {"env_id": ("--env",)}  # the command line's name for it also works

    def __post_init__(self):  # every env ends an episode at least once: the curve needs one
        if self.quick:
            apply_quick(self, self.QUICK)
        require_at_least(self, num_envs=1, num_steps=1, n_steps=2,
                         total_timesteps=self.num_envs * max(self.n_steps, self.num_steps))


class EpisodeRewards(BaseCallback):
    """Collects VecMonitor's episode returns and drives a progress bar."""

    def __init__(self, total: int):
        super().__init__()
        self.rewards: list[tuple[int, float]] = []
        self.bar = tqdm(total=total, desc="PPO", unit="step")

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.rewards.append((self.num_timesteps, float(info["episode"]["r"])))
        self.bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


def main(args: Args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = VecMonitor(Cosmos3SB3VecEnv.make(args.env_id, num_envs=args.num_envs, num_steps=args.num_steps,
                                           rescale_actions=True))
    env.seed(args.seed)
    model = PPO("MultiInputPolicy", env, n_steps=args.n_steps, batch_size=64, learning_rate=args.learning_rate,
                seed=args.seed, verbose=0)
    callback = EpisodeRewards(args.total_timesteps)
    model.learn(args.total_timesteps, callback=callback)

    steps, rewards = zip(*callback.rewards)
    first, last, window = reward_curve(steps, rewards, out / "ppo_reward.png", title="PPO on (guidance, noise level)",
                                       xlabel="env steps", ylabel="prompt adherence", points="episode")
    print(f"{len(rewards)} episodes; mean reward of the first {window}: {first:.3f}, of the last {window}: {last:.3f}")
    print(f"wrote {out / 'ppo_reward.png'}")


if __name__ == "__main__":
    main(parse_args(Args, description=__doc__))
