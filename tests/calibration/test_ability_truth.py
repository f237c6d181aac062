"""Calibration truth on the serving model's scale (issue 31, part 4): a validation student's abilities read through
the item parameters the forecasts use, so the aggregate is fitted on the scale a forecast reads it on."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, logit

from calibration import ability_truth, ability_truths, trained_scale
from calibration.ability_truth import restrict
from providers.item_response import ItemResponseFunction
from qmatrix import Response


def _irf(intercepts: list[float], *, alpha: float = 1.5, basis: str = "trained",
         concepts: list[tuple[str, ...]] | None = None) -> ItemResponseFunction:
    n = len(intercepts)
    return ItemResponseFunction(
        model="fedcd-cdm/test", item_ids=tuple(f"i{k}" for k in range(n)),
        concepts=tuple(concepts or [("A",)] * n), alpha=np.full(n, alpha), intercept=np.array(intercepts, dtype=float),
        basis=(basis,) * n, prior_mean={"A": 0.0, "B": 0.0}, prior_sd={"A": 1.0, "B": 1.0},
    )


def _answers(scores: list[int]) -> list[Response]:
    return [Response(item_id=f"i{k}", correct=bool(s)) for k, s in enumerate(scores)]


def test_the_same_proportion_correct_on_harder_items_reads_as_more_ability() -> None:
    # The paper's rule gives both students 0.5; the model knows the second one's items were harder.
    easy, hard = _irf([1.5] * 6), _irf([-1.5] * 6)
    half = _answers([1, 1, 1, 0, 0, 0])
    on_easy, on_hard = ability_truth(easy, half)["A"], ability_truth(hard, half)["A"]
    assert on_hard > 0.5 > on_easy


def test_the_estimate_is_the_posterior_mode_and_stays_finite_when_every_answer_is_right() -> None:
    irf = _irf([0.3, -0.2, 0.8, 0.0])
    answers = _answers([1, 0, 1, 1])
    got = ability_truth(irf, answers)["A"]
    # the mode of the log posterior, found by a fine grid: the same θ
    grid = np.linspace(-6, 6, 120001)
    eta = 1.5 * grid[:, None] + irf.intercept[None, :]
    y = np.array([1, 0, 1, 1.0])
    log_post = (y * np.log(expit(eta)) + (1 - y) * np.log(expit(-eta))).sum(axis=1) - grid**2 / 2
    assert logit(got) == pytest.approx(grid[np.argmax(log_post)], abs=1e-3)
    perfect = ability_truth(irf, _answers([1, 1, 1, 1]))["A"]
    assert 0.5 < perfect < 0.99  # the prior keeps an all-right record finite


def test_concepts_items_and_restriction() -> None:
    irf = _irf([0.0, 0.0, 0.0], concepts=[("A",), ("A", "B"), ("B",)])
    answers = [Response(item_id="i0", correct=True), Response(item_id="i1", correct=True), Response(item_id="zz", correct=False)]
    both = ability_truth(irf, answers)
    assert set(both) == {"A", "B"} and both["A"] > both["B"] > 0.5  # B only through the shared item
    assert set(ability_truth(irf, answers, ["B"])) == {"B"}
    assert ability_truth(irf, [Response(item_id="zz", correct=True)]) == {}  # items the model does not list: no truth
    many = ability_truths(irf, [answers, answers[:1]], [None, ["A"]])
    assert set(many[0]) == {"A", "B"} and set(many[1]) == {"A"}
    assert restrict(many, [{"A": 0.5}, {}]) == [{"A": many[0]["A"]}, {}]


def test_only_a_trained_model_changes_the_scale() -> None:
    assert trained_scale(_irf([0.0]))
    assert not trained_scale(_irf([0.0], alpha=1.0, basis="untrained"))
