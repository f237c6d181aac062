"""Bayes post-processing at the aggregator (diagnosis.posterior).

The implementation evaluates the posterior on a grid. It is checked against
(a) closed forms (prior only, one Laplace report, a point-mass report, no noise, Gaussian → truncated
normal, Duchi → a mixture of Beta moments), (b) an independent numerical integration with
``scipy.integrate.quad`` whose likelihoods are written from ``scipy.stats`` and the privacy
module's own randomizers, and (c) Monte-Carlo rejection sampling through the *real* mechanisms
for discrete reports. Then the utility claim (posterior mean beats the mean of clipped reports),
credible-interval coverage under a correctly specified model, range and symmetry.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from diagnosis import CalibrationTag, NoiseLevel
from diagnosis.aggregation import Aggregation
from diagnosis.posterior import (
    UNIFORM_PRIOR,
    BetaPrior,
    DegeneratePosteriorError,
    PosteriorAggregation,
    PosteriorAggregator,
    ReportModel,
    fit_beta_prior,
    fit_concept_priors,
    fit_entity_error_sd,
    posterior_aggregate,
    posterior_grid,
    posterior_summaries,
    posterior_summary,
)
from privacy import (
    AnalyticGaussianMechanism,
    DuchiMechanism,
    HybridMechanism,
    LaplaceMechanism,
    Mechanism,
    NoNoise,
    PiecewiseMechanism,
    SecureLaplaceMechanism,
    mechanism_from_description,
)
from privacy.bounded import DuchiRandomizer, PiecewiseRandomizer

LAPLACE = LaplaceMechanism(epsilon=1.0, sensitivity=0.4)  # noise scale b = Δ/ε = 0.4


def _laplace(b: float, tau: float = 0.0) -> ReportModel:
    return ReportModel(LaplaceMechanism(epsilon=1.0, sensitivity=b), tau)  # noise scale b


# ----------------------------------------------------------------------------------------------
# Independent reference: posterior moments/quantiles by scipy.integrate.quad
# ----------------------------------------------------------------------------------------------


class QuadPosterior:
    """Posterior ∝ prior_pdf(x)·lik(x) on [0, 1] by adaptive quadrature (breakpoints given).

    ``gauss_nodes``: integrate with a fixed Gauss–Legendre rule instead (for smooth but expensive
    likelihoods, themselves computed by quad); quantiles are then not available.
    """

    def __init__(self, prior: BetaPrior, lik, points: list[float] | None = None, gauss_nodes: int = 0) -> None:
        self.f = lambda x: stats.beta.pdf(x, prior.a, prior.b) * lik(x)
        self.points = sorted({p for p in (points or []) if 0 < p < 1})
        if gauss_nodes:
            nodes, weights = np.polynomial.legendre.leggauss(gauss_nodes)
            xs, ws = (nodes + 1) / 2, weights / 2
            cache = {float(x): self.f(x) for x in xs}  # the likelihood is expensive: evaluate once per node
            self.f = lambda x: cache[float(x)]
            self._int = lambda g, lo, hi: float(sum(w * g(x) for x, w in zip(xs, ws)))
        self.z = self._int(lambda x: self.f(x), 0.0, 1.0)

    def _int(self, g, lo: float, hi: float) -> float:
        pts = [p for p in self.points if lo < p < hi] or None
        return integrate.quad(g, lo, hi, points=pts, limit=400, epsabs=1e-13, epsrel=1e-11)[0]

    @property
    def mean(self) -> float:
        return self._int(lambda x: x * self.f(x), 0.0, 1.0) / self.z

    @property
    def sd(self) -> float:
        m = self.mean
        return math.sqrt(self._int(lambda x: (x - m) ** 2 * self.f(x), 0.0, 1.0) / self.z)

    def quantile(self, q: float) -> float:
        return optimize.brentq(lambda y: self._int(self.f, 0.0, y) / self.z - q, 1e-12, 1 - 1e-12, xtol=1e-10)


def _assert_matches(summary, ref: QuadPosterior, *, tol: float, quantiles: bool = True) -> None:
    assert summary.mean == pytest.approx(ref.mean, abs=tol)
    assert summary.sd == pytest.approx(ref.sd, abs=tol)
    if quantiles:
        assert summary.median == pytest.approx(ref.quantile(0.5), abs=tol)
        assert summary.lower == pytest.approx(ref.quantile(0.05), abs=tol)
        assert summary.upper == pytest.approx(ref.quantile(0.95), abs=tol)


def _convolve_error(x: float, tau: float, g, breaks: list[float]) -> float:
    """E_e[g(clip(x + e, 0, 1))], e ~ N(0, τ²): atoms at the ends plus a quad over the interior."""
    inside = integrate.quad(
        lambda u: stats.norm.pdf(u, x, tau) * g(u),
        0.0,
        1.0,
        points=[p for p in breaks if 0 < p < 1] or None,
        limit=200,
        epsabs=1e-12,
    )[0]
    return stats.norm.cdf(0.0, x, tau) * g(0.0) + stats.norm.sf(1.0, x, tau) * g(1.0) + inside


# ----------------------------------------------------------------------------------------------
# Closed forms
# ----------------------------------------------------------------------------------------------


def test_without_reports_the_posterior_is_the_prior() -> None:
    prior = BetaPrior(2.0, 5.0)
    s = posterior_summary([], prior)
    assert s.mean == pytest.approx(2 / 7, abs=1e-6)
    assert s.sd == pytest.approx(stats.beta.std(2, 5), abs=1e-5)
    for got, q in ((s.median, 0.5), (s.lower, 0.05), (s.upper, 0.95)):
        assert got == pytest.approx(stats.beta.ppf(q, 2, 5), abs=1e-5)


@pytest.mark.parametrize(("r", "b"), [(0.3, 0.5), (0.8, 2.0), (0.5, 0.1)])
def test_one_interior_laplace_report_under_a_uniform_prior(r: float, b: float) -> None:
    # Posterior ∝ exp(−|r − x|/b) on [0, 1].
    s = posterior_summary([(r, _laplace(b))])
    z = b * (2 - math.exp(-r / b) - math.exp(-(1 - r) / b))
    first = 2 * b * r + b * b * math.exp(-r / b) - (b + b * b) * math.exp(-(1 - r) / b)
    assert s.mean == pytest.approx(first / z, abs=1e-6)

    def cdf(y: float) -> float:
        if y <= r:
            return b * (math.exp((y - r) / b) - math.exp(-r / b)) / z
        return (b * (1 - math.exp(-r / b)) + b * (1 - math.exp(-(y - r) / b))) / z

    assert cdf(s.lower) == pytest.approx(0.05, abs=2e-5)
    assert cdf(s.median) == pytest.approx(0.5, abs=2e-5)
    assert cdf(s.upper) == pytest.approx(0.95, abs=2e-5)


@pytest.mark.parametrize("b", [0.25, 1.0, 2.0])
def test_a_report_clipped_to_zero_is_a_point_mass_with_a_truncated_exponential_posterior(b: float) -> None:
    # P(r = 0 | x) = ½e^{−x/b}: the posterior is Exp(1/b) truncated to [0, 1].
    s = posterior_summary([(0.0, _laplace(b))])
    assert s.mean == pytest.approx(b - 1 / math.expm1(1 / b), abs=1e-6)

    def ppf(q: float) -> float:
        return -b * math.log1p(-q * -math.expm1(-1 / b))

    assert s.median == pytest.approx(ppf(0.5), abs=1e-5)
    assert (s.lower, s.upper) == pytest.approx((ppf(0.05), ppf(0.95)), abs=1e-5)
    # And by symmetry a report clipped to 1 mirrors it.
    t = posterior_summary([(1.0, _laplace(b))])
    assert t.mean == pytest.approx(1 - s.mean, abs=1e-9)


def test_noiseless_reports_pin_the_posterior_to_the_report() -> None:
    model = ReportModel(NoNoise())
    assert model.noiseless
    s = posterior_summary([(0.37, model), (0.37, model), (0.9, _laplace(0.5))], BetaPrior(2, 2))
    assert (s.mean, s.median, s.lower, s.upper, s.sd) == (0.37, 0.37, 0.37, 0.37, 0.0)
    grid, density = posterior_grid([(0.37, model)])
    assert density[np.argmax(density)] * (grid[1] - grid[0]) == pytest.approx(1.0)
    assert abs(grid[np.argmax(density)] - 0.37) <= (grid[1] - grid[0]) / 2
    with pytest.raises(DegeneratePosteriorError, match="disagree"):
        posterior_summary([(0.37, model), (0.38, model)])


@pytest.mark.parametrize(
    ("mechanism", "tau"),
    [
        (NoNoise(), 0.08),
        (AnalyticGaussianMechanism.for_vector(epsilon=6.0, delta=1e-5, dimension=1), 0.0),
        (AnalyticGaussianMechanism.for_vector(epsilon=6.0, delta=1e-5, dimension=1), 0.1),
    ],
)
def test_gaussian_interior_report_gives_a_truncated_normal(mechanism: Mechanism, tau: float) -> None:
    model = ReportModel(mechanism, tau)
    sd = math.hypot(float(mechanism.describe()["noise_scale"]), tau)  # type: ignore[arg-type]
    r = 0.83
    s = posterior_summary([(r, model)])
    ref = stats.truncnorm((0 - r) / sd, (1 - r) / sd, loc=r, scale=sd)
    assert s.mean == pytest.approx(ref.mean(), abs=1e-5)
    assert s.sd == pytest.approx(ref.std(), abs=1e-5)
    assert (s.lower, s.median, s.upper) == pytest.approx((ref.ppf(0.05), ref.ppf(0.5), ref.ppf(0.95)), abs=1e-4)


def test_a_sharp_report_refines_the_grid() -> None:
    model = ReportModel(NoNoise(), 0.002)
    grid, _ = posterior_grid([(0.4, model)])
    assert len(grid) >= 40 / 0.002
    s = posterior_summary([(0.4, model)])
    assert s.mean == pytest.approx(0.4, abs=1e-7)
    assert s.sd == pytest.approx(0.002, rel=1e-3)


@pytest.mark.parametrize("plus", [True, False])
def test_duchi_report_gives_a_mixture_of_beta_moments(plus: bool) -> None:
    mech = DuchiMechanism(epsilon=1.2, dimension=2)
    c = DuchiRandomizer(epsilon=0.6).bound
    r = (1 + c) / 2 if plus else (1 - c) / 2
    a, b = 3.0, 2.0
    s = posterior_summary([(r, ReportModel(mech))], BetaPrior(a, b))
    # P(+ | x) = (C − 1)/(2C) + x/C; P(− | x) = (C + 1)/(2C) − x/C.
    c0, c1 = ((c - 1) / (2 * c), 1 / c) if plus else ((c + 1) / (2 * c), -1 / c)
    m1, m2 = a / (a + b), a * (a + 1) / ((a + b) * (a + b + 1))
    assert s.mean == pytest.approx((c0 * m1 + c1 * m2) / (c0 + c1 * m1), abs=1e-6)


# ----------------------------------------------------------------------------------------------
# Against an independent numerical integration (scipy.integrate.quad)
# ----------------------------------------------------------------------------------------------

PRIOR = BetaPrior(2.0, 3.0)


def test_laplace_with_point_masses_matches_quad() -> None:
    b = LaplaceMechanism(epsilon=2.0, sensitivity=1.0).scale  # 0.5
    model = ReportModel(LaplaceMechanism(epsilon=2.0, sensitivity=1.0))
    reports = [0.0, 0.62, 1.0, 0.15]

    def lik(x: float) -> float:
        return (
            stats.laplace.cdf(0.0, x, b)
            * stats.laplace.pdf(0.62, x, b)
            * stats.laplace.sf(1.0, x, b)
            * stats.laplace.pdf(0.15, x, b)
        )

    ref = QuadPosterior(PRIOR, lik, points=[0.62, 0.15])
    _assert_matches(posterior_summary([(r, model) for r in reports], PRIOR), ref, tol=2e-5)


def test_laplace_with_entity_error_matches_quad_over_the_error() -> None:
    b, tau = 0.5, 0.12
    model = _laplace(b, tau)
    x_grid = np.linspace(0.0, 1.0, 7)

    def over_error(g, x: float) -> float:
        def f(e: float) -> float:
            return stats.norm.pdf(e, 0, tau) * g(x + e)

        return integrate.quad(f, -1.5, 1.5, points=[0.3 - x], limit=200, epsabs=1e-13, epsrel=1e-11)[0]

    for r, g in (
        (0.0, lambda u: stats.laplace.cdf(0.0, u, b)),
        (0.3, lambda u: stats.laplace.pdf(0.3, u, b)),
        (1.0, lambda u: stats.laplace.sf(1.0, u, b)),
    ):
        got = np.exp(model.log_likelihood([r], x_grid)[0])
        assert got == pytest.approx([over_error(g, x) for x in x_grid], rel=1e-8)
    # And the posterior (three reports) against quad with the convolved likelihood by quad.
    reports = [0.0, 0.3, 1.0]

    def lik(x: float) -> float:
        return float(np.exp(model.log_likelihood(reports, [x]).sum()))

    ref = QuadPosterior(PRIOR, lik, points=[0.3])
    _assert_matches(posterior_summary([(r, model) for r in reports], PRIOR), ref, tol=2e-5, quantiles=False)


def test_gaussian_mechanism_matches_quad() -> None:
    mech = AnalyticGaussianMechanism.for_vector(epsilon=4.0, delta=1e-5, dimension=1)
    sigma = mech.sigma
    model = ReportModel(mech)
    reports = [0.0, 0.71, 0.44]

    def lik(x: float) -> float:
        return stats.norm.cdf(0.0, x, sigma) * stats.norm.pdf(0.71, x, sigma) * stats.norm.pdf(0.44, x, sigma)

    ref = QuadPosterior(PRIOR, lik)
    _assert_matches(posterior_summary([(r, model) for r in reports], PRIOR), ref, tol=2e-5)


@pytest.mark.parametrize("tau", [0.0, 0.15])
def test_duchi_matches_quad(tau: float) -> None:
    mech = DuchiMechanism(epsilon=2.0, dimension=1)
    rand = DuchiRandomizer(epsilon=2.0)
    c = rand.bound
    plus, minus = (1 + c) / 2, (1 - c) / 2
    reports = [plus, plus, minus]
    model = ReportModel(mech, tau)

    def p_plus(x: float) -> float:
        if tau == 0:
            return float(rand.probability_positive(2 * x - 1))
        return _convolve_error(x, tau, lambda u: float(rand.probability_positive(2 * u - 1)), [])

    ref = QuadPosterior(PRIOR, lambda x: p_plus(x) ** 2 * (1 - p_plus(x)))
    _assert_matches(posterior_summary([(r, model) for r in reports], PRIOR), ref, tol=2e-5, quantiles=tau == 0)


def _pm_density(rand: PiecewiseRandomizer, v: float, u: float) -> float:
    """PM output density at v (t scale) given clean answer u, from the randomizer's interval and p_center."""
    c = rand.bound
    left, right = rand.interval(2 * u - 1)
    inside = float(left) <= v <= float(right)
    return rand.p_center / (c - 1) if inside else (1 - rand.p_center) / (c + 1)


