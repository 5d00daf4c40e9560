"""A call that raises leaves everything exactly as it was (DESIGN section 13).

Each test makes a call fail (bad input, a forward or a reward function that throws,
Ctrl-C) and checks that the env's whole state is unchanged and that the episode goes on
to the same result as a run that never failed.
"""

import contextlib
import copy
import gc
import signal
import sys
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import run_episode
from cosmos3_gym.model import interrupts
from cosmos3_gym.model.model import Cosmos3Model


def make_vec(num_envs=2, **kwargs):
    return gym.make_vec("Cosmos3Rollout-v0", num_envs=num_envs, vectorization_mode="vector_entry_point",
                        num_steps=kwargs.pop("num_steps", 3), **kwargs)


def same_state(a: dict, b: dict) -> bool:
    """Two vector-env ``get_state()`` snapshots are equal in every field."""
    if a["rng"] != b["rng"]:
        return False
    for x, y in zip(a["engine"]["episodes"], b["engine"]["episodes"]):
        if (x is None) != (y is None):
            return False
        if x is None:
            continue
        for name, value in vars(x).items():
            other = getattr(y, name)
            if isinstance(value, dict):  # per-stream tensors
                if value.keys() != other.keys() or not all(torch.equal(value[k], other[k]) for k in value):
                    return False
            elif isinstance(value, torch.Tensor):
                if not torch.equal(value, other):
                    return False
            elif isinstance(value, torch.Generator):
                if not torch.equal(value.get_state(), other.get_state()):
                    return False
            elif value != other:
                return False
    return True


class FailOnce:
    """A forward hook raising ``error`` at its first call (a crash, or Ctrl-C during a forward)."""

    def __init__(self, error):
        self.error, self.fired = error, False

    def __call__(self, module, args, output):
        if not self.fired:
            self.fired = True
            raise self.error


@pytest.mark.parametrize("error", [KeyboardInterrupt(), RuntimeError("boom")])
@pytest.mark.parametrize("fail_at", [0, 1])
def test_a_forward_that_throws_leaves_the_episode_steppable(make_env, error, fail_at):
    env = make_env(num_steps=3)
    _, _, reference = run_episode(env, seed=5)
    env.reset(seed=5)
    for _ in range(fail_at):
        env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    hook = env.unwrapped.model.transformer.layers[1].register_forward_hook(FailOnce(error))
    try:
        with pytest.raises(type(error)):
            env.step(env.unwrapped.default_action)
    finally:
        hook.remove()
    assert same_state(state, env.unwrapped.get_state())
    infos = [env.step(env.unwrapped.default_action)[4] for _ in range(3 - fail_at)]
    assert [i["log_prob"] for i in infos] == [i["log_prob"] for i in reference[fail_at:]]
    assert torch.equal(infos[-1]["trajectory"].latents, reference[-1]["trajectory"].latents)


class FlakyReward:
    """A reward function that raises (or returns NaN) at its first call, then scores brightness."""

    def __init__(self, failure):
        self.failure, self.calls = failure, 0

    def __call__(self, frames, prompts):
        self.calls += 1
        if self.calls == 1:
            if self.failure == "nan":
                return np.full(len(frames), np.nan, dtype=np.float32)
            raise self.failure
        return frames.astype(np.float32).mean(axis=(1, 2, 3, 4)) / 255.0


@pytest.mark.parametrize("failure", [RuntimeError("reward server down"), KeyboardInterrupt(), "nan"])
def test_a_reward_that_fails_keeps_the_last_step_and_trajectory(make_env, failure):
    env = make_env(num_steps=2, reward_fn=FlakyReward(failure))
    env.reset(seed=3)
    env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    with pytest.raises(ValueError if failure == "nan" else type(failure), match="non-finite" if failure == "nan" else None):
        env.step(env.unwrapped.default_action)
    assert same_state(state, env.unwrapped.get_state())
    _, reward, terminated, _, info = env.step(env.unwrapped.default_action)  # the same step, retried
    assert terminated and info["trajectory"].num_steps == 2
    assert reward == pytest.approx(info["frames"].astype(np.float32).mean() / 255.0, abs=1e-6)


def test_a_failing_reward_does_not_wedge_the_vector_env():
    venv = make_vec(2, num_steps=2, reward_fn=FlakyReward(RuntimeError("boom")))
    venv.reset(seed=0)
    actions = np.tile(venv.default_action, (2, 1))
    venv.step(actions)
    state = venv.get_state()
    with pytest.raises(RuntimeError, match="boom"):
        venv.step(actions)
    assert same_state(state, venv.get_state())
    _, rewards, terminated, _, info = venv.step(actions)
    assert terminated.all() and (rewards > 0).all() and info["_trajectory"].all()
    _, _, _, _, info = venv.step(actions)  # NEXT_STEP autoreset, as usual
    assert "trajectory" not in info


