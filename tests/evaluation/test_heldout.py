"""The held-out protocol's sanity: a monotone link, every row on the same responses, partial credit,
and the paired bootstrap of `served` against the baselines."""

from __future__ import annotations

import numpy as np
import pytest

from diagnosis import NoiseLevel
from evaluation.baselines import NCDMSettings
from evaluation.harness import fill_uncovered
from evaluation.link import fit_link, item_easiness
from evaluation.protocols import EvaluationConfig, evaluate
from evaluation.served import LocalFedTraining, ServedConfig
from evaluation.significance import paired_bootstrap_auc
from providers.simulated import simulated_family
from qmatrix import Dataset, Response, StudentResponses, example_qmatrix, simulate_dina

SERVED = ServedConfig(noise=NoiseLevel(mechanism="piecewise", epsilon=32.0, sensitivity="paper"),
                      local_fed=LocalFedTraining(rounds=3, threads=1))
FAST_NCDM = NCDMSettings(hidden=(32, 16), max_epochs=4, fold_in_steps=30, threads=1)


def test_the_link_never_turns_more_mastery_into_fewer_correct_answers() -> None:
    # Prepare: validation data where mastery is *anti*-correlated with correctness (a noisy fit could do this).
    rng = np.random.default_rng(0)
    m = rng.random(400)
    y = (rng.random(400) < 1 - m).astype(float)
    # Execute
    link = fit_link(m, y, np.zeros(400))
    # Assert: the slope stops at 0 instead of going negative.
    assert link.a == 0.0
    assert np.all(np.diff(link(np.linspace(0, 1, 11), np.zeros(11))) >= 0)


def test_item_easiness_is_smoothed_toward_the_train_mean() -> None:
    easiness = item_easiness({"easy": [1.0] * 50, "once": [1.0], "hard": [0.0] * 50})
    assert easiness(["easy"])[0] > easiness(["once"])[0] > easiness(["unseen"])[0] > easiness(["hard"])[0]


def test_uncovered_concepts_count_at_the_rows_validation_mean() -> None:
    reference = [{"a": 0.2, "b": 0.6}, {"a": 0.4}]
    filled, count = fill_uncovered([{"a": 0.9}, {}], [{"a", "b"}, {"a", "c"}], reference)
    assert filled == [{"a": 0.9, "b": 0.6}, {"a": pytest.approx(0.3), "c": pytest.approx(0.4)}]  # c: mean of all
    assert count == 3


def test_the_paired_bootstrap_interval_excludes_zero_only_for_a_real_difference() -> None:
    rng = np.random.default_rng(1)
    owner = np.repeat(np.arange(60), 5)
    truth = rng.random(owner.size)
    labels = (rng.random(owner.size) < truth).astype(float)
    good, same = truth + rng.normal(0, 0.05, owner.size), truth + rng.normal(0, 0.05, owner.size)
    useless = rng.random(owner.size)
    diff, low, high = paired_bootstrap_auc(good, useless, labels, owner, resamples=300, seed=0)
    assert diff > 0 and low > 0
    diff, low, high = paired_bootstrap_auc(good, same, labels, owner, resamples=300, seed=0)
    assert low < 0 < high
    assert paired_bootstrap_auc(good, same, labels, owner, resamples=50, seed=3) == paired_bootstrap_auc(
        good, same, labels, owner, resamples=50, seed=3)


def _partial_credit(n: int, seed: int) -> Dataset:
    """SIMULATED DINA students whose scores are partial credit: a correct answer earns 1 or ¾, a wrong one 0 or ¼."""
    base = simulate_dina(example_qmatrix(), n_students=n, seed=seed)
    rng = np.random.default_rng(seed)
    students = [
        StudentResponses(student_id=s.student_id, responses=tuple(
            Response(item_id=r.item_id, correct=float(rng.choice([1.0, 0.75]) if r.score else rng.choice([0.0, 0.25])))
            for r in s.responses))
        for s in base.students
    ]
    return Dataset(name="partial-credit", qmatrix=base.qmatrix, students=students, simulated=True)


