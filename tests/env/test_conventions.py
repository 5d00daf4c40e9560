"""Gymnasium's and SB3's conventions, run over every front-end: single env, vector env, SB3 adapter.

Third-party code (Gymnasium's checkers and vector wrappers, SB3's checker and wrappers)
is used unmodified: what it rejects is our bug.
"""

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import VecFrameStack, VecMonitor, VecNormalize

import cosmos3_gym
from cosmos3_gym.env.sb3 import Cosmos3SB3VecEnv

FRONT_ENDS = ("single", "vector", "sb3")
NUM_ENVS = 2

# The checkers' advice that these envs do not follow, by design (cosmos3-gym check prints it to users once per env):
# the latent observation is an unbounded Gaussian latent, and the action (guidance, noise level) keeps its natural
# units (Cosmos3SB3VecEnv(rescale_actions=True) offers the [-1, 1] view).
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*A Box observation space m(ax|in)imum value is -?infinity:UserWarning"),
    pytest.mark.filterwarnings("ignore:.*For Box action spaces, we recommend using a symmetric:UserWarning"),
    pytest.mark.filterwarnings("ignore:We recommend you to use a symmetric and normalized Box:UserWarning"),
    pytest.mark.filterwarnings(r"ignore:Your observation \w+ has an unconventional shape:UserWarning"),
]


def make(front_end: str, **kwargs):
    kwargs.setdefault("num_steps", 2)
    kwargs.setdefault("reward", "brightness")
    if front_end == "single":
        return gym.make("Cosmos3Rollout-v0", **kwargs)
    if front_end == "vector":
        return gym.make_vec("Cosmos3Rollout-v0", num_envs=NUM_ENVS, vectorization_mode="vector_entry_point",
                            **kwargs)
    return Cosmos3SB3VecEnv.make("Cosmos3Rollout-v0", num_envs=NUM_ENVS, **kwargs)


def reset(env, front_end, seed):
    if front_end == "sb3":
        env.seed(seed)
        return env.reset()
    return env.reset(seed=seed)[0]


def step(env, front_end, action):
    if front_end == "single":
        obs, reward, terminated, truncated, info = env.step(action)
        return obs, np.array([reward]), np.array([terminated or truncated]), [info]
    if front_end == "vector":
        obs, rewards, terminated, truncated, infos = env.step(np.tile(action, (NUM_ENVS, 1)))
        return obs, rewards, terminated | truncated, [{k: v[i] for k, v in infos.items() if not k.startswith("_")
                                                        and infos[f"_{k}"][i]} for i in range(NUM_ENVS)]
    return env.step(np.tile(action, (NUM_ENVS, 1)))


def in_space(space, obs, front_end):
    return space.contains(obs) if front_end == "single" else all(
        space.contains({k: v[i] for k, v in obs.items()}) for i in range(NUM_ENVS))


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_an_episode_follows_the_conventions(front_end):
    env = make(front_end)
    space = env.observation_space if front_end != "vector" else env.single_observation_space
    obs = reset(env, front_end, seed=3)
    assert in_space(space, obs, front_end)
    action = np.array([4.0, 0.5], dtype=np.float32)
    obs, rewards, dones, infos = step(env, front_end, action)
    assert in_space(space, obs, front_end) and not dones.any() and (rewards == 0).all()
    assert all(np.isfinite(info["log_prob"]) and info["guidance_scale"] == 4.0 for info in infos)
    obs, rewards, dones, infos = step(env, front_end, action)
    assert dones.all() and (rewards > 0).all() and rewards.dtype.kind == "f"
    assert all(info["trajectory"].num_steps == 2 for info in infos)
    assert in_space(space, obs, front_end)
    env.close()


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_same_seed_same_episode(front_end):
    results = []
    for _ in range(2):
        env = make(front_end)
        reset(env, front_end, seed=11)
        _, _, _, infos = step(env, front_end, np.array([6.0, 0.7], dtype=np.float32))
        results.append([info["log_prob"] for info in infos])
    assert results[0] == results[1]


# Inverse dynamics encodes every new scene's whole video in a 256x256 canvas (seconds on a CPU);
# each kind runs the same sde_step on every stream, so it is checked with one kind.
ENVS_AND_KINDS = [(env_id, kind) for env_id in cosmos3_gym.ENV_IDS for kind in ("sde", "cps", "ode")
                  if kind == "sde" or env_id != "Cosmos3InverseDynamicsRollout-v0"]


@pytest.mark.parametrize("env_id,kind", ENVS_AND_KINDS)
def test_gymnasium_check_env_every_kind(env_id, kind):
    env = gym.make(env_id, kind=kind, num_steps=3, render_mode="rgb_array", reward="brightness")
    gym_check_env(env.unwrapped, skip_render_check=False)


def test_gymnasium_check_env_at_noise_level_zero_and_in_noise_mode():
    """Every allowed action passes, including the deterministic noise_level = 0."""
    env = gym.make("Cosmos3Rollout-v0", num_steps=2, noise_level=0.0, reward="none")
    gym_check_env(env.unwrapped)
    env.reset(seed=0)
    _, _, _, _, info = env.step(np.array([6.0, 0.0], dtype=np.float32))
    assert info["deterministic"] and info["log_prob"] == 0.0  # a point mass, not NaN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "a Box action space maximum value is infinity": by design
        gym_check_env(gym.make("Cosmos3Rollout-v0", num_steps=2, action_mode="noise", reward="none").unwrapped)