def _pm_breaks(rand: PiecewiseRandomizer, v: float) -> list[float]:
    """The u where v crosses l(t) or r(t): l = (C+1)u − C, r = (C+1)u − 1."""
    c = rand.bound
    return [(v + c) / (c + 1), (v + 1) / (c + 1)]


def test_piecewise_matches_quad_without_entity_error() -> None:
    mech = PiecewiseMechanism(epsilon=3.0, dimension=1)
    rand = PiecewiseRandomizer(epsilon=3.0)
    model = ReportModel(mech)
    reports = [0.55, 0.9, -0.2]
    vs = [2 * r - 1 for r in reports]

    def lik(x: float) -> float:
        return math.prod(2 * _pm_density(rand, v, x) for v in vs)

    points = [p for v in vs for p in _pm_breaks(rand, v)]
    ref = QuadPosterior(PRIOR, lik, points=points)
    # The likelihood jumps (τ = 0): the grid's error is O(h) there.
    _assert_matches(posterior_summary([(r, model) for r in reports], PRIOR, grid_size=4001), ref, tol=3e-4)


def test_piecewise_with_entity_error_and_clipped_output_matches_quad() -> None:
    tau = 0.1
    mech = PiecewiseMechanism(epsilon=3.0, dimension=1, clip_output=True)
    rand = PiecewiseRandomizer(epsilon=3.0)
    c = rand.bound
    model = ReportModel(mech, tau)
    reports = [0.0, 0.35, 1.0]

    p_high, p_low = rand.p_center / (c - 1), (1 - rand.p_center) / (c + 1)

    def tail_mass(u: float, lo: float, hi: float) -> float:  # P(lo ≤ v ≤ hi | u): p_low everywhere, p_high on [l, r]
        left, right = (float(e) for e in rand.interval(2 * u - 1))
        overlap = max(0.0, min(right, hi) - max(left, lo))
        return p_low * (hi - lo) + (p_high - p_low) * overlap

    def lik(x: float) -> float:
        low = _convolve_error(x, tau, lambda u: tail_mass(u, -c, -1.0), [])
        mid = _convolve_error(x, tau, lambda u: 2 * _pm_density(rand, 2 * 0.35 - 1, u), _pm_breaks(rand, -0.3))
        high = _convolve_error(x, tau, lambda u: tail_mass(u, 1.0, c), [])
        return low * mid * high

    xs = np.linspace(0.0, 1.0, 6)
    got = np.exp(model.log_likelihood(reports, xs).sum(axis=0))
    assert got == pytest.approx([lik(x) for x in xs], rel=1e-6)
    ref = QuadPosterior(PRIOR, lik, gauss_nodes=60)
    _assert_matches(posterior_summary([(r, model) for r in reports], PRIOR), ref, tol=5e-5, quantiles=False)


