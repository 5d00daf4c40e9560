"""Sigma grids: serving snapshot, flow_shift, explicit; a shift applies once."""

import numpy as np
import pytest
from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

from cosmos3_gym.rollout.schedule import explicit_grid, flow_shift_grid, serving_grid


def shifted(s, shift):
    return shift * s / (1 + (shift - 1) * s)


def test_serving_grid_of_unipc_flow_applies_flow_shift_once():
    scheduler = UniPCMultistepScheduler(use_flow_sigmas=True, flow_shift=3.0, prediction_type="flow_prediction")
    grid = serving_grid(scheduler, 5)
    expected = shifted(np.linspace(1, 1 / 1000, 6)[:-1], 3.0)
    np.testing.assert_allclose(grid.sigmas.numpy()[:-1], expected, rtol=1e-6)
    assert grid.sigmas[0] == 1.0 and grid.sigmas[-1] == 0.0
    # UniPC serves integer timesteps; the snapshot keeps them.
    np.testing.assert_array_equal(grid.timesteps.numpy()[:-1], np.floor(expected * 1000).clip(max=999.0))


def test_serving_grid_native_flow_schedule():
    scheduler = UniPCMultistepScheduler(use_flow_sigmas=True, flow_shift=2.0, prediction_type="flow_prediction")
    grid = serving_grid(scheduler, 4, use_native_flow_schedule=True)
    expected = shifted(np.linspace(1 - 1 / 1000, 0, 5)[:-1], 2.0)
    np.testing.assert_allclose(grid.sigmas.numpy()[:-1], expected, rtol=1e-6)


def test_serving_grid_karras():
    scheduler = UniPCMultistepScheduler(use_flow_sigmas=True, use_karras_sigmas=True, prediction_type="flow_prediction")
    grid = serving_grid(scheduler, 6)
    reference = UniPCMultistepScheduler.from_config(scheduler.config)
    reference.set_timesteps(6)
    np.testing.assert_allclose(grid.sigmas.numpy(), reference.sigmas.numpy(), rtol=1e-6)
    assert not np.allclose(grid.sigmas.numpy()[:-1], np.linspace(1, 0, 7)[:-1], atol=1e-3)


def test_serving_grid_does_not_touch_the_scheduler():
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    before = scheduler.timesteps.clone()
    grid = serving_grid(scheduler, 3)
    assert grid.num_steps == 3 and len(before) == 1000
    assert scheduler.timesteps.equal(before)


def test_flow_shift_grid_closed_form():
    grid = flow_shift_grid(4, flow_shift=3.0)
    np.testing.assert_allclose(grid.sigmas.numpy(), shifted(np.linspace(1, 0, 5), 3.0), rtol=1e-6)
    np.testing.assert_allclose(grid.timesteps.numpy(), grid.sigmas.numpy() * 1000, rtol=1e-6)


def test_explicit_sigmas_are_not_shifted():
    grid = explicit_grid([1.0, 0.5, 0.2])
    np.testing.assert_array_equal(grid.sigmas.numpy(), np.array([1.0, 0.5, 0.2, 0.0], dtype=np.float32))
    assert grid.num_steps == 3


@pytest.mark.parametrize("sigmas,match", [([1.0, 0.5, 0.7, 0.0], "strictly decreasing"), ([0.0], "at least 2"),
                                          ([1.5, 0.5, 0.0], r"\[0, 1\]")])
def test_bad_grids_are_rejected(sigmas, match):
    with pytest.raises(ValueError, match=match):
        explicit_grid(sigmas)


def test_zero_steps_rejected():
    with pytest.raises(ValueError, match="num_steps must be >= 1"):
        flow_shift_grid(0)
