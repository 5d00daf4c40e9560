"""Preset validation: every bad value raises a short ValueError that names the field and the fix."""

import math
import subprocess
import sys

import pytest

from cosmos3_gym.env.presets import Preset, all_presets, load_preset

BASE = load_preset("Cosmos3Rollout-v0")


def rejected(**overrides) -> str:
    with pytest.raises(ValueError) as err:
        BASE.override(**overrides)
    message = str(err.value)
    assert len(message) < 600, message[:2000]
    return message


def test_shipped_presets_are_valid_and_reward_names_match_the_rewards():
    from cosmos3_gym.env.rewards import REWARDS

    assert [p.id for p in all_presets()] == [  # file order
        "Cosmos3ForwardDynamicsRollout-v0", "Cosmos3InverseDynamicsRollout-v0", "Cosmos3PolicyRollout-v0",
        "Cosmos3RolloutAV-v0", "Cosmos3RolloutI2V-v0", "Cosmos3RolloutT2I-v0", "Cosmos3Rollout-v0",
        "Cosmos3RolloutV2V-v0"]
    from cosmos3_gym.env.presets import REWARD_NAMES

    assert REWARD_NAMES == tuple(REWARDS)
    assert BASE.override(prompts=["a", "b"]).prompts == ("a", "b")


def test_a_single_prompt_string_is_rejected_not_split_into_letters():
    for make in (lambda: BASE.override(prompts="a red ball"), lambda: Preset(id="x", prompts="a red ball")):
        with pytest.raises(ValueError, match=r"prompts='a red ball'.*list of strings.*\['a red ball'\]"):
            make()
    assert "list of strings" in rejected(prompts=["ok", 3])
    assert "list of strings" in rejected(prompts=[])


def test_num_steps_is_capped_at_the_training_timesteps():
    assert BASE.override(num_steps=1000).num_steps == 1000
    for value in (10**7, 1001, 0):
        message = rejected(num_steps=value)
        assert f"num_steps={value}" in message and "[1, 1000]" in message and "training timesteps" in message
    assert "num_steps=<int too large to print>" in rejected(num_steps=10**5000)  # beyond what repr() allows


@pytest.mark.parametrize("field,value", [
    ("prompts", "x" * 10**6), ("prompts", ("x",) * 10**6 + (1,)), ("kind", "k" * 10**6), ("reward", "r" * 10**6),
    ("sigma_grid", "s" * 10**6), ("guidance_bounds", (1.0,) * 10**6), ("fps", "f" * 10**6),
    ("negative_prompt", [0] * 10**6), ("num_frames", float(10**6)),
])
def test_error_messages_stay_short_for_huge_values(field, value):
    assert f"{field}=" in rejected(**{field: value})


def test_huge_explicit_grid_and_unknown_keyword_stay_short():
    message = rejected(sigma_grid="explicit", num_steps=5, sigmas=[1.0, 0.5] * 10**5)
    assert "sigmas=" in message and "at most 1001" in message
    with pytest.raises(TypeError, match="unknown keyword") as err:  # as Python's unexpected keyword
        BASE.override(**{"q" * 10**6: 1})
    assert len(str(err.value)) < 600
    with pytest.raises(ValueError) as err:
        load_preset("n" * 10**6)
    assert len(str(err.value)) < 600


def test_a_world_env_id_where_a_preset_is_expected_says_how_to_wrap_a_world():
    import cosmos3_gym
    from cosmos3_gym.env.presets import WORLD_ENV_HINTS
    from cosmos3_gym.env.sb3 import Cosmos3SB3VecEnv

    assert set(WORLD_ENV_HINTS) == set(cosmos3_gym.WORLD_ENV_IDS) | set(cosmos3_gym.PUSHT_ENV_IDS)  # the registered ones
    from cosmos3_gym.env.vector_env import Cosmos3RolloutVectorEnv

    with pytest.raises(ValueError, match=r"is a world env, not a rollout preset; for SB3: Cosmos3SB3VecEnv\.make\("
                                         r"\"Cosmos3World-v0\", num_envs=4\)"):
        Cosmos3RolloutVectorEnv(2, "Cosmos3World-v0")
    # what the hint says runs (the vector envs' hints are evaluated as written, with 2 envs)
    from stable_baselines3.common.env_util import make_vec_env

    code = WORLD_ENV_HINTS["Cosmos3World-v0"].split(" (")[0].replace("num_envs=4", "num_envs=2")
    venv = eval(code, {"Cosmos3SB3VecEnv": Cosmos3SB3VecEnv})
    assert venv.reset().shape[0] == 2
    venv.close()
    plain = make_vec_env("ProceduralWorld-v0", n_envs=2)
    assert plain.reset().shape[0] == 2
    with pytest.raises(ValueError) as err:
        load_preset("Cosmos3Rolout-v0")
    assert "world env" not in str(err.value)


