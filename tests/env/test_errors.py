"""Bad input raises a clear error naming what is wrong, and the env stays usable."""

import json
import shutil

import numpy as np
import torch
import pytest

import gymnasium as gym

from cosmos3_gym.model.model import Cosmos3Model
from cosmos3_gym.model.tiny_model import TINY_CHECKPOINT


def assert_still_usable(env):
    _, _, terminated, _, info = env.step(env.unwrapped.default_action)
    assert np.isfinite(info["log_prob"])


@pytest.fixture
def env(make_env):
    env = make_env(num_steps=3)
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("action,match", [
    (np.zeros(3, dtype=np.float32), r"shape \(3,\)"),
    # a bare number: its own shape, not numpy's 1-d copy; the message says what the entries are
    (4.0, r"action has shape \(\); expected \(2,\) \(guidance_scale, noise_level\)$"),
    (np.array(["a", "b"]), "dtype"),
    (np.array([np.nan, 0.5], dtype=np.float32), "NaN"),
    (np.array([6.0, 1.5], dtype=np.float32), "outside the action space bounds"),
    (np.array([0.0, 0.5], dtype=np.float32), "outside the action space bounds"),
])
def test_bad_actions(env, action, match):
    with pytest.raises(ValueError, match=match):
        env.step(action)
    assert_still_usable(env)


def test_bad_noise_action(make_env):
    env = make_env(num_steps=3, action_mode="noise")
    env.reset(seed=0)
    shape = env.observation_space["latent"].shape
    with pytest.raises(ValueError, match=r"expected \(\d+(, \d+)*\) \(the step's noise: one standard normal draw"):
        env.step(np.zeros(shape[1:], dtype=np.float32))
    bad = np.zeros(shape, dtype=np.float32)
    bad[0, 0, 0, 0] = np.inf
    with pytest.raises(ValueError, match=rf"NaN or Inf in float32 \(1 of {bad.size} entries; the first, "
                                         r"action\[0, 0, 0, 0\] = inf\); every entry must be finite"):
        env.step(bad)
    env.step(env.action_space.sample())


def test_one_envs_action_given_to_a_vector_env(tiny_model):
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=4, vectorization_mode="vector_entry_point", num_steps=3,
                        model=tiny_model)
    venv.reset(seed=0)
    one = venv.unwrapped.default_action
    with pytest.raises(ValueError, match=r"has shape \(2,\); expected \(4, 2\) \(guidance_scale, noise_level\); "
                                         r"that is one env's action, and these 4 envs take one each, stacked"):
        venv.step(one)
    _, _, _, _, infos = venv.step(np.stack([one] * 4))  # still usable
    assert np.isfinite(infos["log_prob"]).all()
    venv.close()


def test_unknown_option_and_bad_prompts(env):
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['promt'\]"):
        env.reset(seed=1, options={"promt": "typo"})
    assert_still_usable(env)
    with pytest.raises(ValueError, match=r"options\['prompt'\]=42 is not a str"):
        env.reset(seed=1, options={"prompt": 42})
    assert_still_usable(env)
    with pytest.raises(ValueError, match=r"max_prompt_tokens=1024: shorten it, or raise max_prompt_tokens \(a keyword "
                                         r"of the rollout envs\) to \d{4} or more"):
        env.reset(seed=1, options={"prompt": "a red ball " * 200})
    assert_still_usable(env)


def test_prompt_budget_can_be_set(make_env):
    env = make_env(num_steps=2, max_prompt_tokens=50)
    with pytest.raises(ValueError, match="max_prompt_tokens=50"):
        env.reset(seed=0, options={"prompt": "short"})  # the templates alone exceed 50 tokens


@pytest.mark.parametrize("overrides,match", [
    ({"num_steps": 0}, "num_steps=0"),
    ({"kind": "euler"}, "kind='euler'"),
    ({"action_mode": "pixels"}, "action_mode='pixels'"),
    ({"sigma_grid": "explicit", "sigmas": [1.0, 0.6, 0.8], "num_steps": 3}, "strictly decreasing"),
    ({"sigma_grid": "explicit", "sigmas": [1.0, 0.5], "num_steps": 3}, "define 2 steps"),
    ({"guidance_bounds": [5.0, 1.0]}, "guidance_bounds"),
    ({"guidance_scale": 20.0}, "guidance_scale=20.0 lies outside"),
    ({"reward": "beauty"}, "reward='beauty'"),
    ({"num_frames": 8}, "num_frames=8 is not allowed"),
    ({"height": 30}, "height=30 is not allowed"),
])
def test_invalid_presets(overrides, match):
    with pytest.raises(ValueError, match=match):
        gym.make("Cosmos3Rollout-v0", **overrides)