def test_a_failing_autoreset_changes_nothing(monkeypatch):
    venv = make_vec(2, num_steps=1)
    venv.reset(seed=0)
    actions = np.tile(venv.default_action, (2, 1))
    venv.step(actions)  # both envs end: the next step autoresets them
    state = venv.get_state()
    model = venv.unwrapped.model
    original = model.tokenize
    monkeypatch.setattr(model, "tokenize", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        venv.step(actions)
    assert same_state(state, venv.get_state())
    monkeypatch.setattr(model, "tokenize", original)
    obs, *_ = venv.step(actions)
    assert obs["step"].tolist() == [[0], [0]]


@pytest.mark.parametrize("seed,match", [
    (-1, r"seed=-1 is out of range; seeds lie in \[0, 2\*\*63 - 1\]"),
    (2**64, "out of range"),
    ("7", "seed='7' is not an integer"),
    (2**63 - 1, "too large for 2 envs"),
])
def test_bad_seeds_change_nothing(seed, match):
    venv = make_vec(2)
    venv.reset(seed=0)
    venv.step(np.tile(venv.default_action, (2, 1)))
    state = venv.get_state()
    with pytest.raises(ValueError, match=match):
        venv.reset(seed=seed)
    if seed != 2**63 - 1:  # a valid seed for one env
        with pytest.raises(ValueError, match=r"seed\[1\]="):
            venv.reset(seed=[1, seed])
        with pytest.raises(ValueError, match=r"seeds\[j\]="):
            venv.fork(0, [1], seeds=[seed])
    assert same_state(state, venv.get_state())


def test_the_largest_seed_works(make_env):
    env = make_env(num_steps=1)
    _, info = env.reset(seed=2**63 - 1)
    assert info["seed"] == 2**63 - 1


def test_fork_checks_everything_before_changing_anything():
    venv = make_vec(3)
    venv.reset(seed=0)
    venv.step(np.tile(venv.default_action, (3, 1)))
    state = venv.get_state()
    for args, kwargs in [((0, [1, 1]), {}), ((0, [1, 2]), {"seeds": [1]}), ((0, [1, 5]), {}),
                         ((0, [1, 2]), {"seeds": [3, -4]})]:
        with pytest.raises(ValueError):
            venv.fork(*args, **kwargs)
        assert same_state(state, venv.get_state())


def test_set_state_from_another_configuration_is_refused_whole(make_env):
    env = make_env(num_steps=3)
    env.reset(seed=0)
    env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    other = make_env(num_steps=2)
    other.reset(seed=1)
    foreign = other.unwrapped.get_state()
    with pytest.raises(ValueError, match="num_steps=2; this env has 3"):
        env.unwrapped.set_state(foreign)
    t2i = make_env("Cosmos3RolloutT2I-v0", num_steps=3)
    t2i.reset(seed=1)
    with pytest.raises(ValueError, match="latent_shape"):
        env.unwrapped.set_state(t2i.unwrapped.get_state())
    venv = make_vec(2)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="holds 2 envs; this env has 1"):
        env.unwrapped.set_state(venv.get_state())
    assert same_state(state, env.unwrapped.get_state())
    env.step(env.unwrapped.default_action)


def test_restoring_a_mid_episode_state_of_a_vector_env():
    venv = make_vec(2, num_steps=3)
    venv.reset(seed=4)
    actions = np.tile(venv.default_action, (2, 1))
    venv.step(actions)
    state = venv.get_state()
    first = [venv.step(actions) for _ in range(2)]
    assert first[-1][2].all()
    venv.set_state(state)
    again = [venv.step(actions) for _ in range(2)]
    np.testing.assert_array_equal(first[-1][0]["latent"], again[-1][0]["latent"])
    np.testing.assert_array_equal(first[-1][4]["log_prob"], again[-1][4]["log_prob"])