def test_hybrid_mixes_a_duchi_point_mass_and_a_piecewise_density() -> None:
    mech = HybridMechanism(epsilon=2.0, dimension=1)
    rand = mech.randomizer
    alpha = rand.alpha
    assert 0 < alpha < 1
    duchi_plus = (1 + rand.duchi.bound) / 2
    model = ReportModel(mech)
    reports = [duchi_plus, 0.3]

    def lik(x: float) -> float:
        pd = (1 - alpha) * float(rand.duchi.probability_positive(2 * x - 1))
        pm = alpha * 2 * _pm_density(rand.piecewise, 2 * 0.3 - 1, x)
        return pd * pm

    ref = QuadPosterior(PRIOR, lik, points=_pm_breaks(rand.piecewise, -0.4))
    _assert_matches(posterior_summary([(r, model) for r in reports], PRIOR, grid_size=4001), ref, tol=3e-4)


# ----------------------------------------------------------------------------------------------
# Monte-Carlo rejection through the real mechanisms (discrete reports can be matched exactly)
# ----------------------------------------------------------------------------------------------


def _rejection_check(mechanisms, observed: list[float], tau: float, prior: BetaPrior, seed: int, n: int = 200_000):
    rng = np.random.default_rng(seed)
    x = rng.beta(prior.a, prior.b, size=n)
    keep = np.ones(n, dtype=bool)
    keys = [f"s{i}" for i in range(n)]
    for mech, r in zip(mechanisms, observed):
        clean = np.clip(x + rng.normal(0.0, tau, n), 0.0, 1.0) if tau > 0 else x
        out = mech.privatize(dict(zip(keys, clean.tolist())), rng)
        keep &= np.array([out[k] for k in keys]) == r
    accepted = x[keep]
    assert accepted.size > 2000
    s = posterior_summary([(r, ReportModel(m, tau)) for m, r in zip(mechanisms, observed)], prior)
    se = accepted.std() / math.sqrt(accepted.size)
    assert abs(s.mean - accepted.mean()) < 4 * se + 1e-4
    assert abs(s.median - np.median(accepted)) < 0.02
    assert abs(s.sd - accepted.std()) < 0.01


