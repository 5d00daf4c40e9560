"""A world env call that raises changes nothing, and a keyword that would fail later is refused at make.

Each failure is compared with a fresh env that never saw the failed call: the same seeds and actions must
give the same frames afterwards.
"""

import importlib.util
import os
import signal

import gymnasium as gym
import numpy as np
import pytest

from cosmos3_gym.world import envs as world_envs
from cosmos3_gym.world.pusht import PUSHT_CHECKPOINT, Cosmos3PushTVectorEnv

pusht = pytest.mark.skipif(importlib.util.find_spec("gym_pusht") is None, reason="needs gym-pusht (the [pusht] extra)")
COMMANDS = np.random.default_rng(0).uniform(-1, 1, (2, 8, 2)).astype(np.float32)
TARGETS = np.random.default_rng(1).uniform(0, 512, (2, 8, 2)).astype(np.float32)


@pytest.fixture
def make(stand_in_model):
    def make(env_id, **kwargs):
        if env_id.startswith("Cosmos3"):
            kwargs = {"num_steps": 1, "model": stand_in_model, **kwargs}
        return gym.make(env_id, **kwargs)
    return make


def _actions(env_id):
    return TARGETS if "PushT" in env_id else COMMANDS


@pytest.mark.parametrize("env_id", ["Cosmos3World-v0", pytest.param("Cosmos3PushT-v0", marks=pusht)])
def test_a_single_env_refuses_a_seed_list_before_it_resets(make, env_id):
    """A list is a vector env's seeds: one env refuses it whole, and its episode goes on as before."""
    first, second = _actions(env_id)
    env, fresh = make(env_id), make(env_id)
    for e in (env, fresh):
        e.reset(seed=3)
        e.step(first)
    for seed in ([5], (5,), np.array([5]), np.array(5.0)):
        with pytest.raises(ValueError, match=r"seed=.*5.* is not an integer; pass an int in \[0, 2\*\*63 - 1\]"):
            env.reset(seed=seed)
    np.testing.assert_array_equal(env.step(second)[0], fresh.step(second)[0])
    np.testing.assert_array_equal(env.reset(seed=np.array(7))[0], fresh.reset(seed=7)[0])  # a 0-d integer array is one


def _fail_once(monkeypatch, target, name):
    """Make ``target.name`` raise KeyboardInterrupt on its next call only."""
    original = getattr(target, name)

    def fail(*args, **kwargs):
        monkeypatch.setattr(target, name, original)
        raise KeyboardInterrupt

    monkeypatch.setattr(target, name, fail)


@pytest.mark.parametrize("env_id", ["ProceduralWorld-v0", "Cosmos3World-v0",
                                    pytest.param("PushT-Twin-v0", marks=pusht)])
@pytest.mark.parametrize("seed", [None, 9])
def test_a_reset_that_raises_leaves_the_envs_generator_as_it_was(make, monkeypatch, env_id, seed):
    """The next reset without a seed draws what it would have drawn had the failed reset never run."""
    env, fresh = make(env_id), make(env_id)
    env.reset(seed=3)
    fresh.reset(seed=3)
    if env_id == "PushT-Twin-v0":
        _fail_once(monkeypatch, env.unwrapped.pusht, "reset")
    else:
        _fail_once(monkeypatch, world_envs, "sample_task")
    with pytest.raises(KeyboardInterrupt):
        env.reset(seed=seed)
    obs, info = env.reset()
    expected, expected_info = fresh.reset()
    np.testing.assert_array_equal(obs, expected)
    assert info.get("prompt") == expected_info.get("prompt")


@pusht
def test_the_twin_plays_a_chunk_whole_or_ends_the_episode(make, monkeypatch):
    """gym-pusht's physics has no undo: a Ctrl-C during a chunk waits for its end and says the step took
    effect (the state is a whole chunk's), unless the program ignores Ctrl-C (then nothing is raised); an
    error inside gym-pusht ends the episode instead of leaving it half played, and a reset starts a good one."""
    env, fresh = make("PushT-Twin-v0"), make("PushT-Twin-v0")
    for e in (env, fresh):
        e.reset(seed=3)
    real_step, calls = env.unwrapped.pusht.step, []

    def ctrl_c_at_the_third(action):
        calls.append(1)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(action)

    monkeypatch.setattr(env.unwrapped.pusht, "step", ctrl_c_at_the_third)
    with pytest.raises(KeyboardInterrupt, match="the call took effect"):
        env.step(TARGETS[0])
    expected = fresh.step(TARGETS[0])[0]
    assert len(calls) == 8
    np.testing.assert_array_equal(env.unwrapped.frame, expected)
    monkeypatch.setattr(env.unwrapped.pusht, "step", real_step)
    np.testing.assert_array_equal(env.step(TARGETS[1])[0], fresh.step(TARGETS[1])[0])

    monkeypatch.setattr(env.unwrapped.pusht, "step", ctrl_c_at_the_third)  # a program that ignores Ctrl-C
    calls.clear()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        played = env.step(TARGETS[0])[0]  # no KeyboardInterrupt: the program said to ignore it
    finally:
        signal.signal(signal.SIGINT, previous)
    np.testing.assert_array_equal(played, fresh.step(TARGETS[0])[0])

    def broken(action):
        raise RuntimeError("pymunk failed")

    monkeypatch.setattr(env.unwrapped.pusht, "step", broken)
    with pytest.raises(RuntimeError, match="pymunk failed"):
        env.step(TARGETS[0])
    monkeypatch.setattr(env.unwrapped.pusht, "step", real_step)
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.unwrapped.step(TARGETS[0])
    np.testing.assert_array_equal(env.reset(seed=4)[0], fresh.reset(seed=4)[0])