def test_a_model_used_from_two_threads_is_a_clear_error():
    """Thread A holds the model (as in the middle of a forward) and steps its own env; meanwhile a
    step and a weight update from this thread get the clear error, change nothing, and leave the
    model to thread A, whose step then runs as if nothing had happened."""
    model = Cosmos3Model.embedded(device="cpu")
    a = gym.make("Cosmos3Rollout-v0", num_steps=2, model=model)
    b = gym.make("Cosmos3Rollout-v0", num_steps=2, model=model)
    a.reset(seed=0, options={"prompt": "a red ball"})
    b.reset(seed=0, options={"prompt": "a red ball"})  # the same episode as a's
    state = b.unwrapped.get_state()
    held, release, errors, stepped = threading.Event(), threading.Event(), [], []

    def thread_a():  # every failure here lands in errors: an exception in a thread fails no test by itself
        try:
            with model.exclusive("thread A"):
                held.set()
                if not release.wait(10):
                    errors.append("thread A was never released")
                if model._owner != threading.get_ident():
                    errors.append(f"thread A lost the model to {model._owner} while it held it")
                stepped.append(a.step(a.unwrapped.default_action))  # re-entrant within thread A
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=thread_a)
    thread.start()
    assert held.wait(10)
    try:
        with pytest.raises(RuntimeError, match="in use by another thread"):
            b.step(b.unwrapped.default_action)
        with pytest.raises(RuntimeError, match="in use by another thread"):
            b.unwrapped.update_weights({"proj_out.bias": model.transformer.proj_out.bias + 1})
    finally:
        release.set()
        thread.join()
    assert not errors, errors
    assert model._owner is None and model.weights_version == 0
    assert same_state(state, b.unwrapped.get_state())
    obs, _, _, _, info = b.step(b.unwrapped.default_action)  # b goes on from where it was, to where a went
    np.testing.assert_array_equal(obs["latent"], stepped[0][0]["latent"])
    assert info["log_prob"] == stepped[0][4]["log_prob"]


def test_ctrl_c_while_a_step_is_installed_is_raised_after_it_and_never_wedges(monkeypatch):
    """A real SIGINT that lands while a computed step is installed is held back until the
    installation is complete: the env is then after the step (never half-way), and at the last
    step the ended episode autoresets as usual instead of refusing every later step."""
    import signal

    venv = make_vec(2, num_steps=2)
    venv.reset(seed=0)
    actions = np.tile(venv.default_action, (2, 1))
    engine = venv.unwrapped.engine
    install = engine._install

    def interrupted(*args):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C in the middle of the installation
        install(*args)

    monkeypatch.setattr(engine, "_install", interrupted)
    for expected_step in (1, 2):
        with pytest.raises(KeyboardInterrupt, match="it is installed"):
            venv.step(actions)
        assert [e.step for e in engine.episodes] == [expected_step] * 2
    monkeypatch.setattr(engine, "_install", install)
    assert venv.unwrapped._needs_reset.all()  # the episodes ended with the last step
    obs, *_ = venv.step(actions)  # NEXT_STEP autoreset
    assert obs["step"].tolist() == [[0], [0]]


def test_an_interrupted_call_never_locks_the_model(make_env):
    import threading

    env = make_env(num_steps=2)
    env.reset(seed=0)
    env.unwrapped.model._owner = threading.get_ident()  # what a call cut short inside exclusive() leaves
    env.step(env.unwrapped.default_action)
    assert env.unwrapped.model._owner is None


def test_weights_changed_behind_update_weights_are_not_served_from_the_text_cache(make_env):
    env = make_env(num_steps=3, device="cpu")
    env.reset(seed=2, options={"prompt": "a red ball"})
    env.step(env.unwrapped.default_action)  # caches the text keys/values
    state = env.unwrapped.get_state()
    model = env.unwrapped.model
    new = {k: v * 1.5 if k.endswith("self_attn.to_k.weight") else v
           for k, v in model.transformer.state_dict().items()}
    model.transformer.load_state_dict(new)  # not through update_weights
    cached = env.step(env.unwrapped.default_action)[0]["latent"]
    fresh = make_env(num_steps=3, model=copy.deepcopy(model))
    fresh.reset(seed=0)
    fresh.unwrapped.set_state(state)
    np.testing.assert_array_equal(fresh.step(env.unwrapped.default_action)[0]["latent"], cached)


@pytest.mark.parametrize("corrupt,match", [
    (lambda e: setattr(e, "step", True), "step=True"),
    (lambda e: setattr(e, "step", 1.5), "step=1.5"),
    (lambda e: setattr(e, "sigmas", e.sigmas[:2]), "has sigmas"),
    (lambda e: e.noises.update(video=e.noises["video"][:, :2]), "has noises\\['video'\\]"),
    (lambda e: e.latents.pop("video"), "has latents for streams"),
    (lambda e: setattr(e, "cond_ids", (10**9,)), "token ids outside"),
    (lambda e: setattr(e, "rng", None), "generator"),
])
def test_a_corrupted_state_is_refused_whole(make_env, corrupt, match):
    env = make_env(num_steps=3)
    env.reset(seed=0)
    env.step(env.unwrapped.default_action)
    state = env.unwrapped.get_state()
    bad = env.unwrapped.get_state()
    corrupt(bad["engine"]["episodes"][0])
    with pytest.raises(ValueError, match=match):
        env.unwrapped.set_state(bad)
    assert same_state(state, env.unwrapped.get_state())
    env.step(env.unwrapped.default_action)


