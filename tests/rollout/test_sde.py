"""sde_step against an independent float64 reference of DESIGN section 4."""

import math

import numpy as np
import pytest
import torch

from cosmos3_gym.rollout.sde import sde_step


def reference(kind, x, v, sigma, sigma_next, a, sigma_max, eps):
    """float64 numpy transcription of the formulas, one sample at a time."""
    x, v, eps = (np.asarray(t, dtype=np.float64) for t in (x, v, eps))
    dt = sigma_next - sigma
    if kind == "sde":
        tilde = sigma_max if sigma == 1.0 else sigma
        std = a * math.sqrt(sigma / (1.0 - tilde))
        mean = x * (1 + std**2 * dt / (2 * sigma)) + v * (1 + std**2 * (1 - sigma) / (2 * sigma)) * dt
        scale = std * math.sqrt(-dt)
    else:
        x0, x1 = x - sigma * v, x + (1 - sigma) * v
        scale = sigma_next * math.sin(a * math.pi / 2)
        mean = (1 - sigma_next) * x0 + math.sqrt(sigma_next**2 - scale**2) * x1
    nxt = mean + scale * eps
    logp = -((nxt - mean) ** 2) / (2 * scale**2) - math.log(scale) - 0.5 * math.log(2 * math.pi)
    return nxt, mean, scale, logp.mean(), logp.sum()


@pytest.mark.parametrize("kind", ["sde", "cps"])
@pytest.mark.parametrize("sigma,sigma_next", [(1.0, 0.9), (0.7, 0.55), (0.3, 0.1)])
def test_matches_float64_reference(kind, sigma, sigma_next):
    g = torch.Generator().manual_seed(1)
    x, v, eps = (torch.randn(2, 3, 2, 4, 4, generator=g) for _ in range(3))
    levels = torch.tensor([0.7, 0.3])
    out = sde_step(v, x, sigma, sigma_next, kind=kind, noise_level=levels, sigma_max=0.9, noise=eps)
    for b in range(2):
        nxt, mean, scale, logp, logp_sum = reference(kind, x[b], v[b], sigma, sigma_next, float(levels[b]), 0.9, eps[b])
        np.testing.assert_allclose(out.next_sample[b].numpy(), nxt, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.mean[b].numpy(), mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(float(out.scale[b].flatten()[0]), scale, rtol=1e-6)
        assert float(out.log_prob[b]) == pytest.approx(logp, rel=1e-5, abs=1e-5)
        assert float(out.log_prob_sum[b]) == pytest.approx(logp_sum, rel=1e-5, abs=1e-3)


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_zero_noise_level_is_the_ode_mean(kind):
    g = torch.Generator().manual_seed(2)
    x, v = torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g)
    out = sde_step(v, x, 0.6, 0.4, kind=kind, noise_level=0.0)
    ode = x + v * (0.4 - 0.6)
    torch.testing.assert_close(out.mean, ode, rtol=0, atol=1e-6)
    assert torch.all(out.scale == 0)
    assert (out.log_prob == 0).all() and out.deterministic.all()  # a point mass: log-prob 0


def test_ode_is_euler_and_a_point_mass():
    x, v = torch.ones(2, 5), torch.full((2, 5), 2.0)
    out = sde_step(v, x, 0.5, 0.25, kind="ode")
    torch.testing.assert_close(out.next_sample, torch.full((2, 5), 0.5))
    # A deterministic step is reported as a point mass: log-prob 0, flagged, never NaN.
    assert (out.log_prob == 0).all() and (out.log_prob_sum == 0).all() and out.deterministic.all()


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_given_noise_is_the_residual(kind):
    g = torch.Generator().manual_seed(3)
    x, v, eps = (torch.randn(4, 16, generator=g) for _ in range(3))
    out = sde_step(v, x, 0.8, 0.6, kind=kind, noise=eps)
    torch.testing.assert_close(out.next_sample - out.mean, out.scale * eps, rtol=1e-5, atol=1e-6)


def test_replay_of_next_sample_gives_the_same_log_prob():
    g = torch.Generator().manual_seed(4)
    x, v = torch.randn(2, 32, generator=g), torch.randn(2, 32, generator=g)
    rollout = sde_step(v, x, 0.5, 0.4, generator=torch.Generator().manual_seed(0))
    replay = sde_step(v, x, 0.5, 0.4, next_sample=rollout.next_sample)
    assert torch.equal(rollout.log_prob, replay.log_prob)
    # A different sample is less likely under the same transition: log-probs are not constant.
    other = sde_step(v, x, 0.5, 0.4, next_sample=rollout.next_sample + 1.0)
    assert (other.log_prob < replay.log_prob).all()


def test_mask_restricts_the_reduction_to_noisy_elements():
    g = torch.Generator().manual_seed(5)
    x, v, eps = (torch.randn(1, 2, 6, generator=g) for _ in range(3))
    mask = torch.tensor([True, False]).view(1, 2, 1)
    full = sde_step(v, x, 0.5, 0.3, noise=eps)
    masked = sde_step(v, x, 0.5, 0.3, noise=eps, mask=mask)
    head = sde_step(v[:, :1], x[:, :1], 0.5, 0.3, noise=eps[:, :1])
    torch.testing.assert_close(masked.log_prob, head.log_prob)
    torch.testing.assert_close(masked.log_prob_sum, head.log_prob_sum)
    assert not torch.allclose(full.log_prob, masked.log_prob)


def test_bad_arguments_are_named():
    x = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="kind='euler'"):
        sde_step(x, x, 0.5, 0.4, kind="euler")
    with pytest.raises(ValueError, match="sigma_max"):
        sde_step(x, x, 1.0, 0.9)
    with pytest.raises(ValueError, match="noise shape"):
        sde_step(x, x, 0.5, 0.4, noise=torch.zeros(1, 3))
