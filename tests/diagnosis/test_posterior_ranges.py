"""The posterior of a concept is finite and in [0, 1] for every mechanism over the whole allowed ε range.

The likelihood kernels evaluate the mechanisms' closed forms; at large ε per concept they used to
overflow (Duchi's e^ε above ε ≈ 709, the piecewise densities' e^ε) or fail (the hybrid's
log(1 − α) once α rounds to 1, ε above ~75).
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnosis.posterior import ReportModel, posterior_summary
from privacy import EPSILON_MAX, EPSILON_MIN, MECHANISM_NAMES, SecureLaplaceMechanism, make_rng, mechanism_for_request
from tests.factories import log_uniform


@pytest.mark.parametrize("name", MECHANISM_NAMES)
@settings(max_examples=40, deadline=timedelta(seconds=5))
@given(
    epsilon=log_uniform(EPSILON_MIN, EPSILON_MAX, also=(76.0, 710.0)),
    dimension=st.sampled_from([1, 2, 6, 1000]),
    tau=st.sampled_from([0.0, 0.1]),
    truths=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=3),
)
def test_posterior_is_total_over_the_allowed_range(
    name: str, epsilon: float, dimension: int, tau: float, truths: list[float]
) -> None:
    mechanism = mechanism_for_request(
        name=name, epsilon=epsilon, mode="paper", n_concepts_total=dimension, n_concepts_assessed=1
    )
    if isinstance(mechanism, SecureLaplaceMechanism):  # repeatable draws for the test
        mechanism = SecureLaplaceMechanism(epsilon=epsilon, sensitivity=mechanism.sensitivity, randomness="generator")
    model = ReportModel(mechanism, tau)
    rng = make_rng(9)
    reports = [(mechanism.privatize({"c": truth}, rng)["c"], model) for truth in truths]

    summary = posterior_summary(reports)

    low, high = summary.interval
    for value in (summary.estimate("mean"), summary.estimate("median"), low, high):
        assert math.isfinite(value) and 0.0 <= value <= 1.0