def test_a_state_of_another_fps_is_refused(make_env):
    env = make_env(num_steps=2)
    env.reset(seed=0)
    other = make_env(num_steps=2, fps=12.0)
    other.reset(seed=0)
    with pytest.raises(ValueError, match="fps=12.0; this env has 24.0"):
        env.unwrapped.set_state(other.unwrapped.get_state())


def test_single_env_reset_checks_before_reseeding(make_env):
    env = make_env(num_steps=2)
    env.reset(seed=3)
    before = env.unwrapped.np_random.bit_generator.state
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(seed=4, options={"bogus": 1})
    with pytest.raises(ValueError, match="vector-env option"):
        env.reset(seed=4, options={"reset_mask": [False]})
    assert env.unwrapped.np_random.bit_generator.state == before
    _, info = env.reset(seed=np.int64(5))
    assert info["seed"] == 5


def test_a_failed_first_reset_leaves_gym_make_envs_usable(make_env):
    env = make_env(num_steps=2)
    with pytest.raises(ValueError, match="prompt"):
        env.reset(seed=0, options={"prompt": 5})
    env.reset(seed=0)
    _, _, _, _, info = env.step(env.unwrapped.default_action)
    assert np.isfinite(info["log_prob"])


class CtrlCAt:
    """A ``sys.setprofile`` hook that sends a real SIGINT (Ctrl-C) at the ``at``-th call site
    (a function, Python or C, called from a given function; each site counted at its first call)
    that a call reaches after its install (``install``: the engine's ``commit``, the model's
    ``staged_update``) has returned, or (``after=False``) before the install begins (or a section
    begins to hold Ctrl-C for it). Calls made by the interrupt section itself are not counted:
    its exit's few bytecodes after SIGINT gets its handler back, like the return itself, are a
    window no Python code can close. A SIGINT that lands in a generator closing as it is dropped
    half-way (``next(module.parameters())``) is printed and lost by Python ("Exception ignored
    in"), whoever wrote the generator: ``sys.unraisablehook`` sees it, and it is sent again at
    the next site."""

    def __init__(self, at: int, after: bool = True):
        self.at, self.after = at, after
        self.count, self.fired, self.started, self.done, self.seen = 0, False, False, False, set()
        self.lost = False

    def run(self, call, install: tuple):
        owner, name = install
        original = getattr(owner, name)

        def installing(*args, **kwargs):
            self.started = True
            result = original(*args, **kwargs)
            if self.after:
                sys.setprofile(self)  # from here on (profiling the whole call would take minutes)
            return result

        def unraisable(report):
            if report.exc_type is KeyboardInterrupt:
                self.lost = True  # to be sent again; the hook, which the exception unset, profiles again
                sys.setprofile(self)
            else:
                hook(report)

        self.target = call.__code__
        setattr(owner, name, installing)
        # The cyclic collector would run finalizers at points that differ between runs: off meanwhile.
        collecting, hook = gc.isenabled(), sys.unraisablehook
        gc.disable()
        sys.unraisablehook = unraisable
        if not self.after:
            sys.setprofile(self)
        try:
            return call()
        finally:
            sys.setprofile(None)
            sys.unraisablehook = hook
            setattr(owner, name, original)
            if collecting:
                gc.enable()

    @staticmethod
    def section(frame) -> bool:
        """Whether ``frame`` runs the interrupt section's own code (or contextlib's, for it)."""
        if frame is None or frame.f_code.co_filename not in (interrupts.__file__, contextlib.__file__):
            return False
        gen = getattr(frame.f_locals.get("self"), "gen", None)
        return frame.f_code.co_filename == interrupts.__file__ or getattr(
            getattr(gen, "gi_code", None), "co_filename", None) == interrupts.__file__

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if event == "return":
            self.done |= code is self.target  # the call's own return: the caller's business
            return
        if self.done or (self.fired and not self.lost) or event not in ("call", "c_call"):
            return
        if not self.after and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            self.started = True  # a section holds Ctrl-C from here: the install is about to begin
        caller = frame if event == "c_call" else frame.f_back
        if self.section(frame) or self.section(caller) or (not self.after and self.started):
            return
        if self.lost:
            self.lost = False
            signal.raise_signal(signal.SIGINT)
            return
        site = (caller.f_code, arg if event == "c_call" else code)
        if site not in self.seen:
            self.seen.add(site)
            if self.count == self.at:
                self.fired = True
                signal.raise_signal(signal.SIGINT)
            self.count += 1


