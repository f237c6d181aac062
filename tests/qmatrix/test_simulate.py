"""The DINA simulator: repeatable, labelled simulated, and faithful to slip/guess."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qmatrix import Dataset, example_qmatrix, simulate_dina


def _responses(ds: Dataset) -> np.ndarray:
    return np.array([[r.score for r in s.responses] for s in ds.students])


def _alpha(ds: Dataset) -> np.ndarray:
    return np.array([[ds.true_mastery[s.student_id][c] for c in ds.qmatrix.concepts] for s in ds.students])


def _ideal(ds: Dataset) -> np.ndarray:
    """eta[s, i] = 1 iff student s masters every concept item i requires."""
    q = ds.qmatrix.matrix
    alpha = _alpha(ds)
    return np.array([[int(all(alpha[s, k] == 1 for k in np.flatnonzero(q[i]))) for i in range(len(q))]
                     for s in range(len(alpha))])


def test_same_seed_gives_same_data():
    # Prepare
    q = example_qmatrix()

    # Execute
    a = simulate_dina(q, n_students=50, seed=7)
    b = simulate_dina(q, n_students=50, seed=7)

    # Assert
    assert a.students == b.students
    assert a.true_mastery == b.true_mastery


def test_different_seeds_give_different_data():
    # Prepare
    q = example_qmatrix()

    # Execute
    a = simulate_dina(q, n_students=50, seed=1)
    b = simulate_dina(q, n_students=50, seed=2)

    # Assert
    assert not np.array_equal(_responses(a), _responses(b))
    assert a.true_mastery != b.true_mastery


def test_dataset_is_labelled_simulated():
    # Execute
    ds = simulate_dina(example_qmatrix(), n_students=3)

    # Assert
    assert ds.simulated is True
    assert "simulated" in ds.name


def test_shape_ids_and_truth_cover_every_student_and_concept():
    # Prepare
    q = example_qmatrix()

    # Execute
    ds = simulate_dina(q, n_students=12, seed=3, student_prefix="s")

    # Assert
    assert [s.student_id for s in ds.students] == [f"s{k:02d}" for k in range(1, 13)]
    assert all(s.item_ids() == list(q.item_ids) for s in ds.students)
    assert set(ds.true_mastery) == {s.student_id for s in ds.students}
    assert all(list(m) == list(q.concepts) and set(m.values()) <= {0.0, 1.0} for m in ds.true_mastery.values())


def test_no_slip_no_guess_gives_exactly_the_ideal_response_pattern():
    # Prepare
    q = example_qmatrix()

    # Execute
    ds = simulate_dina(q, n_students=200, slip=0.0, guess=0.0, seed=11)

    # Assert
    ideal = _ideal(ds)
    assert 0 < ideal.mean() < 1  # both right and wrong answers occur, so the check has teeth
    np.testing.assert_array_equal(_responses(ds), ideal)


@pytest.mark.parametrize(("rate", "expected"), [(0.0, 0.0), (1.0, 1.0)])
def test_mastery_rate_extremes(rate, expected):
    # Execute
    ds = simulate_dina(example_qmatrix(), n_students=20, mastery_rate=rate, seed=5)

    # Assert
    assert np.all(_alpha(ds) == expected)


@pytest.mark.parametrize(("slip", "guess"), [(0.1, 0.2), (0.3, 0.05)])
def test_empirical_rates_match_slip_and_guess(slip, guess):
    # Prepare
    ds = simulate_dina(example_qmatrix(), n_students=4000, slip=slip, guess=guess, seed=2024)
    x, eta = _responses(ds), _ideal(ds).astype(bool)

    # Execute
    p_master, n_master = x[eta].mean(), eta.sum()
    p_non, n_non = x[~eta].mean(), (~eta).sum()

    # Assert: within 4 binomial standard errors
    assert abs(p_master - (1 - slip)) <= 4 * math.sqrt(slip * (1 - slip) / n_master)
    assert abs(p_non - guess) <= 4 * math.sqrt(guess * (1 - guess) / n_non)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"slip": -0.1},
        {"slip": 1.1},
        {"guess": -0.01},
        {"guess": 1.5},
        {"mastery_rate": -0.1},
        {"mastery_rate": 1.01},
        {"slip": float("nan")},
        {"slip": 0.5, "guess": 0.5},
        {"slip": 0.6, "guess": 0.6},
        {"n_students": 0},
        {"n_students": -3},
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_invalid_parameters_raise_value_error(kwargs):
    # Prepare
    args = {"n_students": 10, **kwargs}

    # Execute / Assert
    with pytest.raises(ValueError):
        simulate_dina(example_qmatrix(), **args)