@pusht
def test_a_shared_model_is_checked_as_its_checkpoint_would_be(tiny_model, stand_in_model, tmp_path, monkeypatch):
    """model= carries the folder it was loaded from (absolute, whatever the working folder later): a model of
    the other world is refused as checkpoint= is, also through ~; device= or dtype= that the shared model does
    not run on are refused, not ignored."""
    from cosmos3_gym.model.model import Cosmos3Model

    (tmp_path / "pusht").symlink_to(PUSHT_CHECKPOINT)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ValueError, match=r"checkpoint='~/pusht' was trained for Cosmos3PushT-v0"):
        gym.make("Cosmos3World-v0", checkpoint="~/pusht")
    monkeypatch.chdir(tmp_path)
    pusht_model = Cosmos3Model.from_pretrained("pusht", device="cpu")
    monkeypatch.chdir("/")
    with pytest.raises(ValueError, match=r"model= \(loaded from '.*cosmos3-pusht'\) was trained for Cosmos3PushT-v0"):
        gym.make("Cosmos3World-v0", model=pusht_model)
    with pytest.raises(ValueError, match=r"model= \(loaded from '.*cosmos3-tiny'\) was trained for Cosmos3World-v0"):
        gym.make("Cosmos3PushT-v0", model=tiny_model)
    for keywords, match in (({"device": "meta"}, r"device='meta' and model= \(on cpu\) were both given"),
                            ({"dtype": "bfloat16"}, r"dtype=torch.bfloat16 and model= \(in torch.float32\)")):
        with pytest.raises(ValueError, match=match):
            gym.make("Cosmos3World-v0", model=tiny_model, **keywords)
    for device in ("cpu", "cpu:0"):
        shared = gym.make("Cosmos3World-v0", model=tiny_model, device=device, dtype="float32")
        assert shared.unwrapped.vector.model is tiny_model
    assert Cosmos3PushTVectorEnv(1, model=stand_in_model).model is stand_in_model  # built in memory: taken as it is


def test_render_before_the_first_reset_gives_nothing(make):
    """As ProceduralWorld-v0 and Gymnasium's envs: no frame before reset (not a black one)."""
    env = make("Cosmos3World-v0", render_mode="rgb_array")
    assert env.unwrapped.render() is None and env.unwrapped.vector.render() is None
    env.reset(seed=0)
    assert env.unwrapped.render().shape == (32, 32, 3)


@pytest.mark.parametrize("env_id, keywords, match", [
    ("Cosmos3World-v0", {"disagreement": 1}, r"disagreement=1 is invalid: one sample has no spread; use 0 \(off\)"),
    ("Cosmos3World-v0", {"domain": "bogus"}, r"domain='bogus' is not a Cosmos 3 embodiment .*choose one of"),
    pytest.param("Cosmos3PushT-v0", {"exact_coverage": "no"}, r"exact_coverage='no' is invalid; use True",
                 marks=pusht),
    pytest.param("Cosmos3PushT-v0", {"exact_coverage": None}, r"exact_coverage=None is invalid", marks=pusht),
    pytest.param("PushT-Twin-v0", {"damping": float("nan")}, r"damping=nan is invalid; use None .* or a finite "
                 r"number >= 0", marks=pusht),
    pytest.param("PushT-Twin-v0", {"damping": -5.0}, r"damping=-5.0 is invalid", marks=pusht),
    pytest.param("PushT-Twin-v0", {"damping": "x"}, r"damping='x' is invalid", marks=pusht),
    pytest.param("PushT-Twin-v0", {"block_cog": "x"}, r"block_cog='x' is invalid; use None .* or a tuple of two",
                 marks=pusht),
    pytest.param("PushT-Twin-v0", {"block_cog": np.array([0.0, 1.0])}, r"block_cog=array", marks=pusht),
    pytest.param("PushT-Twin-v0", {"block_cog": (1e300, 0.0)}, r"within the board's 512 units", marks=pusht),
    pytest.param("PushT-Twin-v0", {"damping": 10**400}, r"damping=1000.* is invalid", marks=pusht),
    pytest.param("PushT-Twin-v0", {"visualization_width": -1}, r"visualization_width=-1 is invalid; use an integer",
                 marks=pusht),
])
def test_a_keyword_that_would_fail_later_is_refused_at_make(make, env_id, keywords, match):
    """Refused when the env is made, with what is allowed: not at the first step, not silently coerced,
    and never by pymunk aborting the process."""
    with pytest.raises(ValueError, match=match):
        make(env_id, **keywords)


@pusht
def test_good_gym_pusht_keywords_still_reach_gym_pusht(make):
    twin = make("PushT-Twin-v0", damping=0.5, block_cog=(0.0, 1.0), visualization_width=100)
    assert twin.unwrapped.pusht.damping == 0.5 and twin.unwrapped.pusht.block_cog == (0.0, 1.0)
    assert twin.reset(seed=0)[0].shape == (96, 96, 3)


def test_a_value_outside_the_box_is_shown_exactly(make):
    """Not rounded by the message: 1.0000001 is not shown as 1 beside the bound 1."""
    env = make("ProceduralWorld-v0")
    env.reset(seed=0)
    action = np.zeros((8, 2))
    action[0, 0] = 1.0000001
    with pytest.raises(ValueError, match=r"action\[0, 0\] = 1.0000001\)"):
        env.step(action)

