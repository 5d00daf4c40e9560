"""sde_step (DESIGN section 4) against values computed independently of its formulas.

Nothing here re-types sde_step's expressions. The checks are:

* the Gaussian log-density, computed in float64 by ``torch.distributions.Normal`` from the
  returned mean, scale and sample, summed and averaged over the scored elements;
* the ``sde`` mean by another route than its code: Flow-GRPO's reverse-time SDE written with
  the score, ``mean = x + (v - g^2/2 * score) dt`` with ``x0_hat = x - sigma v``,
  ``eps_hat = (x - (1 - sigma) x0_hat) / sigma`` and ``score = -eps_hat / sigma``;
* the ``cps`` mean decomposed back onto ``x0_hat`` and ``x1_hat`` by least squares (its
  coefficients must be ``1 - sigma'`` and ``sqrt(sigma'^2 - s^2)``), and its special cases
  ``a = 0`` (the ODE step ``x + v dt``) and ``a = 1`` (``s = sigma'``, mean ``(1 - sigma') x0_hat``);
* statistics over many draws: the sample mean and variance match the reference mean and
  scale^2; with the exact velocity of a point-mass data distribution a step maps the marginal at
  sigma onto the marginal at sigma' (exactly for ``cps``, to O(dt^2) in variance for ``sde``);
* the conventions: ``noise_level=0`` and ``ode`` are point masses (log-prob 0, deterministic),
  ``log_prob`` is ``log_prob_sum`` over the number of noisy elements.
"""

import math

import numpy as np
import pytest
import torch
from torch.distributions import Normal

from cosmos3_gym.rollout.sde import sde_step

SIGMA_MAX = 0.9


def float64(*tensors):
    return tuple(t.detach().to(torch.float64) for t in tensors)


def normal_log_density(out, mask=None):
    """float64 ``(sum, mean)`` over the scored elements of log N(next_sample; mean, scale^2), per batch row."""
    nxt, mean, scale = float64(out.next_sample, out.mean, out.scale)
    density = Normal(mean, scale).log_prob(nxt)
    weight = torch.ones_like(density) if mask is None else mask.to(torch.float64).expand_as(density)
    dims = tuple(range(1, density.ndim))
    total = (density * weight).sum(dims)
    return total, total / weight.sum(dims)


def flow_grpo_sde(x, v, sigma, sigma_next, a, sigma_max):
    """float64 mean and scale of Flow-GRPO's SDE step, through the x0-prediction and the score."""
    x, v = float64(x, v)
    dt = sigma_next - sigma
    x0_hat = x - sigma * v
    eps_hat = (x - (1.0 - sigma) * x0_hat) / sigma
    score = -eps_hat / sigma  # grad log p_sigma(x) of x_sigma = (1 - sigma) x0 + sigma eps
    g = a * math.sqrt(sigma / (1.0 - (sigma_max if sigma == 1.0 else sigma)))  # sigma_t = a sqrt(t / (1 - t))
    return x + (v - 0.5 * g**2 * score) * dt, g * math.sqrt(-dt)


def cps_coefficients(x, v, sigma, mean):
    """``(alpha, beta, residual)`` of the float64 least-squares fit ``mean = alpha x0_hat + beta x1_hat`` (one row)."""
    x, v, mean = float64(x.flatten(), v.flatten(), mean.flatten())
    basis = torch.stack([x - sigma * v, x + (1.0 - sigma) * v], dim=1)
    solution = torch.linalg.lstsq(basis, mean[:, None]).solution[:, 0]
    return float(solution[0]), float(solution[1]), float((basis @ solution - mean).abs().max())


