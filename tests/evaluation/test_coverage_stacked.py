"""The default calibration's intervals cover simulated truth (issue 33's coverage band), at few and many answers."""

from __future__ import annotations

import numpy as np
import torch

from evaluation.coverage_sim import coverage, generator_model, simulate_model
from evaluation.coverage_stacked import DP_RELEASED, STACKED, fit_stacked, fit_stacks, stacked_intervals, stacked_rows
from qmatrix.datasets import load_frcsub


def test_a_stacks_measured_intervals_cover_85_to_95_percent_of_simulated_students() -> None:
    # Prepare: FrcSub's Q-matrix, the model generator; a stack fitted on SIMULATED validation students (5 and 50
    # responses), released at the server's default noise
    torch.set_num_threads(1)
    q = load_frcsub().qmatrix
    model = generator_model(q, seed=0)
    stack = fit_stacked(q, model, students=300, counts=(5, 50), seed=500)

    # Execute / Assert: new students at each count
    assert stack.measured_error is not None
    for n in (5, 50):
        students = simulate_model(q, model, n_students=200, n_responses=n, seed=n)
        lower, upper = stacked_intervals(stack, model, students, seed=n)
        overall, _ = coverage(students.truth, lower, upper, students.answered)
        assert 0.85 <= overall <= 0.95, (n, overall)
        assert np.isnan(lower[~students.answered]).all()  # no interval where the student gave no answer


def test_a_dp_release_on_a_cohort_too_small_for_the_stacks_noise_serves_the_plain_mean_with_intervals() -> None:
    # Prepare: the same 300 SIMULATED validation students released as a real cohort is by default (ε = 4 per student).
    # Before, the per-concept DP stack was swamped by its noise on FrcSub's 8 concepts and served no interval; now its
    # DP guard serves the plain mean where the stack does not beat it by more than the noise (calibration.release_guard)
    # and the plain mean's DP-released error serves intervals
    torch.set_num_threads(1)
    q = load_frcsub().qmatrix
    model = generator_model(q, seed=0)
    stacks = fit_stacks(q, model, students=300, counts=(5, 50), seed=500)
    students = simulate_model(q, model, n_students=100, n_responses=5, seed=5)

    # Execute
    rows = {r["config"]: r for r in stacked_rows(stacks, model, students, responses=5, seed=5)}

    # Assert: both rows are measured and cover in the band
    assert stacks[DP_RELEASED].measured_error is not None
    assert 0.85 <= rows[DP_RELEASED]["coverage"] <= 0.95 and rows[DP_RELEASED]["width"] > 0
    assert 0.85 <= rows[STACKED]["coverage"] <= 0.95 and rows[STACKED]["width"] > 0