async def test_heldout_with_partial_credit_scores_every_row_on_the_same_responses() -> None:
    # Prepare: partial-credit responses (values strictly between 0 and 1 are common).
    data = _partial_credit(150, seed=4)
    assert any(0 < r.score < 1 for s in data.students for r in s.responses)
    # Execute
    config = EvaluationConfig(protocol="heldout", epsilons=[2.0], seed=4, served=SERVED, ncdm=FAST_NCDM)
    result = await evaluate(data, simulated_family(), config)
    # Assert: the served rows, local-fed and NCDM are there; one n for every row; metrics in range.
    rows = {(r.name, r.epsilon, r.mechanism): r for r in result.rows}
    assert ("served", 32.0, "piecewise") in rows and ("served", None, "none") in rows
    assert ("single:local-fed", None, "none") in rows and ("single:local-fed", 32.0, "piecewise") in rows
    # served and single:local-fed are scored by the item forecasts the API returns, the link beside them (issue 31)
    assert ("served (link)", None, "none") in rows and ("single:local-fed (link)", None, "none") in rows
    assert rows[("served", None, "none")].auc != rows[("served (link)", None, "none")].auc
    assert any("scored by the item forecasts" in n and "fedcd-cdm/v0001" in n for n in result.notes)
    assert {"ncdm", "irt", "dina", "proportion-correct", "item-difficulty"} <= {r.name for r in result.rows}
    assert len({r.n for r in result.rows}) == 1 and result.rows[0].n > 0
    for r in result.rows:
        assert 0.0 <= r.auc <= 1.0 and 0.0 <= r.acc <= 1.0 and 0.0 <= r.rmse <= 1.0
    # a diagnosis at least as good as item difficulty alone (the link cannot invert a ranking)
    floor = rows[("item-difficulty", None, "none")].auc
    assert rows[("served", None, "none")].auc >= floor - 0.02
    baselines = {d["baseline"] for d in result.significance if d["epsilon"] is None}
    assert {"irt", "dina", "ncdm", "proportion-correct", "single:local-fed"} <= baselines
    for d in result.significance:
        assert d["low"] <= d["diff"] <= d["high"] and d["resamples"] == 1000
    # local-fed on its own is compared with the CDMs too
    assert {"irt", "dina", "ncdm"} <= {d["baseline"] for d in result.significance if d["row"] == "single:local-fed"}
    assert result.served["local_fed"]["train_students"] == result.split["train"]
    assert result.served["local_fed"]["model"] == "auto" and result.served["local_fed"]["rounds"] == 3
    assert result.served["local_fed"]["kind"] in ("higher-order-irt", "irt-2pl")  # the kind "auto" chose
    assert result.baselines["ncdm"]["hidden"] == [32, 16] or result.baselines["ncdm"]["hidden"] == (32, 16)


async def test_a_dp_released_served_calibration_is_guarded_by_forecasts_of_the_validation_students_hidden_responses(
) -> None:
    # Prepare: the served calibration released with DP, as a real cohort's is by default
    data = simulate_dina(example_qmatrix(), n_students=150, seed=8)
    served = ServedConfig(noise=SERVED.noise, release_epsilon=4.0, local_fed=LocalFedTraining(rounds=1, threads=1))
    config = EvaluationConfig(protocol="heldout", epsilons=[], seed=8, served=served, ncdm=None)

    # Execute
    result = await evaluate(data, simulated_family(), config)

    # Assert: both served calibrations' guards compared the candidates on the validation students' held-out
    # responses (what calibration.held_out keeps back), not on the concept truth
    calibrations = result.served["calibrations"]
    assert len(calibrations) == 2
    for calibration in calibrations:
        assert any("Brier score changes of held-out forecasts" in n for n in calibration["notes"]), calibration["notes"]