def test_duchi_with_clipped_entity_error_matches_rejection_sampling() -> None:
    # ε_c = 0.8 for each of 200,000 coordinates released in one call (dimension = n).
    n = 200_000
    mech = DuchiMechanism(epsilon=0.8 * n, dimension=n)
    c = DuchiRandomizer(epsilon=0.8).bound
    assert mech.describe()["epsilon_per_coordinate"] == 0.8
    plus, minus = (1 + c) / 2, (1 - c) / 2
    _rejection_check([mech, mech, mech], [plus, minus, plus], 0.2, BetaPrior(2, 3), seed=11, n=n)


def test_secure_laplace_on_its_grid_matches_rejection_sampling() -> None:
    # λ = Δ/ε = 0.2 → Λ = 0.25: releases are 0, ¼, ½, ¾ or 1.
    n = 200_000
    mech = SecureLaplaceMechanism(epsilon=n / 0.2, sensitivity=float(n), randomness="generator")
    assert mech.grid == 0.25
    _rejection_check([mech, mech], [0.25, 0.0], 0.0, BetaPrior(1.5, 1.5), seed=12, n=n)
    # Λ ≥ 1: only 0, ½, 1 are released.
    coarse = SecureLaplaceMechanism(epsilon=n / 0.7, sensitivity=float(n), randomness="generator")
    assert coarse.grid == 1.0
    _rejection_check([coarse, coarse, coarse], [0.5, 1.0, 0.0], 0.0, UNIFORM_PRIOR, seed=13, n=n)