@pytest.mark.parametrize("how", ["make", "make_vec", "make_vec_default_mode"])
@pytest.mark.parametrize("env_id", ["Cosmos3Rollout-v0", "Cosmos3PolicyRollout-v0", "Cosmos3World-v0",
                                    "ProceduralWorld-v0"])
@pytest.mark.parametrize("keyword", ["frameskip", "num_stepz"])
def test_an_unknown_keyword_is_a_type_error_as_in_python(how, env_id, keyword):
    """As Python's own TypeError for an unexpected keyword, which the world envs raise from their
    signatures: TorchRL's GymEnv passes frameskip= and retries without it only on a TypeError whose
    message holds "unexpected keyword argument 'frameskip'"."""
    if how == "make_vec" and env_id == "ProceduralWorld-v0":
        pytest.skip("ProceduralWorld-v0 has no vector entry point")
    make = {"make": lambda: gym.make(env_id, **{keyword: 1}),
            "make_vec": lambda: gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point",
                                             **{keyword: 1}),
            "make_vec_default_mode": lambda: gym.make_vec(env_id, num_envs=2, **{keyword: 1})}[how]
    with pytest.raises(TypeError, match=keyword) as err:
        make()
    message = str(err.value)
    assert f"unexpected keyword argument '{keyword}'" in message  # what TorchRL looks for
    if "Rollout" in env_id:  # the presets name the env and the allowed keywords
        assert (f"unknown keyword(s) for env '{env_id}': got an unexpected keyword argument '{keyword}'"
                in message)
        assert "preset fields are [" in message and "'num_steps'" in message


