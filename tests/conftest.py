import signal

import gymnasium as gym
import pytest
import torch

import cosmos3_gym  # noqa: F401  (registers the env ids)
from cosmos3_gym.model.model import Cosmos3Model


def pytest_configure(config):
    """Ctrl-C as Python handles it by default, whatever the suite was started from: a shell's background
    job (``nohup make test &``) inherits SIGINT ignored, and the envs leave an ignored Ctrl-C alone, so the
    tests that send one would see nothing happen."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


# One intra-op thread: the tiny model's ops are too small to gain from more, and on a busy
# machine torch's spinning worker threads slow each small operation 50-240x (see README, "Threads").
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model():
    return Cosmos3Model.embedded(device="cpu")


@pytest.fixture(scope="session")
def stand_in_model():
    """The embedded weights as a model built in memory (no checkpoint folder to read a world from): the
    PushT tests' cheap stand-in for a PushT model, which the world envs take as it is. Loaded from the
    embedded checkpoint, the same model is refused by Cosmos3PushT-v0 (trained for the procedural world)."""
    model = Cosmos3Model.embedded(device="cpu")
    model.checkpoint_path = None
    return model


@pytest.fixture
def make_env():
    envs = []

    def make(env_id="Cosmos3Rollout-v0", **kwargs):
        env = gym.make(env_id, **kwargs)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


def run_episode(env, seed, actions=None, options=None):
    """Run one episode; returns (final obs, reward, list of infos)."""
    obs, _ = env.reset(seed=seed, options=options)
    infos, k, terminated = [], 0, False
    while not terminated:
        action = env.unwrapped.default_action if actions is None else actions[k]
        obs, reward, terminated, truncated, info = env.step(action)
        assert not truncated
        infos.append(info)
        k += 1
    return obs, reward, infos


@pytest.fixture
def keep_threads():
    """The command line and the examples set torch's thread count for the process; give the other tests theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