def test_laplace_point_masses_with_entity_error_match_rejection_sampling() -> None:
    # The Laplace mechanism does not clamp its input: the model's clean answer x + e is exact.
    rng_mech = LaplaceMechanism(epsilon=1.0, sensitivity=1.0)
    n = 200_000
    rng = np.random.default_rng(14)
    tau, prior = 0.1, BetaPrior(2.0, 2.0)
    x = rng.beta(prior.a, prior.b, size=n)
    keep = np.ones(n, dtype=bool)
    keys = [f"s{i}" for i in range(n)]
    observed = [0.0, 1.0, 1.0]
    for r in observed:
        out = rng_mech.privatize(dict(zip(keys, (x + rng.normal(0, tau, n)).tolist())), rng)
        keep &= np.array([out[k] for k in keys]) == r
    accepted = x[keep]
    model = ReportModel(rng_mech, tau)
    s = posterior_summary([(r, model) for r in observed], prior)
    assert abs(s.mean - accepted.mean()) < 4 * accepted.std() / math.sqrt(accepted.size)


# ----------------------------------------------------------------------------------------------
# Utility, coverage, range, symmetry
# ----------------------------------------------------------------------------------------------


def _simulate_laplace(delta: float, epsilon: float, *, seed: int, students: int = 2000, concepts: int = 4):
    """Truth ~ U(0, 1); 3 entities answer truth + N(0, 0.05²) clipped; the paper's Laplace; clipped reports."""
    rng = np.random.default_rng(seed)
    keys = [f"c{k}" for k in range(concepts)]
    entities = 3
    # Calibration split: fit the prior on truth and τ on clean answers.
    cal_truth = rng.uniform(size=500 * concepts)
    cal_clean = np.clip(cal_truth + rng.normal(0, 0.05, (entities, cal_truth.size)), 0, 1)
    prior = fit_beta_prior(cal_truth)
    taus = [fit_entity_error_sd(cal_clean[j], cal_truth) for j in range(entities)]
    truth = rng.uniform(size=(students, concepts))
    mech = LaplaceMechanism(epsilon=epsilon, sensitivity=delta)
    reports = np.empty((students, concepts, entities))
    for j in range(entities):
        clean = np.clip(truth + rng.normal(0, 0.05, truth.shape), 0, 1)
        for i in range(students):
            out = mech.privatize(dict(zip(keys, clean[i])), rng)
            reports[i, :, j] = [out[k] for k in keys]
    models = [ReportModel(mech, t) for t in taus]
    return truth.ravel(), reports.reshape(-1, entities), models, prior


@pytest.mark.parametrize(("delta", "mean_clipped", "posterior"), [(4.0, 0.28, 0.24), (1.0, 0.19, 0.18)])
def test_posterior_mean_beats_the_mean_of_clipped_reports(delta: float, mean_clipped: float, posterior: float) -> None:
    # Prepare: the setting, ε = 2 (b = Δ/ε: 2 at Δ = K = 4, ½ at Δ = 1).
    truth, reports, models, prior = _simulate_laplace(delta, 2.0, seed=int(delta))
    # Execute
    s = posterior_summaries(reports, models, prior)
    mae_mean = float(np.mean(np.abs(reports.mean(axis=1) - truth)))
    mae_post = float(np.mean(np.abs(s.mean - truth)))
    print(f"Δ={delta:g} ε=2: MAE mean-of-clipped {mae_mean:.4f}, posterior mean {mae_post:.4f}")
    # Assert: the posterior wins, at about the numbers; its 90% interval covers ≈ 90%.
    assert mae_post < mae_mean
    assert mae_mean == pytest.approx(mean_clipped, abs=0.01)
    assert mae_post == pytest.approx(posterior, abs=0.01)
    coverage = np.mean((s.lower <= truth) & (truth <= s.upper))
    assert 0.85 <= coverage <= 0.95