@pytest.mark.parametrize("sigmas,match", [
    ([1.0, 0.6, 0.8, 0.0], "strictly decreasing"), ([1.0, 0.5, 0.5, 0.0], "strictly decreasing"),
    ([1.5, 0.5, 0.2, 0.0], r"\[0, 1\]"), ([1.0, float("nan"), 0.2, 0.0], r"\[0, 1\]"),
])
def test_explicit_grids_must_strictly_decrease_from_at_most_one(sigmas, match):
    message = rejected(sigma_grid="explicit", num_steps=3, sigmas=sigmas)
    assert "sigmas=" in message and "num_steps" not in message
    assert __import__("re").search(match, message)


def test_explicit_grid_defines_the_step_count():
    grid = BASE.override(sigma_grid="explicit", num_steps=2, sigmas=[1.0, 0.4]).sigma_grid_for()
    assert grid.sigmas.tolist() == pytest.approx([1.0, 0.4, 0.0])
    assert "define 2 steps but num_steps=3" in rejected(sigma_grid="explicit", num_steps=3, sigmas=[1.0, 0.4])


@pytest.mark.parametrize("field,bounds", [
    ("guidance_bounds", [math.nan, 10.0]), ("guidance_bounds", [1.0, math.inf]), ("guidance_bounds", [5.0, 1.0]),
    ("guidance_bounds", ["1", 10.0]), ("guidance_bounds", [1.0]), ("guidance_bounds", 3.0),
    ("guidance_bounds", [True, 10.0]), ("noise_level_bounds", [-math.inf, 1.0]), ("noise_level_bounds", [0.9, 0.1]),
    ("noise_level_bounds", [0.0, 2.0]),
])
def test_bounds_must_be_finite_and_ordered(field, bounds):
    assert f"{field}=" in rejected(**{field: bounds})


@pytest.mark.parametrize("field,value", [
    ("guidance_scale", math.nan), ("guidance_scale", True), ("guidance_scale", "6"), ("noise_level", math.inf),
    ("noise_level", 1.5), ("fps", True), ("fps", 0.0), ("fps", math.inf), ("flow_shift", 0.0), ("flow_shift", False),
])
def test_real_valued_fields(field, value):
    assert f"{field}=" in rejected(**{field: value})


@pytest.mark.parametrize("field", ["num_frames", "height", "width", "num_steps", "max_prompt_tokens"])
def test_booleans_do_not_pass_as_ints(field):
    for value in (True, False, 8.0, "8"):
        assert f"{field}={value!r} is invalid" in rejected(**{field: value})


@pytest.mark.parametrize("field,value", [
    ("kind", "euler"), ("kind", ("sde",)), ("action_mode", "pixels"), ("sigma_grid", "karras"),
    ("reward", "beauty"), ("reward", ("colorfulness",)), ("negative_prompt", None),
])
def test_unknown_choices(field, value):
    message = rejected(**{field: value})
    assert f"{field}={value!r} is invalid; allowed:" in message


def test_presets_import_neither_the_world_nor_the_rewards():
    code = ("import sys, cosmos3_gym.env.presets as p; p.load_preset('Cosmos3Rollout-v0'); "
            "print(sorted(m for m in sys.modules if m.startswith('cosmos3_gym')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "cosmos3_gym.env.presets" in out
    assert "cosmos3_gym.rollout.procedural_world" not in out and "cosmos3_gym.env.rewards" not in out
