"""``imagine``: the world envs' generation from frames of the caller's choosing, changing no env."""

import numpy as np
import pytest

from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

N = 3


def stepped(tiny_model, seed: int, actions: np.ndarray, imagine_first: bool = False):
    """A fresh 3-env world reset with ``seed`` and stepped with ``actions`` (after an ``imagine`` call,
    and after a refused one, when ``imagine_first``): the observations before, and the step's results."""
    venv = Cosmos3WorldVectorEnv(N, num_steps=2, model=tiny_model)
    obs, info = venv.reset(seed=seed)
    if imagine_first:
        venv.imagine(obs[::-1], actions[::-1], [1, 2, 3], ["move the big red ball to the top left"] * N)
        with pytest.raises(ValueError, match="seeds"):
            venv.imagine(obs, actions, [1, 2], info["prompt"])
    return venv, obs, info, venv.step(actions)


def test_imagine_is_the_steps_generation_and_leaves_every_env_as_it_was(tiny_model):
    """The frames of a step, generated again by ``imagine`` from the observations, actions, seeds and
    prompts the step used (its trajectories record the seeds): equal bit for bit. A second world that
    imagines other chunks first (and is refused once) then steps exactly as the first did."""
    actions = np.random.default_rng(0).uniform(-1, 1, (N, 8, 2)).astype(np.float32)
    venv, obs, info, (next_obs, rewards, terminated, _, infos) = stepped(tiny_model, 11, actions)
    seeds = [trajectory.seed for trajectory in infos["trajectory"]]
    chunks = venv.imagine(obs, actions, seeds, list(info["prompt"]))
    assert chunks.dtype == np.uint8 and chunks.shape == (N, 8, 32, 32, 3)
    assert np.array_equal(chunks, infos["frames"])
    assert not np.array_equal(chunks[0], venv.imagine(obs[:1], actions[:1], [seeds[0] + 1], [info["prompt"][0]])[0])
    other, _, _, (other_obs, other_rewards, other_terminated, _, other_infos) = stepped(tiny_model, 11, actions, True)
    assert np.array_equal(other_obs, next_obs) and np.array_equal(other_rewards, rewards)
    assert np.array_equal(other_terminated, terminated)
    assert np.array_equal(other_infos["frames"], infos["frames"])


@pytest.mark.parametrize("change,message", [
    (dict(frames=lambda f: f.astype(np.float32)), r"frames has dtype float32 .* expected uint8 frames of shape "
                                                  r"\(b, 32, 32, 3\) with 1 <= b <= num_envs=3"),
    (dict(frames=lambda f: np.concatenate([f, f])), r"shape \(6, 32, 32, 3\)"),
    (dict(frames=lambda f: f[0]), r"shape \(32, 32, 3\).*np.stack\(\[obs\]\)"),
    (dict(actions=lambda a: a + 2), r"outside the action space bounds.*clip the commands to \[-1, 1\]"),
    (dict(actions=lambda a: a[:2]), r"shape"),
    (dict(seeds=lambda s: [-1, 0, 0]), r"seeds\[0\]=-1 is out of range"),
    (dict(prompts=lambda p: ["a", "", "b"]), r"prompts\[1\]='' is invalid"),
])
def test_imagine_refuses_bad_input(tiny_model, change, message):
    venv = Cosmos3WorldVectorEnv(N, num_steps=1, model=tiny_model)
    obs, info = venv.reset(seed=0)
    args = dict(frames=obs, actions=np.zeros((N, 8, 2), np.float32), seeds=[0, 1, 2], prompts=list(info["prompt"]))
    for key, edit in change.items():
        args[key] = edit(args[key])
    with pytest.raises(ValueError, match=message):
        venv.imagine(**args)