def test_aggregate_equals_the_vectorized_summaries() -> None:
    _, reports, models, prior = _simulate_laplace(4.0, 2.0, seed=9, students=10, concepts=1)
    s = posterior_summaries(reports, models, prior)
    for i in range(5):
        predictions = {f"e{j}": {"k": float(reports[i, j])} for j in range(3)}
        agg = posterior_aggregate(
            predictions,
            ["k"],
            {f"e{j}": models[j].mechanism for j in range(3)},
            {"k": prior},
            {f"e{j}": models[j].entity_error_sd for j in range(3)},
        )
        assert agg.mastery["k"] == pytest.approx(s.mean[i], abs=1e-12)
        assert agg.intervals["k"] == pytest.approx((s.lower[i], s.upper[i]), abs=1e-12)


def _coverage_setups():
    n = 1000  # coordinates released per privatize call (dimension/sensitivity = n keeps ε_c as stated)
    return {
        "laplace+error": (LaplaceMechanism(epsilon=2.0, sensitivity=1.0), 0.1, False),
        "gaussian": (AnalyticGaussianMechanism.for_vector(epsilon=3.0, delta=1e-5, dimension=1), 0.0, True),
        "duchi+error": (DuchiMechanism(epsilon=1.5 * n, dimension=n), 0.1, True),
        "piecewise+error": (PiecewiseMechanism(epsilon=2.0 * n, dimension=n), 0.1, True),
        "piecewise clipped": (PiecewiseMechanism(epsilon=2.0 * n, dimension=n, clip_output=True), 0.0, True),
        "hybrid": (HybridMechanism(epsilon=2.5 * n, dimension=n), 0.0, True),
        "secure_laplace": (
            SecureLaplaceMechanism(epsilon=n / 0.3, sensitivity=float(n), randomness="generator"),
            0.0,
            True,
        ),
    }


@pytest.mark.parametrize("name", list(_coverage_setups()))
def test_credible_intervals_cover_at_the_nominal_rate_under_a_correct_model(name: str) -> None:
    # Prepare: x ~ Beta(2, 1.5) (the prior the posterior uses), 3 entities with the same mechanism.
    mech, tau, clamp_clean = _coverage_setups()[name]
    n, entities, prior = 1000, 3, BetaPrior(2.0, 1.5)
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.beta(prior.a, prior.b, size=n)
    keys = [f"s{i}" for i in range(n)]
    reports = np.empty((n, entities))
    for j in range(entities):
        clean = x + rng.normal(0.0, tau, n) if tau > 0 else x
        clean = np.clip(clean, 0.0, 1.0) if clamp_clean else clean
        if isinstance(mech, AnalyticGaussianMechanism):  # releases one value per call at Δ2 = 1
            reports[:, j] = [mech.privatize({"k": v}, rng)["k"] for v in clean.tolist()]
        else:
            out = mech.privatize(dict(zip(keys, clean.tolist())), rng)
            reports[:, j] = [out[k] for k in keys]
    # Execute
    s = posterior_summaries(reports, [ReportModel(mech, tau)] * entities, prior)
    # Assert: the 90% interval covers x 85–95% of the time (±7 binomial sd at n = 1000).
    coverage = float(np.mean((s.lower <= x) & (x <= s.upper)))
    assert 0.85 <= coverage <= 0.95, coverage
    # The posterior mean is calibrated: E[x | mean] ≈ mean, so the average residual is near 0.
    assert abs(float(np.mean(x - s.mean))) < 4 * float(np.std(x - s.mean)) / math.sqrt(n)


def _all_models() -> list[ReportModel]:
    return [
        _laplace(2.0),
        _laplace(0.05, 0.3),
        ReportModel(AnalyticGaussianMechanism.for_vector(epsilon=1.0, delta=1e-5, dimension=4)),
        ReportModel(SecureLaplaceMechanism(epsilon=8.0, sensitivity=1.0)),
        ReportModel(DuchiMechanism(epsilon=4.0, dimension=1), 0.2),
        ReportModel(PiecewiseMechanism(epsilon=8.0, dimension=1)),
        ReportModel(PiecewiseMechanism(epsilon=8.0, dimension=1, clip_output=True), 0.05),
        ReportModel(HybridMechanism(epsilon=3.0, dimension=1, clip_output=True)),
    ]


def test_summaries_never_leave_the_unit_interval() -> None:
    rng = np.random.default_rng(3)
    for model in _all_models():
        mech_name = model.mechanism.name
        for prior in (BetaPrior(0.5, 0.5), BetaPrior(50, 0.5), UNIFORM_PRIOR):
            for _ in range(5):
                if mech_name == "secure_laplace":
                    r = float(rng.choice([0.0, 0.125, 0.5, 0.875, 1.0]))
                elif mech_name == "duchi":
                    c = DuchiRandomizer(epsilon=4.0).bound
                    r = float(rng.choice([(1 - c) / 2, (1 + c) / 2]))
                else:
                    r = float(rng.choice([0.0, 1.0, rng.uniform()]))
                s = posterior_summary([(r, model), (r, model)], prior)
                values = (s.mean, s.median, s.lower, s.upper)
                assert all(0.0 <= v <= 1.0 for v in values), (mech_name, r, s)
                assert s.lower <= s.median <= s.upper
                assert s.sd >= 0
                grid, density = posterior_grid([(r, model)], prior)
                assert np.all(density >= 0) and np.all((grid > 0) & (grid < 1))
                assert float(np.sum(density) / len(grid)) == pytest.approx(1.0)