@pytest.mark.parametrize("env_id", cosmos3_gym.ENV_IDS)
def test_sb3_check_env(env_id):
    env = gym.make(env_id, num_steps=3, reward="none").unwrapped
    sb3_check_env(env, warn=True)


def test_sb3_refuses_noise_mode_and_the_docs_say_so():
    """Noise mode is unbounded (action_space.sample() is the stock sampler): SB3's algorithms
    cannot drive it, SB3's checker says so, and the env's docs say noise mode is for custom trainers."""
    env = gym.make("Cosmos3Rollout-v0", num_steps=2, action_mode="noise", reward="none").unwrapped
    from cosmos3_gym.cli import SB3_UNBOUNDED

    with pytest.raises(AssertionError, match=SB3_UNBOUNDED):  # what `cosmos3-gym check` reports as by design
        sb3_check_env(env, warn=True)
    assert "for custom trainers" in " ".join(type(env).__doc__.split())


def test_gymnasium_vector_wrappers_work_unmodified():
    from gymnasium.wrappers.vector import NormalizeReward, RecordEpisodeStatistics

    venv = RecordEpisodeStatistics(NormalizeReward(make("vector")))
    venv.reset(seed=0)
    actions = np.tile(venv.unwrapped.default_action, (NUM_ENVS, 1))
    venv.step(actions)
    _, rewards, terminated, _, infos = venv.step(actions)
    assert terminated.all() and np.isfinite(rewards).all()
    assert infos["episode"]["l"].tolist() == [2, 2] and infos["_episode"].all()


@pytest.mark.parametrize("env_id", ["Cosmos3Rollout-v0", "Cosmos3World-v0"])
def test_gymnasium_array_conversions_convert_numbers_and_keep_objects(env_id):
    """NumpyToTorch over the vector env gives the unwrapped env's values as tensors; prompts,
    trajectories and a prompt in the reset options pass through as they are."""
    import torch
    from gymnasium.wrappers.vector import NumpyToTorch

    kwargs = {"num_steps": 2} | ({"reward": "brightness"} if env_id == "Cosmos3Rollout-v0" else {"horizon": 2})
    options = {"prompt": "a red ball moves to the left"} if env_id == "Cosmos3Rollout-v0" else None
    plain = gym.make_vec(env_id, num_envs=NUM_ENVS, vectorization_mode="vector_entry_point", **kwargs)
    converted = NumpyToTorch(gym.make_vec(env_id, num_envs=NUM_ENVS, vectorization_mode="vector_entry_point",
                                          **kwargs))
    actions = np.tile(plain.unwrapped.default_action, (NUM_ENVS, 1)) if env_id == "Cosmos3Rollout-v0" else \
        np.full((NUM_ENVS, *plain.single_action_space.shape), 0.5, dtype=np.float32)
    results = [(plain.reset(seed=3, options=options), converted.reset(seed=3, options=options))]
    for _ in range(2):
        results.append((plain.step(actions), converted.step(torch.as_tensor(actions))))
    for want, got in results:
        for w, g in zip(want, got):
            w, g = (w, g) if isinstance(w, dict) else ({"": w}, {"": g})
            assert w.keys() == g.keys()
            for key in w:
                if isinstance(w[key], dict):  # the episode statistics, final_info
                    continue
                if w[key].dtype == object:
                    assert type(g[key]) is type(w[key]) and all(a is b or a == b for a, b in zip(w[key], g[key])), key
                else:  # NaN where an env did not step (masked out: it reset), e.g. log_prob_sum
                    assert isinstance(g[key], torch.Tensor) and np.array_equal(g[key].numpy(), w[key],
                                                                               equal_nan=True), key
    infos = results[-1][1][-1]
    assert all(isinstance(t, cosmos3_gym.Trajectory) for t in infos["trajectory"][infos["_trajectory"].numpy()])
    if options:
        assert results[0][1][1]["prompt"].tolist() == [options["prompt"]] * NUM_ENVS
        prompts = np.array(["a red ball moves to the left", "a blue square moves up"])  # a numpy array of str
        assert converted.reset(seed=3, options={"prompt": prompts})[1]["prompt"].tolist() == prompts.tolist()
    plain.reset(seed=3)
    infos = plain.step(actions)[-1]
    masks = [v for k, v in infos.items() if k.startswith("_")]
    assert len(masks) > 2 and len({id(m) for m in masks}) == len(masks)  # one mask array per key, as Gymnasium makes them


def test_sb3_vec_wrappers_with_default_arguments():
    env = VecFrameStack(VecNormalize(VecMonitor(make("sb3"))), n_stack=2)
    obs = env.reset()
    assert obs["latent"].shape == (NUM_ENVS, 4, 3, 8, 8 * 2)  # two observations stacked on the last axis
    actions = np.tile(np.array([6.0, 0.7], dtype=np.float32), (NUM_ENVS, 1))
    env.step(actions)
    obs, rewards, dones, infos = env.step(actions)
    assert dones.all() and np.isfinite(rewards).all() and "episode" in infos[0]
