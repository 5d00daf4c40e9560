"""Cosmos3RayVectorEnv on a local Ray instance with CPU workers: equal to the in-process vector
env bit for bit, weight sync to every worker (all or nothing), a dead worker named."""

import functools
import os
import signal
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from cosmos3_gym.env.ray_env import Cosmos3RayVectorEnv  # noqa: E402

STEPS = 3
# One local Ray instance per test process: under pytest-xdist this file's tests share one worker
# (setup.cfg's --dist loadfile).


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def episode(venv, seed=7):
    obs, _ = venv.reset(seed=seed)
    latents, log_probs = [obs["latent"]], []
    actions = np.array([[3.0 + i, 0.5 + 0.1 * i] for i in range(venv.num_envs)], dtype=np.float32)
    for _ in range(STEPS):
        obs, rewards, terminated, truncated, infos = venv.step(actions)
        latents.append(obs["latent"])
        log_probs.append(infos["log_prob"])
    return np.stack(latents), np.stack(log_probs), infos, rewards


@pytest.mark.slow
def test_workers_equal_the_in_process_env_bit_for_bit(local_ray):
    local = gym.make_vec("Cosmos3Rollout-v0", num_envs=4, vectorization_mode="vector_entry_point",
                         num_steps=STEPS, reward="brightness", device="cpu")
    expected = episode(local)
    for workers in (1, 2):
        venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=4, vectorization_mode="vector_entry_point",
                            num_workers=workers, num_steps=STEPS, reward="brightness", device="cpu")
        assert isinstance(venv, Cosmos3RayVectorEnv) and venv.observation_space == local.observation_space
        latents, log_probs, infos, rewards = episode(venv)
        np.testing.assert_array_equal(latents, expected[0])
        np.testing.assert_array_equal(log_probs, expected[1])
        np.testing.assert_array_equal(rewards, expected[3])
        assert [t.prompt for t in infos["trajectory"]] == [t.prompt for t in expected[2]["trajectory"]]
        for mine, theirs in zip(infos["trajectory"], expected[2]["trajectory"]):
            assert mine == theirs  # trajectories come back at episode end, equal field for field
        venv.close()


@pytest.mark.slow
def test_a_call_failing_on_one_worker_changes_no_worker(local_ray):
    """Worker 1 refuses its part of a reset (env 3's prompt is not a str) after worker 0 has done
    its part: worker 0 is undone, and the episode goes on exactly as if the call never happened (as
    after a step whose actions the driver refuses)."""
    def run(venv, interrupt):
        venv.reset(seed=11)
        actions = np.tile(venv.default_action, (4, 1))
        venv.step(actions)
        if interrupt:
            before = venv.episode_attribute("seed"), venv.episode_attribute("step")
            with pytest.raises(ValueError, match=r"action has shape \(2,\); expected \(4, 2\) \(guidance_scale, "
                                                 r"noise_level\); that is one env's action"):
                venv.step(venv.default_action)  # refused before any worker is called
            with pytest.raises(ValueError, match="prompt must be a str, got int"):
                venv.reset(seed=5, options={"prompt": ["a red ball", "a blue ball", "a green ball", 3]})
            assert (venv.episode_attribute("seed"), venv.episode_attribute("step")) == before
        obs, *_ = venv.step(actions)
        return obs["latent"]

    latents = []
    for interrupt in (True, False):  # one after the other: the local cluster holds two workers
        venv = Cosmos3RayVectorEnv(4, "Cosmos3Rollout-v0", num_workers=2, num_steps=STEPS, reward="none",
                                   device="cpu")
        latents.append(run(venv, interrupt))
        venv.close()
    np.testing.assert_array_equal(latents[0], latents[1])