def ctrl_c_cases():
    """(make, call, snapshot, restore, install) for each call that installs something."""
    from cosmos3_gym.model import model
    from cosmos3_gym.rollout.engine import RolloutEngine

    commit = (RolloutEngine, "commit")
    actions = lambda env: np.tile(env.default_action, (env.num_envs, 1))  # noqa: E731

    def vector(**kwargs):
        venv = make_vec(2, reward="none", **kwargs).unwrapped
        venv.reset(seed=1)
        venv.step(actions(venv))
        return venv

    def single():
        env = gym.make("Cosmos3Rollout-v0", num_steps=3, reward="none")
        env.reset(seed=1)
        env.step(env.unwrapped.default_action)
        return env

    def weights_of(env):
        return {k: v + 0.01 for k, v in env.unwrapped.model.transformer.state_dict().items()}

    state = (lambda env: env.unwrapped.get_state(), lambda env, s: env.unwrapped.set_state(s))

    def model_state(env):
        model = env.unwrapped.model
        return {k: v.clone() for k, v in model.transformer.state_dict().items()}, model.weights_version

    def set_model_state(env, saved):
        model = env.unwrapped.model
        model.transformer.load_state_dict(saved[0])
        model.weights_version = saved[1]

    weights = (model_state, set_model_state)
    staged = (model, "staged_update")
    return {
        "vector step": (lambda: vector(num_steps=3), lambda env: env.step(actions(env)), *state, commit),
        "vector last step, same-step autoreset": (lambda: vector(num_steps=2, autoreset_mode="SameStep"),
                                                  lambda env: env.step(actions(env)), *state, commit),
        "vector reset": (vector, lambda env: env.reset(seed=9), *state, commit),
        "single step": (single, lambda env: env.step(env.unwrapped.default_action), *state, commit),
        "single reset": (single, lambda env: env.reset(seed=9), *state, commit),
        "single update_weights": (single, lambda env: env.unwrapped.update_weights(weights_of(env)), *weights,
                                  staged),
        "model update_weights": (single, lambda env: env.unwrapped.model.update_weights(weights_of(env)), *weights,
                                 staged),
    }


def same_snapshot(a, b) -> bool:
    if isinstance(a, dict) and "engine" in a:
        return same_state(a, b)
    return a[1] == b[1] and all(torch.equal(a[0][k], b[0][k]) for k in a[0])


@pytest.mark.parametrize("case", list(ctrl_c_cases()))
def test_a_ctrl_c_after_the_install_never_hides_that_the_call_took_effect(case):
    """A real SIGINT at the function calls made between a call's install and its return (every
    one of the last 15, and 30 spread over the rest): the call either returns its result, or
    raises a KeyboardInterrupt that says it took effect; either way the env (or the model) is
    exactly one call ahead, so the caller never repeats it. A SIGINT before the install (at 10
    points of the call's computation) leaves everything as it was."""
    make, call, snapshot, restore, install = ctrl_c_cases()[case]
    env = make()
    before = snapshot(env)

    def sites(after: bool) -> int:
        restore(env, before)
        counter = CtrlCAt(10**9, after)
        counter.run(lambda: call(env), install)
        return counter.count

    count = sites(after=True)  # a call without interrupt: what the env (or the model) is after it
    after = snapshot(env)
    assert not same_snapshot(before, after)
    outcomes = set()
    for at in sorted(set(range(0, count, max(1, count // 30))) | set(range(max(0, count - 15), count))):
        restore(env, before)
        ctrl_c = CtrlCAt(at)
        try:
            ctrl_c.run(lambda: call(env), install)
            outcomes.add("returned")
        except KeyboardInterrupt as error:
            assert "it is installed" in str(error), (at, str(error))  # ...: the call took effect
            outcomes.add("took effect")
        assert ctrl_c.fired and same_snapshot(snapshot(env), after), at
    assert count >= 5 and outcomes <= {"returned", "took effect"} and "took effect" in outcomes
    count = sites(after=False)
    for at in range(0, count, max(1, count // 10)):
        restore(env, before)
        ctrl_c = CtrlCAt(at, after=False)
        with pytest.raises(KeyboardInterrupt) as error:
            ctrl_c.run(lambda: call(env), install)
        assert ctrl_c.fired and "it is installed" not in str(error.value)
        assert same_snapshot(snapshot(env), before), at
    restore(env, before)
    call(env)
    assert same_snapshot(snapshot(env), after)  # and nothing was left behind (no held SIGINT, no lock)
    env.close()