def test_checkpoint_must_be_a_path_and_not_beside_a_model(tiny_model, tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint=123 is invalid; allowed: a folder path \(a str or pathlib.Path\)"):
        gym.make("Cosmos3Rollout-v0", checkpoint=123)
    with pytest.raises(ValueError, match="checkpoint=None is invalid"):
        gym.make("Cosmos3World-v0", checkpoint=None)
    with pytest.raises(ValueError, match="checkpoint='/no/such/dir' and model= were both given; pass one"):
        gym.make("Cosmos3World-v0", checkpoint="/no/such/dir", model=tiny_model)
    with pytest.raises(FileNotFoundError, match=f"checkpoint='{tmp_path}' is missing component"):  # a Path is a path
        gym.make("Cosmos3Rollout-v0", checkpoint=tmp_path)


@pytest.mark.parametrize("layers, keys", [(2, "unexpected_keys"), (6, "missing_keys")])
def test_weights_that_do_not_fit_their_config_are_refused(tmp_path, layers, keys):
    """diffusers only warns; a config of 2 layers over weights of 4 would run half the model."""
    shutil.copytree(TINY_CHECKPOINT, tmp_path / "ckpt")
    config_file = tmp_path / "ckpt" / "transformer" / "config.json"
    config = json.loads(config_file.read_text())
    assert config["num_hidden_layers"] == 4
    config_file.write_text(json.dumps({**config, "num_hidden_layers": layers}))
    with pytest.raises(ValueError, match=f"the weights of component 'transformer' do not fit its config.json "
                                         f"\\({{'{keys}': \\['layers.{min(layers, 4)}."):
        Cosmos3Model.from_pretrained(tmp_path / "ckpt", device="cpu")


def test_a_component_that_does_not_load_is_named(tmp_path):
    shutil.copytree(TINY_CHECKPOINT, tmp_path / "ckpt")
    weights = tmp_path / "ckpt" / "vae" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated
    with pytest.raises(ValueError, match="component 'vae' does not load \\(OSError: Unable to load weights"):
        Cosmos3Model.from_pretrained(tmp_path / "ckpt", device="cpu")
    shutil.copytree(TINY_CHECKPOINT, tmp_path / "ckpt2")
    (tmp_path / "ckpt2" / "text_tokenizer" / "tokenizer.json").write_text("not json")
    with pytest.raises(ValueError, match="component 'text_tokenizer' does not load"):
        Cosmos3Model.from_pretrained(tmp_path / "ckpt2", device="cpu")


def test_missing_checkpoint_components(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        gym.make("Cosmos3Rollout-v0", checkpoint=str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="missing component 'transformer'"):  # a folder, but not a checkpoint
        gym.make("Cosmos3Rollout-v0", checkpoint=str(tmp_path))
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text("{}")
    (tmp_path / "transformer" / "diffusion_pytorch_model.bin").write_text("")
    with pytest.raises(FileNotFoundError, match="missing component 'transformer'.*safetensors"):
        gym.make("Cosmos3Rollout-v0", checkpoint=str(tmp_path))


def test_step_before_reset_and_after_end(make_env):
    env = make_env(num_steps=1).unwrapped
    with pytest.raises(RuntimeError, match="reset"):
        env.step(env.default_action)
    env.reset(seed=0)
    env.step(env.default_action)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(env.default_action)
    env.reset(seed=0)
    env.step(env.default_action)


def test_non_finite_latent_ends_the_episode(make_env):
    env = make_env(num_steps=3, action_mode="noise").unwrapped
    env.reset(seed=0)
    env.engine.episode(0).latents["video"][0, 0, 0, 0, 0] = float("nan")
    _, reward, terminated, _, info = env.step(env.action_space.sample())
    assert terminated and reward == 0.0 and "NaN/Inf" in info["error"]
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(env.action_space.sample())
    assert not terminated and "error" not in info


@pytest.mark.parametrize("num_envs", [0, -1, 2.0, True])
def test_num_envs_is_named(num_envs):
    with pytest.raises(ValueError, match=f"num_envs={num_envs!r} is invalid; use an integer >= 1"):
        gym.make_vec("Cosmos3Rollout-v0", num_envs=num_envs, vectorization_mode="vector_entry_point")


def test_odd_arguments_get_errors_that_name_them():
    venv = gym.make_vec("Cosmos3Rollout-v0", num_envs=3, vectorization_mode="vector_entry_point", num_steps=2)
    venv.reset(seed=np.array(5))  # a 0-d array is a seed
    model = venv.unwrapped.model
    cases = [
        (lambda: venv.fork(0, 1), r"fork\(dst=1\): dst must be a list"),
        (lambda: venv.fork(0, [1], seeds=5), r"fork\(seeds=5\)"),
        (lambda: venv.step([[1.0, 0.5], [2.0], [3.0, 0.5]]), "ragged"),
        (lambda: venv.step(torch.empty(3, 2, device="meta")), "meta tensor"),
        (lambda: venv.step(np.array([[10.0000001, 0.5]] * 3)), "outside the action space bounds"),
        (lambda: model.update_weights(model.transformer), "got the module itself"),
        (lambda: model.update_weights(model.transformer.parameters()), r"parameters\(\) has no names"),
        (lambda: model.update_weights({"proj_out.bias": torch.empty(16, device="meta")}), "meta tensor"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    assert model.weights_version == 0
    _, _, _, _, info = venv.step(np.tile(venv.default_action, (3, 1)))
    assert np.isfinite(info["log_prob"]).all()


@pytest.mark.parametrize("kwargs,match", [
    ({"autoreset_mode": "same_step"}, r"autoreset_mode='same_step' is not supported; use AutoresetMode"),
    ({"dtype": "float8"}, "dtype='float8' is not supported"),
    ({"reward_fn": "brightness"}, "reward_fn='brightness' is not callable"),
    ({"reward_fn": lambda frames: np.zeros(len(frames))}, r"reward_fn='<lambda>' cannot be called with \(frames, "
     r"prompts\): too many positional arguments; pass reward\(frames, prompts\) -> float32 \[B\]"),
    ({"reward_fn": lambda frames, prompts, model: 0.0}, "missing a required argument: 'model'"),
    ({"reward": lambda frames, prompts: np.zeros(len(frames))}, r"allowed: \['colorfulness', .*\]; a reward function "
     r"of your own goes in reward_fn=, not reward="),
    ({"reward": "brightness", "reward_fn": lambda frames, prompts: np.zeros(len(frames))},
     r"reward='brightness' and reward_fn='<lambda>' both name the reward; pass one of them"),
    ({"reward": "brightness", "reward_fn": 42}, r"reward_fn=42 is not callable"),  # the first thing wrong
])
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", **kwargs)


def test_a_device_torch_cannot_use_is_named_before_anything_loads(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device: 'cuda' was requested but no CUDA device is available "
                                         r"\(torch.cuda.is_available\(\) is False\); use device='cpu'"):
        gym.make("Cosmos3World-v0", device="cuda")
    with pytest.raises(ValueError, match=r"device: 'gpu' is not a torch device; use cpu, cuda or cuda:N"):
        gym.make("Cosmos3Rollout-v0", device="gpu")


@pytest.mark.parametrize("returned", [np.array(["0.5"]), np.array([1 + 2j]), {"r": 1.0}])
def test_reward_functions_must_return_real_numbers(make_env, returned):
    env = make_env(num_steps=1, reward_fn=lambda frames, prompts: returned)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="reward_fn returned"):
        env.step(env.unwrapped.default_action)


def test_action_options_are_checked_for_finiteness_after_the_float32_cast(make_env, tmp_path):
    """Guards options['actions'] of forward dynamics: a float64 1e300 is finite, so it passed the check
    made before the float32 cast, became inf, and the episode died at step 0 leaving a trajectory that
    would not load. Now it is refused at reset, naming the option, the entry and its value, and the env
    stays usable; step's actions go through the same check (a float64 1e300 action is named too)."""
    from cosmos3_gym.rollout.procedural_world import render, sample_scene
    from cosmos3_gym.rollout.trajectory import Trajectory

    env = make_env("Cosmos3ForwardDynamicsRollout-v0", num_steps=2)
    image = render(sample_scene(np.random.default_rng(0)), num_frames=9)[0]
    actions = np.random.default_rng(0).uniform(-1, 1, (8, 2))  # float64, as numpy draws them
    huge = actions.copy()
    huge[3, 1] = 1e300
    with pytest.raises(ValueError, match=r"options\['actions'\] holds NaN or Inf in float32 \(1 of 16 entries; the "
                                         r"first, options\['actions'\]\[3, 1\] = 1e\+300\); every entry must be finite"):
        env.reset(seed=0, options={"image": image, "actions": huge})
    per_env = np.stack([actions, huge])[1:]  # one per env ([1, chunk, raw_dim]): the index counts that axis
    with pytest.raises(ValueError, match=r"options\['actions'\]\[0, 3, 1\] = 1e\+300"):
        env.reset(seed=0, options={"image": image, "actions": per_env})
    env.reset(seed=0, options={"image": image, "actions": actions})  # float64 within float32's range: accepted
    terminated = False
    while not terminated:
        _, _, terminated, _, info = env.step(env.unwrapped.default_action)
    info["trajectory"].save(tmp_path / "t.safetensors")
    assert Trajectory.load(tmp_path / "t.safetensors").action_mode == "forward_dynamics"
    with pytest.raises(ValueError, match=r"action holds NaN or Inf in float32 \(1 of 2 entries; the first, "
                                         r"action\[0\] = 1e\+300\)"):
        plain = make_env(num_steps=2)
        plain.reset(seed=0)
        plain.step(np.array([1e300, 0.5]))


def test_workers_without_ray_say_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # what an import of a package not installed meets
    with pytest.raises(ModuleNotFoundError, match=r"num_workers=2 runs the envs on Ray workers, and Ray is not "
                                                  r"installed: pip install 'ray>=2.40' \(in a clone of this "
                                                  r"repository: pip install -e '\.\[ray\]'\)"):
        gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", num_workers=2)


def test_ray_missing_one_of_its_own_dependencies_is_not_called_ray_missing(monkeypatch):
    """Where Ray is installed and something Ray imports is not, Ray's own error comes through."""
    import importlib.abc
    import sys

    class RayWithoutPsutil(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "ray":
                raise ModuleNotFoundError("No module named 'psutil'", name="psutil")

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(sys, "meta_path", [RayWithoutPsutil(), *sys.meta_path])
    with pytest.raises(ModuleNotFoundError, match="^No module named 'psutil'$"):
        gym.make_vec("Cosmos3Rollout-v0", num_envs=2, vectorization_mode="vector_entry_point", num_workers=2)


@pytest.mark.parametrize("env_id", ["Cosmos3PushT-v0", "PushT-Twin-v0"])
def test_pusht_without_gym_pusht_says_what_to_install(env_id, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gym_pusht" else real(name, *a))
    with pytest.raises(ImportError, match=r"PushT needs gym-pusht: pip install 'gym-pusht>=0.1.8,<0.2' \(in a clone "
                                          r"of this repository: pip install -e '\.\[pusht\]'\)"):
        gym.make(env_id)


@pytest.mark.parametrize("keyword,suggestion", [("guidance", "guidance_scale"), ("num_step", "num_steps"),
                                                ("render_mod", "render_mode"), ("devise", "device"),
                                                ("num_env", "num_envs"), ("reward_func", "reward_fn")])
def test_a_misspelled_keyword_gets_a_suggestion_and_the_env_arguments(keyword, suggestion):
    with pytest.raises(TypeError) as err:
        gym.make("Cosmos3Rollout-v0", num_steps=2, **{keyword: 1})
    message = str(err.value)
    assert f"did you mean '{suggestion}'?" in message
    assert "besides those, the env takes [" in message and "'reward_fn'" in message and "'render_mode'" in message
    with pytest.raises(TypeError) as err:
        gym.make("Cosmos3Rollout-v0", num_steps=2, zzz=1)
    assert "did you mean" not in str(err.value)  # nothing close: no guess


@pytest.mark.parametrize("keyword", ["num_envs", "num_env", "group_size", "autoreset_mode", "array_type"])
def test_a_vector_envs_keyword_to_gym_make_says_where_it_goes(keyword, monkeypatch):
    """gym.make builds one env: a vector env's keyword (or a near miss of one) is refused before a model
    loads, saying how to build a batch, instead of Python's "multiple values for argument 'num_envs'"."""
    from cosmos3_gym.model import model as model_module

    for loader in ("embedded", "from_pretrained"):  # the env loads its preset's model through from_pretrained
        monkeypatch.setattr(model_module.Cosmos3Model, loader, lambda *a, **k: pytest.fail("a model loaded"))
    guess = r"; did you mean 'num_envs'\?" if keyword == "num_env" else ""
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{keyword}'{guess} \(a vector env's keyword; "
                                        r"gym.make builds one env: for N envs in one batch use gym.make_vec\("
                                        r"\"Cosmos3Rollout-v0\", num_envs=N, vectorization_mode=\"vector_entry_point\"\)\)"
                                        r"; preset fields are .*; besides those, the env takes \['preset', 'render_mode', "
                                        r"'device', 'dtype', 'reward_fn', 'model'\]"):
        gym.make("Cosmos3Rollout-v0", **{keyword: 2})


def test_a_preset_of_the_wrong_type_is_named():
    from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv

    for make in (lambda: gym.make("Cosmos3Rollout-v0", preset=3), lambda: Cosmos3RolloutVectorEnv(2, preset=3)):
        with pytest.raises(TypeError, match=r"preset=3 is a int; give an env id such as 'Cosmos3Rollout-v0' or a Preset"):
            make()


def test_the_ground_truth_names_the_imagined_worlds_keywords_it_lacks():
    with pytest.raises(TypeError, match=r"for env 'ProceduralWorld-v0': got an unexpected keyword argument 'num_steps' "
                                        r"\(a keyword of Cosmos3World-v0 \(the imagined world: its model, sampler and success rule\); "
                                        r"ProceduralWorld-v0 is its ground truth, with no model\); the env takes "
                                        r"\['chunk', 'horizon', 'size', 'goal', 'render_mode'\]"):
        gym.make("ProceduralWorld-v0", num_steps=4)
    with pytest.raises(TypeError, match=r"'goals'; did you mean 'goal'\?; the env takes"):
        gym.make("ProceduralWorld-v0", goals="top left")
    with pytest.raises(TypeError, match=r"'num_env'; did you mean 'num_envs'\? \(a vector env's keyword; gym.make builds "
                                        r"one env: for N envs use gym.make_vec\(\"ProceduralWorld-v0\", num_envs=N\), or "
                                        r"SB3's make_vec_env"):
        gym.make("ProceduralWorld-v0", num_env=2)


def test_a_world_envs_keyword_note_names_only_what_its_vector_env_takes():
    """Cosmos3World-v0's vector env takes num_envs but not group_size: only the first is sent to make_vec;
    the rollout env's num_workers (Ray) is."""
    with pytest.raises(TypeError, match=r"'num_envs' \(a vector env's keyword"):
        gym.make("Cosmos3World-v0", num_envs=2)
    with pytest.raises(TypeError) as err:
        gym.make("Cosmos3World-v0", group_size=2)
    assert "make_vec" not in str(err.value)
    with pytest.raises(TypeError, match=r"'num_workers' \(Ray workers, a vector env's keyword: gym.make_vec\("
                                        r"\"Cosmos3Rollout-v0\", num_envs=N, num_workers=W\)\)"):
        gym.make("Cosmos3Rollout-v0", num_workers=2)


@pytest.mark.parametrize("env_id", ["Cosmos3Rollout-v0", "Cosmos3World-v0", "Cosmos3PushT-v0"])
def test_a_misspelled_keyword_to_make_vec_gets_a_suggestion_before_anything_is_built(env_id, monkeypatch):
    """``gym.make_vec(..., vectorization_mode="vector_entry_point")`` checks its keywords as ``gym.make``
    does: a "did you mean" and the keywords taken, raised before a model loads (none could here)."""
    from cosmos3_gym.model import model as model_module

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded for a call that should have been refused")

    monkeypatch.setattr(model_module.Cosmos3Model, "embedded", no_model)
    monkeypatch.setattr(model_module.Cosmos3Model, "from_pretrained", no_model)
    with pytest.raises(TypeError, match=rf"unknown keyword\(s\) for env '{env_id}': got an unexpected keyword argument "
                                        r"'num_step'; did you mean 'num_steps'\?; .*'render_mode'"):
        gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", num_step=2)


def test_multi_stream_noise_errors_name_the_stream_and_how_to_stack(tiny_model):
    venv = gym.make_vec("Cosmos3RolloutAV-v0", num_envs=2, vectorization_mode="vector_entry_point", num_steps=2,
                        action_mode="noise", model=tiny_model)
    venv.reset(seed=0)
    one = {key: np.zeros(box.shape, np.float32) for key, box in venv.single_action_space.spaces.items()}
    with pytest.raises(ValueError, match=r"action holds one env's noise per stream \('latent': \(.*\), "
                                         r"'sound_latent': \(.*\)\); these 2 envs take one each, stacked per stream"):
        venv.step(one)
    stacked = {key: np.stack([noise] * 2) for key, noise in one.items()}  # the message's recipe
    bad = dict(stacked, sound_latent=stacked["sound_latent"][:, :1])
    with pytest.raises(ValueError, match=r"action\['sound_latent'\] has shape \(2, 1, \d+\); expected \(2, \d+, \d+\) "
                                         r"\(the step's noise"):
        venv.step(bad)
    _, _, _, _, infos = venv.step(stacked)
    assert np.isfinite(infos["log_prob"]).all()
    venv.close()


def test_world_env_shape_errors_say_what_a_command_is(tiny_model):
    from cosmos3_gym.world.envs import Cosmos3WorldVectorEnv

    venv = Cosmos3WorldVectorEnv(1, model=tiny_model)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=r"action has shape \(8, 2\); expected \(1, 8, 2\) \(a velocity command "
                                         r"\(dx, dy\) per frame\); that is one env's action: add the env axis"):
        venv.step(np.zeros((8, 2), np.float32))
    venv.step(np.zeros((1, 8, 2), np.float32))
    venv.close()


def test_the_worlds_name_chunk_obs_type_and_a_vector_envs_batch():
    """A chunk the model cannot imagine is named as chunk (not the preset's num_frames); gym-pusht's obs_type is
    explained, not matched to dtype; a chunk's row (what a Gymnasium vector env hands each env when given one
    chunk for all) says how the batch goes."""
    with pytest.raises(ValueError, match=r"chunk=6 is invalid; Cosmos 3 generates 1 \+ 4m frames, so use a multiple of 4"):
        gym.make("Cosmos3World-v0", chunk=6)
    with pytest.raises(ValueError, match=r"^size=30 is not allowed for Cosmos3World-v0: use a multiple of 4 \(the "
                                         r"model's VAE shrinks each side 4x\)$"):
        gym.make("Cosmos3World-v0", size=30)
    for env_id in ("ProceduralWorld-v0", "Cosmos3World-v0"):
        with pytest.raises(TypeError, match=r"'obs_type' \(the observation is always the RGB frame, uint8 \(size, size, "
                                            r"3\)\); the env takes"):
            gym.make(env_id, obs_type="pixels")
    venv = gym.make_vec("ProceduralWorld-v0", num_envs=3)
    venv.reset(seed=0)
    with pytest.raises(ValueError, match=r"action has shape \(2,\); expected \(8, 2\) \(a velocity command \(dx, dy\) "
                                         r"per frame\); that is one row of a chunk, and a step takes 8: under a Gymnasium "
                                         r"vector env \(SyncVectorEnv, SB3's make_vec_env\) give \(num_envs, 8, 2\)"):
        venv.step(np.zeros((8, 2), np.float32))
    venv.step(np.zeros((3, 8, 2), np.float32))  # the batch the message asks for
