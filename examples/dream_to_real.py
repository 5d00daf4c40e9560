"""Train PPO in imagination (Cosmos3World-v0), score it in reality (ProceduralWorld-v0).

Three policies are evaluated on the same ``eval_episodes`` seeds of the true world: uniform
random commands, PPO trained in the true world, and PPO trained only inside Cosmos 3's
forward-dynamics imagination with the same budget. The dream-to-real gap is the last two's
ratio. Writes a table (stdout and ``out/dream_to_real.txt``) and a bar plot.

    python examples/dream_to_real.py                   # the CPU default budget; out/dream_to_real.png
    python examples/dream_to_real.py --device cuda --timesteps 65536 --num-envs 32
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv
from tqdm import tqdm

import cosmos3_gym  # noqa: F401  (registers the env ids)
from cosmos3_gym.args import parse_args
from cosmos3_gym.model import Cosmos3Model


@dataclass
class Args:
    timesteps: int = 2048  # PPO env steps (chunks), the same for both worlds
    num_envs: int = 8
    n_steps: int = 32  # PPO rollout length per env
    num_steps: int = 4  # denoising steps of one imagined chunk
    eval_episodes: int = 100
    device: str = "cpu"
    seed: int = 0
    out: str = "out"


def success_rate(policy, episodes: int, seed: int) -> float:
    """Fraction of true-world episodes (seeds ``seed ..``) that end in the goal; ``policy(obs)``."""
    env, wins = gym.make("ProceduralWorld-v0"), 0
    for episode in tqdm(range(episodes), desc="evaluating in the true world", leave=False):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy(obs))
            done = terminated or truncated
        wins += bool(info["success"])
    return wins / episodes


def train_ppo(envs: DummyVecEnv, args: Args) -> PPO:
    model = PPO("MlpPolicy", envs, n_steps=args.n_steps, batch_size=64, seed=args.seed, verbose=0)
    model.learn(args.timesteps, progress_bar=False)
    return model


def main(args: Args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    eval_seed = 10**6  # evaluation tasks never seen in training
    rng = np.random.default_rng(args.seed)
    results = {"random commands": success_rate(lambda obs: rng.uniform(-1, 1, (8, 2)).astype(np.float32),
                                               args.eval_episodes, eval_seed)}

    real = train_ppo(DummyVecEnv([lambda: gym.make("ProceduralWorld-v0")] * args.num_envs), args)
    results["PPO trained in the true world"] = success_rate(lambda obs: real.predict(obs, deterministic=True)[0],
                                                            args.eval_episodes, eval_seed)

    world_model = Cosmos3Model.embedded(device=args.device)  # one model behind every imagined env
    dream_envs = DummyVecEnv([lambda: gym.make("Cosmos3World-v0", model=world_model, num_steps=args.num_steps)]
                             * args.num_envs)
    dream = train_ppo(dream_envs, args)
    results["PPO trained in imagination"] = success_rate(lambda obs: dream.predict(obs, deterministic=True)[0],
                                                         args.eval_episodes, eval_seed)

    ratio = results["PPO trained in imagination"] / max(results["PPO trained in the true world"], 1e-9)
    lines = [f"success rate in ProceduralWorld-v0 over {args.eval_episodes} episodes "
             f"(PPO budget {args.timesteps} chunks each, seed {args.seed})"]
    lines += [f"{name:<32} {rate:6.1%}" for name, rate in results.items()]
    lines.append(f"dream / real: {ratio:.2f}")
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
    print(f"wrote {out / 'dream_to_real.png'}")


if __name__ == "__main__":
    main(parse_args(Args, description=__doc__))