@pytest.mark.slow
def test_weight_sync_reaches_every_worker_or_none(local_ray, tiny_model):
    venv = Cosmos3RayVectorEnv(4, "Cosmos3Rollout-v0", num_workers=2, num_steps=STEPS, reward="none", device="cpu")
    assert venv.weights_version == 0
    latents_old = episode(venv)[0]
    state = {k: v.clone() for k, v in tiny_model.transformer.state_dict().items()}
    state["proj_out.bias"] = state["proj_out.bias"] + 0.05
    assert venv.update_weights(state) == 1 and venv.weights_version == 1
    latents_new, _, infos, _ = episode(venv)
    assert (infos["weights_version"] == 1).all()
    # The new weights act on every worker's envs: after the first step (the initial noise does not depend on
    # the weights) each env's latents move. (A rollout's log-probs would not show it: the noise drawn is the
    # same whatever the weights, so the log-prob of a step is too.)
    moved = np.abs(latents_new[1:] - latents_old[1:]).reshape(STEPS, 4, -1).max(axis=2)
    assert (moved > 1e-3).all(), moved
    bad = dict(state)
    bad["proj_out.bias"] = torch.full_like(state["proj_out.bias"], float("nan"))
    with pytest.raises(ValueError, match="proj_out.bias.*NaN"):
        venv.update_weights(bad)
    assert venv.weights_version == 1  # nobody loaded it
    # A local env given the same update reproduces the workers' latents bit for bit (and the old ones without).
    local = gym.make_vec("Cosmos3Rollout-v0", num_envs=4, vectorization_mode="vector_entry_point", num_steps=STEPS,
                         reward="none", device="cpu")
    np.testing.assert_array_equal(episode(local)[0], latents_old)
    local.unwrapped.update_weights(state)
    np.testing.assert_array_equal(episode(local)[0], latents_new)
    np.testing.assert_array_equal(episode(venv)[0], latents_new)  # the failed update changed nothing
    venv.close()


def with_ctrl_c(call, delay: float) -> str:
    """``call()`` with a real SIGINT sent to this process ``delay`` seconds after it starts: "returned",
    the KeyboardInterrupt's message, or "bare" (a message-less one, from before the call changed
    anything or after it returned)."""
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    returned = False
    try:
        timer.start()
        call()
        returned = True
        timer.join()  # a Ctrl-C after the call returned comes here
    except KeyboardInterrupt as error:
        if not returned:
            return str(error) or "bare"
    finally:
        timer.join()
    return "returned"


@pytest.mark.slow
def test_ctrl_c_during_a_call_leaves_every_worker_at_the_same_step(local_ray, tiny_model):
    """A Ctrl-C while the workers step (reset, load weights) is held until every worker's part has
    finished, then every part is undone: all envs are at the same step (all workers at the same
    weights_version), and the episode goes on to the latents of a run that was never interrupted."""
    venv = Cosmos3RayVectorEnv(4, "Cosmos3Rollout-v0", num_workers=2, num_steps=STEPS, reward="none", device="cpu")
    actions = np.tile(venv.default_action, (4, 1))

    def finish():  # the rest of the episode; its last latents
        while True:
            obs, _, terminated, _, _ = venv.step(actions)
            if terminated.any():
                assert terminated.all()
                return obs
            assert len(set(venv.episode_attribute("step"))) == 1

    venv.reset(seed=5)
    venv.step(actions)
    expected = finish()["latent"]
    outcomes = []
    for delay in (0.0, 0.005, 0.02, 0.05, 0.002, 0.01):
        venv.reset(seed=5)
        venv.step(actions)
        outcome = with_ctrl_c(lambda: venv.step(actions), delay)
        outcomes.append(outcome)
        steps = venv.episode_attribute("step")
        assert len(set(steps)) == 1, (delay, outcome, steps)
        if "undone" in outcome:
            assert steps == [1] * 4
        elif outcome == "returned" or "it is installed" in outcome:
            assert steps == [2] * 4
        np.testing.assert_array_equal(finish()["latent"], expected)
    assert any("undone" in outcome for outcome in outcomes), outcomes  # the interrupts did land in the wait
    for delay in (0.0, 0.005, 0.02):
        outcome = with_ctrl_c(lambda: venv.reset(seed=9), delay)
        seeds = venv.episode_attribute("seed")
        assert seeds in ([5, 6, 7, 8], [9, 10, 11, 12]), (delay, outcome, seeds)
        assert seeds == [5, 6, 7, 8] or "undone" not in outcome
        venv.reset(seed=5)
    weights = {k: v + 0.01 for k, v in tiny_model.transformer.state_dict().items()}
    for delay in (0.0, 0.005, 0.02):
        outcome = with_ctrl_c(lambda: venv.update_weights(weights), delay)
        version = venv.weights_version  # raises if the workers disagree
        assert version in (0, 1) and (version == 0 or "undone" not in outcome), (delay, outcome)
        if version == 1:
            break
    venv.close()


@pytest.mark.slow
def test_a_killed_worker_is_named_and_a_new_env_works(local_ray):
    venv = Cosmos3RayVectorEnv(4, "Cosmos3Rollout-v0", num_workers=2, num_steps=2, reward="none", device="cpu")
    venv.reset(seed=0)
    ray.kill(venv._workers[1])
    with pytest.raises(RuntimeError, match=r"Ray worker 1 \(envs 2-3\) died"):
        venv.step(np.tile(venv.default_action, (4, 1)))
    venv.close()
    fresh = Cosmos3RayVectorEnv(2, "Cosmos3Rollout-v0", num_workers=2, num_steps=2, reward="none", device="cpu")
    obs, _ = fresh.reset(seed=1)
    assert obs["latent"].shape[0] == 2
    fresh.close()