def test_mirrored_reports_give_mirrored_posteriors_and_order_does_not_matter() -> None:
    prior = BetaPrior(1.7, 1.7)
    cases = [
        (_laplace(0.5, 0.1), [0.0, 0.2, 0.9]),
        (
            ReportModel(AnalyticGaussianMechanism.for_vector(epsilon=2.0, delta=1e-5, dimension=1)),
            [1.0, 0.4],
        ),
        (ReportModel(PiecewiseMechanism(epsilon=2.0, dimension=1), 0.1), [-0.4, 0.7, 1.1]),
        (ReportModel(SecureLaplaceMechanism(epsilon=4.0, sensitivity=1.0)), [0.0, 0.25, 0.5]),
    ]
    c = DuchiRandomizer(epsilon=1.0).bound
    duchi = ReportModel(DuchiMechanism(epsilon=1.0, dimension=1), 0.05)
    cases.append((duchi, [(1 + c) / 2, (1 + c) / 2, (1 - c) / 2]))
    for model, reports in cases:
        s = posterior_summary([(r, model) for r in reports], prior)
        m = posterior_summary([(1 - r, model) for r in reports], prior)
        assert m.mean == pytest.approx(1 - s.mean, abs=1e-9)
        assert m.median == pytest.approx(1 - s.median, abs=1e-9)
        assert (m.lower, m.upper) == pytest.approx((1 - s.upper, 1 - s.lower), abs=1e-9)
        assert m.sd == pytest.approx(s.sd, abs=1e-9)
        shuffled = posterior_summary([(r, model) for r in reversed(reports)], prior)
        assert shuffled.mean == pytest.approx(s.mean, abs=1e-12)
    # Identical reports from a symmetric setup: a ½ report centres the posterior at ½.
    half = posterior_summary([(0.5, _laplace(0.3)), (0.5, _laplace(0.3))], prior)
    assert half.mean == pytest.approx(0.5, abs=1e-12) and half.median == pytest.approx(0.5, abs=1e-9)
    assert half.lower == pytest.approx(1 - half.upper, abs=1e-9)


def test_more_reports_narrow_the_interval_and_noise_widens_it() -> None:
    one = posterior_summary([(0.6, _laplace(0.3))])
    three = posterior_summary([(0.6, _laplace(0.3))] * 3)
    noisy = posterior_summary([(0.6, _laplace(3.0))] * 3)
    assert three.upper - three.lower < one.upper - one.lower < noisy.upper - noisy.lower


# ----------------------------------------------------------------------------------------------
# Aggregation API
# ----------------------------------------------------------------------------------------------


def test_posterior_aggregate_reports_intervals_missing_concepts_and_contributors() -> None:
    mech = LaplaceMechanism(epsilon=2.0, sensitivity=2.0)
    predictions = {"a": {"x": 0.0, "y": 0.7}, "b": {"x": 0.35}}
    agg = posterior_aggregate(predictions, ["x", "y", "z"], mech, {"x": BetaPrior(2, 2)}, {"a": 0.05})
    assert isinstance(agg, PosteriorAggregation) and isinstance(agg, Aggregation)
    assert agg.missing == ["z"]
    assert agg.contributors == {"x": ["a", "b"], "y": ["a"]}
    assert set(agg.mastery) == set(agg.intervals) == {"x", "y"}
    expected = posterior_summary([(0.0, ReportModel(mech, 0.05)), (0.35, ReportModel(mech, 0.0))], BetaPrior(2, 2))
    # vectorized over concepts: the same posterior, up to the order of floating-point sums
    assert agg.mastery["x"] == pytest.approx(expected.mean, rel=1e-12, abs=1e-12)
    assert agg.intervals["x"] == pytest.approx((expected.lower, expected.upper), rel=1e-12, abs=1e-12)
    lo, hi = agg.intervals["y"]
    assert lo <= agg.mastery["y"] <= hi
    mastery, intervals = agg  # unpacks as (mastery, intervals)
    assert mastery is agg.mastery and intervals is agg.intervals
    median = posterior_aggregate(predictions, ["x"], mech, estimate="median")
    assert median.mastery["x"] == median.summaries["x"].median


def test_posterior_aggregate_takes_per_entity_mechanisms() -> None:
    lap = LaplaceMechanism(epsilon=1.0, sensitivity=1.0)
    duchi = DuchiMechanism(epsilon=1.0, dimension=1)
    plus = (1 + duchi.randomizer.bound) / 2
    agg = posterior_aggregate({"a": {"x": 0.4}, "b": {"x": plus}}, ["x"], {"a": lap, "b": duchi})
    ref = posterior_summary([(0.4, ReportModel(lap)), (plus, ReportModel(duchi))])
    assert agg.mastery["x"] == pytest.approx(ref.mean, rel=1e-12, abs=1e-12)
    with pytest.raises(ValueError, match="no mechanism description"):
        posterior_aggregate({"a": {"x": 0.4}, "c": {"x": 0.1}}, ["x"], {"a": lap})


