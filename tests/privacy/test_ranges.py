"""Every mechanism and accountant is total over the documented ranges (privacy.ranges), and refuses the rest.

Hypothesis draws parameters over the whole allowed range (log-uniformly, plus the end points) and
checks that each release is finite and inside the mechanism's documented output range, that the
charge an accountant computes from it is finite, and that nothing outside the ranges gets further
than a ``ValueError``. The per-example deadline only catches a loop that does not end (the ε = 1e308
Gaussian used to spin forever); it is far above the milliseconds an example takes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privacy import (
    COORDINATE_EPSILON_MIN,
    DELTA_MAX,
    DELTA_MIN,
    DIMENSION_MAX,
    EPSILON_MAX,
    EPSILON_MIN,
    MAX_RELEASE_EPSILON,
    MECHANISM_NAMES,
    Epsilon,
    PrivacyLedger,
    ReleaseCost,
    StudentKey,
    check_delta,
    check_dimension,
    cohort_statistics,
    make_accountant,
    make_rng,
    mechanism_for_request,
)
from privacy.accountants import NOISE_MULTIPLIER_RANGE
from privacy.bounded import BoundedMechanism, DuchiRandomizer, HybridRandomizer, PiecewiseRandomizer
from privacy.gaussian import AnalyticGaussianMechanism, analytic_gaussian_sigma, gaussian_delta
from privacy.sampling import RELEASE_GRID, SecureLaplaceMechanism
from tests.factories import log_uniform

TOTAL = settings(max_examples=60, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])
ACCOUNTANTS = ("basic", "rdp", "zcdp")


EPSILONS = log_uniform(EPSILON_MIN, EPSILON_MAX)
DELTAS = log_uniform(DELTA_MIN, DELTA_MAX)
DIMENSIONS = st.one_of(
    st.sampled_from([1, DIMENSION_MAX]), st.integers(1, 64), log_uniform(1, DIMENSION_MAX).map(int)
)
MASTERY = st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8)


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def _release_range(mechanism: object) -> tuple[float, float]:
    if isinstance(mechanism, BoundedMechanism):
        low, high = mechanism.output_range
        return low - RELEASE_GRID, high + RELEASE_GRID  # PM rounds to the grid (privacy.bounded)
    return 0.0, 1.0


# -- the constants --------------------------------------------------------------------------------
def test_the_ranges_are_the_documented_ones() -> None:
    assert (EPSILON_MIN, EPSILON_MAX, DELTA_MIN, DELTA_MAX) == (1e-3, 1e3, 1e-12, 0.1)
    assert (DIMENSION_MAX, COORDINATE_EPSILON_MIN) == (1_000_000, 1e-9)
    assert EPSILON_MAX < MAX_RELEASE_EPSILON
    docs = (Path(__file__).resolve().parents[2] / "docs" / "privacy.md").read_text()
    for name in ("EPSILON_MIN", "EPSILON_MAX", "DELTA_MIN", "DELTA_MAX", "DIMENSION_MAX"):
        assert name in docs


@pytest.mark.parametrize("value", [0.0, -1.0, 1e-300, 5000.0, 1e308, math.inf, -math.inf, math.nan, True, "1", None])
def test_an_epsilon_refuses_everything_outside_the_range(value: object) -> None:
    with pytest.raises(ValueError, match=r"epsilon must .*\[0\.001, 1000\]"):
        Epsilon(value)


@pytest.mark.parametrize("value", [0.0, 1e-13, 0.5, 1.0, math.nan, math.inf])
def test_check_delta_refuses_everything_outside_the_range(value: float) -> None:
    with pytest.raises(ValueError, match=r"delta must .*\[1e-12, 0\.1\]"):
        check_delta(value)


@pytest.mark.parametrize("value", [0, -3, DIMENSION_MAX + 1, 2.0, True, None])
def test_check_dimension_refuses_everything_outside_the_range(value: object) -> None:
    with pytest.raises(ValueError, match="dimension must be an integer"):
        check_dimension(value)


def test_the_end_points_are_allowed() -> None:
    assert Epsilon(EPSILON_MIN) == EPSILON_MIN and Epsilon(EPSILON_MAX) == EPSILON_MAX
    assert check_delta(DELTA_MIN) == DELTA_MIN and check_delta(DELTA_MAX) == DELTA_MAX
    assert check_dimension(1) == 1 and check_dimension(DIMENSION_MAX) == DIMENSION_MAX


def test_an_epsilon_is_checked_once_and_carried() -> None:
    validated = Epsilon(2.0)
    assert Epsilon(validated) is validated and validated == 2.0 and isinstance(validated, float)
    assert type(validated * 2) is float  # arithmetic leaves the validated type: a derived ε is checked anew


# -- every mechanism over the whole request range ------------------------------------------------
@pytest.mark.parametrize("name", MECHANISM_NAMES)
@TOTAL
@given(epsilon=EPSILONS, delta=DELTAS, dimension=DIMENSIONS, values=MASTERY, assessed=st.floats(0.0, 1.0))
def test_every_mechanism_is_total_over_the_allowed_range(
    name: str, epsilon: float, delta: float, dimension: int, values: list[float], assessed: float
) -> None:
    n_assessed = max(1, round(assessed * dimension))
    for mode in ("paper", "assessed"):
        mechanism = mechanism_for_request(
            name=name, epsilon=epsilon, delta=delta, mode=mode, n_concepts_total=dimension,
            n_concepts_assessed=n_assessed,
        )  # fmt: skip
        if isinstance(mechanism, SecureLaplaceMechanism):  # repeatable draws for the test
            sensitivity = mechanism.sensitivity
            mechanism = SecureLaplaceMechanism(epsilon=epsilon, sensitivity=sensitivity, randomness="generator")
        k = min(len(values), n_assessed)
        released = mechanism.privatize({f"c{i}": v for i, v in enumerate(values[:k])}, make_rng(7))
        low, high = _release_range(mechanism)
        assert len(released) == k
        assert all(math.isfinite(v) and low <= v <= high for v in released.values()), (released, low, high)
        assert all(_finite(v) for v in mechanism.describe().values())

        cost = mechanism.charge()
        assert math.isfinite(cost.epsilon) and 0 < cost.epsilon <= MAX_RELEASE_EPSILON
        for accountant_name in ACCOUNTANTS:
            accountant = make_accountant(accountant_name)
            for _ in range(3):
                accountant.step(cost)
            spent_epsilon, spent_delta = accountant.spent(1e-5 if accountant_name != "basic" else None)
            assert math.isfinite(spent_epsilon) and spent_epsilon >= 0 and 0 <= spent_delta < 1


@TOTAL
@given(epsilon=EPSILONS, delta=DELTAS, sensitivity=log_uniform(1e-3, math.sqrt(DIMENSION_MAX)))
def test_the_analytic_gaussian_calibration_is_total_and_tight(epsilon: float, delta: float, sensitivity: float) -> None:
    sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    assert math.isfinite(sigma) and sigma > 0
    assert gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity) <= delta * (1 + 1e-9)
    assert gaussian_delta(epsilon=epsilon, sigma=sigma * (1 - 1e-9), sensitivity=sensitivity) > delta * (1 - 1e-6)
    assert NOISE_MULTIPLIER_RANGE[0] < sigma / sensitivity < NOISE_MULTIPLIER_RANGE[1]


@pytest.mark.parametrize("randomizer", [DuchiRandomizer, PiecewiseRandomizer, HybridRandomizer])
@TOTAL
@given(
    epsilon=log_uniform(COORDINATE_EPSILON_MIN, EPSILON_MAX), t=st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=8)
)
def test_scalar_randomizers_are_total_over_the_per_concept_range(
    randomizer: Callable[..., DuchiRandomizer], epsilon: float, t: list[float]
) -> None:
    r = randomizer(epsilon=epsilon)
    bound = r.bound
    assert math.isfinite(bound) and bound >= 1
    out = r.sample(np.array(t), make_rng(3))
    assert np.all(np.isfinite(out)) and np.all(np.abs(out) <= bound + RELEASE_GRID)
    variance = r.variance(np.array(t))
    assert np.all(np.isfinite(variance)) and np.all(variance >= 0)
    if isinstance(r, PiecewiseRandomizer):
        low, high = r.densities
        assert 0 < low <= high and math.isfinite(high)
        # the density ratio is e^ε (that is what makes PM ε-LDP): check it in logs, where it cannot overflow
        assert math.log(high) - math.log(low) == pytest.approx(epsilon, rel=1e-9, abs=1e-12)


@TOTAL
@given(epsilon=EPSILONS, bins=st.integers(1, 20), n_concepts=st.integers(1, 50), students=st.integers(0, 30))
def test_cohort_statistics_are_total(epsilon: float, bins: int, n_concepts: int, students: int) -> None:
    concepts = [f"c{k}" for k in range(n_concepts)]
    rng = make_rng(5)
    mastery = [{c: float(rng.random()) for c in concepts} for _ in range(students)]
    stats, eps_stat = cohort_statistics(mastery, concepts, epsilon=epsilon, bins=bins, rng=rng)
    assert eps_stat == pytest.approx(epsilon / (2 * n_concepts))
    for stat in stats.values():
        assert stat.mean is None or 0.0 <= stat.mean <= 1.0
        assert math.isfinite(stat.noisy_count) and all(math.isfinite(c) and c >= 0 for c in stat.counts)


# -- every accountant over what the ledger may replay ----------------------------------------------
RELEASE_EPSILONS = log_uniform(1e-300, MAX_RELEASE_EPSILON)
EVENTS = st.one_of(
    st.builds(dict, epsilon=RELEASE_EPSILONS, mechanism=st.sampled_from(["laplace", "duchi", "central_laplace"])),
    st.builds(
        dict, epsilon=RELEASE_EPSILONS, delta=DELTAS, mechanism=st.sampled_from(["gaussian", "analytic_gaussian"]),
        sigma_over_sensitivity=log_uniform(*NOISE_MULTIPLIER_RANGE),
    ),
    st.builds(dict, epsilon=EPSILONS, delta=DELTAS, mechanism=st.just("gaussian")),  # σ derived from (ε, δ)
)


@pytest.mark.parametrize("name", ACCOUNTANTS)
@TOTAL
@given(history=st.lists(EVENTS, min_size=1, max_size=12), target=DELTAS)
def test_every_accountant_is_total_over_the_release_range(name: str, history: list[dict], target: float) -> None:
    accountant = make_accountant(name)
    for event in history:
        accountant.step(ReleaseCost(**{"delta": 0.0, **event}))
    spent_epsilon, spent_delta = accountant.spent(target)
    assert math.isfinite(spent_epsilon) and spent_epsilon >= 0 and math.isfinite(spent_delta)
    replayed = make_accountant(name)
    replayed.load_state_dict(accountant.state_dict())  # what the ledger does on every charge
    assert replayed.spent(target) == (spent_epsilon, spent_delta)


@pytest.mark.parametrize("name", ACCOUNTANTS)
@pytest.mark.parametrize(
    "event",
    [
        {"epsilon": 1e308}, {"epsilon": MAX_RELEASE_EPSILON * 1.01}, {"epsilon": math.inf}, {"epsilon": math.nan},
        {"epsilon": 0.0}, {"epsilon": 1.0, "delta": math.nan}, {"epsilon": True},
        {"epsilon": 1.0, "delta": 1e-5, "mechanism": "gaussian", "sigma_over_sensitivity": 1e-300},
        {"epsilon": 1e308, "delta": 1e-5, "mechanism": "gaussian"},
    ],
)
def test_accountants_refuse_releases_outside_the_range_and_keep_their_history(name: str, event: dict) -> None:
    accountant = make_accountant(name)
    accountant.step(ReleaseCost(epsilon=1.0, delta=0.0, mechanism="laplace"))
    before = accountant.spent(1e-5)
    with pytest.raises(ValueError):  # made, or stepped by: the cost is checked once, when it is made
        accountant.step(ReleaseCost(**{"delta": 0.0, "mechanism": "laplace", **event}))
    assert len(accountant) == 1 and accountant.spent(1e-5) == before


@pytest.mark.parametrize("name", ACCOUNTANTS)
def test_the_ledger_charges_and_replays_every_mechanism_at_the_range_ends(tmp_path: Path, name: str) -> None:
    # The Gaussian is described as "analytic_gaussian": the Rényi accountants used to refuse it.
    ledger = PrivacyLedger(tmp_path / "ledger.db", cap_epsilon=1e6, cap_delta=0.5, accountant=name)
    for mechanism_name in MECHANISM_NAMES:
        for epsilon in (EPSILON_MIN, EPSILON_MAX):
            mechanism = mechanism_for_request(
                name=mechanism_name, epsilon=epsilon, mode="paper", n_concepts_total=6, n_concepts_assessed=3,
                delta=DELTA_MIN,
            )  # fmt: skip
            ledger.charge(tenant="t", student=StudentKey("s"), cost=mechanism.charge(), releases=3)
    status = ledger.status("t", "s")
    assert status["queries"] == 2 * len(MECHANISM_NAMES) and math.isfinite(status["spent_epsilon"])
    ledger.close()
    other = "basic" if name != "basic" else "rdp"  # a different accountant replays every charge
    replayed = PrivacyLedger(tmp_path / "ledger.db", cap_epsilon=1e6, cap_delta=0.5, accountant=other)
    assert math.isfinite(replayed.status("t", "s")["spent_epsilon"])
    replayed.close()


# -- the exact inputs of issue 14 ------------------------------------------------------------------
def _finishes(call: Callable[[], object], seconds: float = 10.0) -> BaseException | None:
    """Run ``call`` in a daemon thread; fail if it has not returned after ``seconds``; its exception."""
    caught: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            caught.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return caught[0] if caught else None


@pytest.mark.parametrize(
    "name,epsilon",
    [(m, e) for m in ("piecewise", "duchi", "hybrid", "laplace", "secure_laplace") for e in (1e-300, math.inf)]
    + [("piecewise", 5000.0), ("laplace", 1e308), ("gaussian", 1e308), ("gaussian", math.inf)],
)
@pytest.mark.parametrize("dimension", [1, 6])
def test_issue_14_inputs_are_a_prompt_value_error(name: str, epsilon: float, dimension: int) -> None:
    error = _finishes(
        lambda: mechanism_for_request(
            name=name, epsilon=epsilon, mode="paper", n_concepts_total=dimension, n_concepts_assessed=dimension
        )
    )
    assert isinstance(error, ValueError) and "epsilon" in str(error)


def test_the_gaussian_calibration_at_1e308_ends_with_a_value_error() -> None:
    for call in (
        lambda: analytic_gaussian_sigma(epsilon=1e308, delta=1e-5, sensitivity=1.0),
        lambda: AnalyticGaussianMechanism(epsilon=1e308, delta=1e-5, sensitivity=1.0),
        lambda: make_accountant("rdp").step(ReleaseCost(epsilon=1e308, delta=1e-5, mechanism="gaussian")),
    ):
        assert isinstance(_finishes(call), ValueError)


def test_laplace_at_1e308_in_the_accountant_is_a_value_error() -> None:
    for name in ACCOUNTANTS:
        with pytest.raises(ValueError, match="epsilon of one release"):
            make_accountant(name).step(ReleaseCost(epsilon=1e308, delta=0.0, mechanism="laplace"))