@pytest.mark.parametrize("kind", ["sde", "cps"])
@pytest.mark.parametrize("sigma,sigma_next", [(1.0, 0.9), (0.7, 0.55), (0.3, 0.1)])
def test_log_prob_is_the_float64_gaussian_density_of_the_returned_sample(kind, sigma, sigma_next):
    g = torch.Generator().manual_seed(1)
    x, v, eps = (torch.randn(2, 3, 2, 4, 4, generator=g) for _ in range(3))
    levels = torch.tensor([0.7, 0.3])
    out = sde_step(v, x, sigma, sigma_next, kind=kind, noise_level=levels, sigma_max=SIGMA_MAX, noise=eps)
    total, mean = normal_log_density(out)
    for b in range(2):
        assert float(out.log_prob[b]) == pytest.approx(float(mean[b]), rel=1e-5, abs=1e-5)
        assert float(out.log_prob_sum[b]) == pytest.approx(float(total[b]), rel=1e-5, abs=1e-3)
    assert not out.deterministic.any()
    assert out.num_scored.tolist() == [x[0].numel()] * 2


@pytest.mark.parametrize("sigma,sigma_next", [(1.0, 0.9), (0.7, 0.55), (0.3, 0.1)])
def test_sde_mean_and_scale_follow_flow_grpo_written_with_the_score(sigma, sigma_next):
    g = torch.Generator().manual_seed(1)
    x, v, eps = (torch.randn(2, 3, 2, 4, 4, generator=g) for _ in range(3))
    levels = torch.tensor([0.7, 0.3])
    out = sde_step(v, x, sigma, sigma_next, kind="sde", noise_level=levels, sigma_max=SIGMA_MAX, noise=eps)
    for b in range(2):
        mean, scale = flow_grpo_sde(x[b], v[b], sigma, sigma_next, float(levels[b]), SIGMA_MAX)
        np.testing.assert_allclose(out.mean[b].numpy(), mean.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.scale[b].numpy(), np.full(x[b].shape, scale), rtol=1e-6)
        np.testing.assert_allclose(out.next_sample[b].numpy(), (mean + scale * eps[b].double()).numpy(),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sigma,sigma_next", [(1.0, 0.9), (0.7, 0.55), (0.3, 0.1)])
@pytest.mark.parametrize("level", [0.0, 0.3, 0.7, 1.0])
def test_cps_mean_decomposes_onto_the_clean_and_noise_predictions(sigma, sigma_next, level):
    """Coefficients preserved: ``mean = (1 - sigma') x0_hat + beta x1_hat`` with ``beta^2 + s^2 = sigma'^2``."""
    g = torch.Generator().manual_seed(6)
    x, v = torch.randn(1, 2, 3, 8, generator=g), torch.randn(1, 2, 3, 8, generator=g)
    out = sde_step(v, x, sigma, sigma_next, kind="cps", noise_level=level)
    alpha, beta, residual = cps_coefficients(x, v, sigma, out.mean)
    scale = float(out.scale.flatten()[0])
    assert residual < 1e-5
    assert alpha == pytest.approx(1.0 - sigma_next, abs=1e-5)
    assert scale == pytest.approx(sigma_next * math.sin(level * math.pi / 2), rel=1e-6, abs=1e-7)
    assert beta**2 + scale**2 == pytest.approx(sigma_next**2, abs=1e-5)


def test_cps_at_full_noise_level_keeps_only_the_clean_prediction():
    g = torch.Generator().manual_seed(7)
    x, v = torch.randn(2, 16, generator=g), torch.randn(2, 16, generator=g)
    out = sde_step(v, x, 0.6, 0.35, kind="cps", noise_level=1.0)
    assert torch.all(out.scale == torch.tensor(0.35))  # s = sigma'
    torch.testing.assert_close(out.mean, (1 - 0.35) * (x - 0.6 * v), rtol=0, atol=1e-6)


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
    assert torch.all(out.scale == 0)


@pytest.mark.parametrize("kind,sigma,sigma_next", [("sde", 1.0, 0.9), ("sde", 0.5, 0.3), ("cps", 0.5, 0.3)])
def test_many_draws_have_the_reference_mean_and_variance(kind, sigma, sigma_next):
    """Fixed x and v, 8192 draws: the sample mean and variance of each element match the
    independently computed mean and scale^2 (5 standard errors)."""
    draws, level = 8192, 0.7
    g = torch.Generator().manual_seed(8)
    x, v = torch.randn(1, 16, generator=g).expand(draws, 16), torch.randn(1, 16, generator=g).expand(draws, 16)
    out = sde_step(v, x, sigma, sigma_next, kind=kind, noise_level=level, sigma_max=SIGMA_MAX,
                   generator=torch.Generator().manual_seed(9))
    if kind == "sde":
        mean, scale = flow_grpo_sde(x[0], v[0], sigma, sigma_next, level, SIGMA_MAX)
    else:
        x0_hat, x1_hat = float64(x[0] - sigma * v[0], x[0] + (1 - sigma) * v[0])
        scale = sigma_next * math.sin(level * math.pi / 2)
        mean = (1 - sigma_next) * x0_hat + math.sqrt(sigma_next**2 - scale**2) * x1_hat
    samples = out.next_sample.double()
    assert (samples.mean(0) - mean).abs().max() < 5 * scale / math.sqrt(draws)
    assert (samples.var(0) / scale**2 - 1).abs().max() < 5 * math.sqrt(2 / draws)


@pytest.mark.parametrize("kind,sigma,sigma_next,variance_tol", [("cps", 0.7, 0.4, 0.02), ("sde", 0.5, 0.48, 0.02)])
def test_a_step_with_the_exact_velocity_carries_the_marginal_to_the_next_sigma(kind, sigma, sigma_next,
                                                                               variance_tol):
    """Data at one point ``c``: ``x_sigma = (1 - sigma) c + sigma z`` and the exact velocity ``z - c``.
    After a step the samples are ``(1 - sigma') c + sigma' z'``: mean ``(1 - sigma') c`` exactly
    and variance ``sigma'^2`` (exactly for cps; the sde's Euler-Maruyama step is off by O(dt^2))."""
    draws = 8192
    g = torch.Generator().manual_seed(10)
    c = torch.randn(1, 16, generator=g)
    z = torch.randn(draws, 16, generator=g)
    x, v = (1 - sigma) * c + sigma * z, z - c
    out = sde_step(v, x, sigma, sigma_next, kind=kind, noise_level=0.7, generator=torch.Generator().manual_seed(11))
    samples = out.next_sample.double()
    assert ((samples.mean(0) - (1 - sigma_next) * c.double()).abs() < 5 * sigma_next / math.sqrt(draws)).all()
    assert float(samples.var(0).mean()) == pytest.approx(sigma_next**2, rel=variance_tol)


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
    total, _ = normal_log_density(other)  # the replayed sample's density, not the drawn one's
    torch.testing.assert_close(other.log_prob_sum.double(), total, rtol=1e-5, atol=1e-3)


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
    assert torch.equal(masked.next_sample[:, 1], x[:, 1])  # clean elements are copied unchanged
    total, mean = normal_log_density(masked, mask)
    torch.testing.assert_close(masked.log_prob_sum.double(), total, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(masked.log_prob.double(), mean, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_the_mean_convention_divides_the_sum_by_the_number_of_noisy_elements(kind):
    g = torch.Generator().manual_seed(12)
    x, v = torch.randn(3, 4, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    mask = torch.rand(3, 4, 5, generator=g) > 0.4
    for m, counts in ((None, [20.0] * 3), (mask, mask.sum((1, 2)).float().tolist())):
        out = sde_step(v, x, 0.7, 0.5, kind=kind, mask=m, generator=torch.Generator().manual_seed(0))
        assert out.num_scored.tolist() == counts
        torch.testing.assert_close(out.log_prob, out.log_prob_sum / torch.tensor(counts), rtol=1e-6, atol=0.0)


def test_bad_arguments_are_named():
    x = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="kind='euler'"):
        sde_step(x, x, 0.5, 0.4, kind="euler")
    with pytest.raises(ValueError, match="sigma_max"):
        sde_step(x, x, 1.0, 0.9)
    with pytest.raises(ValueError, match="noise shape"):
        sde_step(x, x, 0.5, 0.4, noise=torch.zeros(1, 3))