def test_posterior_aggregator_models_the_mechanism_it_is_given() -> None:
    tag = CalibrationTag(id="cal-1", noise=NoiseLevel(mechanism="laplace", epsilon=1.0))
    aggregator = PosteriorAggregator(priors={"x": BetaPrior(3, 3)}, calibration=tag, level=0.8)
    result = aggregator.aggregate(
        {"a": {"x": 0.2}, "b": {"x": 1.0}}, ["x", "y"], mechanism=LaplaceMechanism(epsilon=1.0, sensitivity=4.0)
    )
    assert aggregator.calibration_id == "cal-1" and aggregator.kind == "posterior"
    assert result.missing == ["y"] and result.level == 0.8
    lo, hi = result.intervals["x"]
    assert 0 <= lo < result.mastery["x"] < hi <= 1


# ----------------------------------------------------------------------------------------------
# Fitting and validation
# ----------------------------------------------------------------------------------------------


def test_fit_beta_prior_by_moments_with_sane_bounds() -> None:
    rng = np.random.default_rng(4)
    fitted = fit_beta_prior(rng.beta(2.0, 5.0, size=20_000))
    assert fitted.a == pytest.approx(2.0, rel=0.05) and fitted.b == pytest.approx(5.0, rel=0.05)
    assert fit_beta_prior([]) == UNIFORM_PRIOR and fit_beta_prior([0.3]) == UNIFORM_PRIOR
    # binary truth: U-shaped at the floor, but keeping the mean (0.6), not pulled to ½
    prior = fit_beta_prior([0.0, 1.0, 1.0, 0.0, 1.0])
    assert prior == BetaPrior(0.75, 0.5) and prior.a / (prior.a + prior.b) == pytest.approx(0.6)
    assert fit_beta_prior([0.0, 1.0, 0.0, 1.0]) == BetaPrior(0.5, 0.5)
    constant = fit_beta_prior([0.25] * 10)
    assert max(constant.a, constant.b) <= 1000 and constant.mean == pytest.approx(0.25)
    assert fit_beta_prior([0.0, 0.0, 0.0]) == BetaPrior(0.5, 1000.0)
    uniform = fit_beta_prior(rng.uniform(size=50_000))
    assert uniform.a == pytest.approx(1.0, abs=0.05) and uniform.b == pytest.approx(1.0, abs=0.05)
    priors = fit_concept_priors([{"x": 0.2, "y": 0.9}, {"x": 0.4}], concepts=["x", "y", "z"])
    assert set(priors) == {"x", "y", "z"} and priors["y"] == priors["z"] == UNIFORM_PRIOR
    with pytest.raises(ValueError):
        fit_beta_prior([0.2, float("nan")])


def test_fit_entity_error_sd_is_the_rms_error() -> None:
    assert fit_entity_error_sd([0.5, 0.7], [0.4, 0.4]) == pytest.approx(math.sqrt((0.01 + 0.09) / 2))
    assert fit_entity_error_sd([], []) == 0.0
    with pytest.raises(ValueError, match="length"):
        fit_entity_error_sd([0.1], [0.1, 0.2])


def test_missing_reports_in_the_batch_are_skipped() -> None:
    model = _laplace(0.5)
    batch = posterior_summaries(np.array([[0.2, np.nan], [np.nan, np.nan]]), [model, model])
    assert batch[0].mean == pytest.approx(posterior_summary([(0.2, model)]).mean, abs=1e-12)
    assert batch[1].mean == pytest.approx(0.5)  # the uniform prior


@pytest.mark.parametrize(
    ("model", "report", "match"),
    [
        (_laplace(0.5), 1.2, r"\[0, 1\]"),
        (_laplace(0.5), -0.1, r"\[0, 1\]"),
        (ReportModel(DuchiMechanism(epsilon=1.0, dimension=1)), 0.5, "duchi releases"),
        (ReportModel(PiecewiseMechanism(epsilon=1.0, dimension=1)), 50.0, "piecewise releases"),
        (ReportModel(SecureLaplaceMechanism(epsilon=8.0, sensitivity=1.0)), 0.3, "secure_laplace"),
    ],
)
def test_reports_a_mechanism_cannot_produce_are_rejected(model: ReportModel, report: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        posterior_summary([(report, model)])


def test_invalid_models_and_levels_are_rejected() -> None:
    # A model is built from a mechanism; a stored description becomes one first, and an invalid one never does.
    with pytest.raises(TypeError, match="privacy.Mechanism"):
        ReportModel({"mechanism": "laplace", "noise_scale": 0.4})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no mechanism named 'mystery'"):
        mechanism_from_description({"mechanism": "mystery"})
    with pytest.raises(ValueError, match="epsilon"):
        mechanism_from_description({"mechanism": "laplace", "noise_scale": 0.4})
    with pytest.raises(ValueError, match="sensitivity"):
        LaplaceMechanism(epsilon=1.0, sensitivity=0.0)  # no noise scale 0 for Laplace
    with pytest.raises(ValueError, match="entity_error_sd"):
        ReportModel(LAPLACE, -0.1)
    with pytest.raises(ValueError, match="level"):
        posterior_summary([(0.3, ReportModel(LAPLACE))], level=1.0)
    with pytest.raises(ValueError):
        BetaPrior(0.0, 1.0)
    with pytest.raises(ValueError, match="estimate"):
        posterior_aggregate({"a": {"x": 0.1}}, ["x"], LAPLACE, estimate="mode")  # type: ignore[arg-type]