@pytest.mark.slow
def test_sb3_runs_on_workers(local_ray):
    from stable_baselines3.common.env_checker import check_env  # noqa: F401  (SB3 installed)

    from cosmos3_gym.env.sb3 import Cosmos3SB3VecEnv

    env = Cosmos3SB3VecEnv.make("Cosmos3Rollout-v0", num_envs=2, num_workers=2, num_steps=2, reward="brightness",
                                device="cpu")
    env.seed(5)
    obs = env.reset()
    assert obs["latent"].shape[0] == 2 and env.get_attr("seed") == [5, 6]
    for _ in range(2):
        obs, rewards, dones, infos = env.step(np.tile(env.venv.default_action, (2, 1)))
    assert dones.all() and all("terminal_observation" in info and "trajectory" in info for info in infos)
    assert (obs["step"] == 0).all()  # same-step autoreset: the next episode's first observation
    env.close()


@pytest.mark.slow
def test_the_workers_bench_on_cpu_workers(local_ray):
    """`bench --workers`'s measurement, on CPU workers that each build the embedded model."""
    from cosmos3_gym.bench import measure_workers
    from cosmos3_gym.model.model import Cosmos3Model

    rates = measure_workers("Cosmos3Rollout-v0", 2, 2, 1, functools.partial(Cosmos3Model.embedded, "cpu"),
                            num_steps=2)
    assert rates[1] > 0 and rates[2] > 0 and rates["same_log_probs"] is True


@pytest.mark.slow
def test_fork_across_workers_equals_the_in_process_fork(local_ray):
    def branch(venv):
        venv.reset(seed=3)
        actions = np.tile(venv.default_action, (4, 1))
        venv.step(actions)
        venv.fork(1, [0, 2, 3], seeds=[11, None, 13])  # env 1 lives on worker 0; envs 2 and 3 on worker 1
        obs, _, _, _, infos = venv.step(actions)
        return obs["latent"], infos["log_prob"]

    local = gym.make_vec("Cosmos3Rollout-v0", num_envs=4, vectorization_mode="vector_entry_point", num_steps=STEPS,
                         reward="none", device="cpu").unwrapped
    expected = branch(local)
    venv = Cosmos3RayVectorEnv(4, "Cosmos3Rollout-v0", num_workers=2, num_steps=STEPS, reward="none", device="cpu")
    latents, log_probs = branch(venv)
    np.testing.assert_array_equal(latents, expected[0])
    np.testing.assert_array_equal(log_probs, expected[1])
    np.testing.assert_array_equal(latents[2], latents[1])  # seed None: the parent's generator, the same step
    with pytest.raises(ValueError, match="must not contain src"):
        venv.fork(1, [1, 2])
    venv.close()


@pytest.mark.slow
def test_more_workers_than_the_cluster_holds_is_refused(local_ray):
    with pytest.raises(ValueError, match=r"needs 4 CPUs; the Ray cluster has 2"):
        Cosmos3RayVectorEnv(4, num_workers=4, device="cpu")


def test_bad_layouts_are_refused_before_any_worker_starts():
    with pytest.raises(ValueError, match="num_envs=3 must split into num_workers=2"):
        Cosmos3RayVectorEnv(3, num_workers=2)
    with pytest.raises(ValueError, match="multiple of group_size=4"):
        Cosmos3RayVectorEnv(4, num_workers=2, group_size=4)
    with pytest.raises(ValueError, match="reward='brightness' and reward_fn='<lambda>' both name the reward"):
        Cosmos3RayVectorEnv(2, num_workers=2, reward="brightness", reward_fn=lambda frames, prompts: frames[:, 0, 0, 0, 0])


def test_a_worker_whose_envs_refuse_their_arguments_says_why(local_ray):
    """A worker that cannot make its envs (here: a dtype its shared model was not loaded in) reports the
    envs' own refusal as the ValueError it is, not as a worker that died."""
    from cosmos3_gym.model.model import Cosmos3Model

    with pytest.raises(ValueError, match=r"start: Ray worker 0 \(envs 0-1\) could not make its envs: "
                                         r"dtype=torch.bfloat16 and model= \(in torch.float32\) were both given"):
        Cosmos3RayVectorEnv(2, "Cosmos3Rollout-v0", num_workers=1, num_steps=1, dtype=torch.bfloat16,
                            model=lambda: Cosmos3Model.embedded(device="cpu"))
