"""Adaptive item selection's criteria (issue 34): ``width`` (the default: the expected narrowing of the targeted
concepts' intervals in mastery space) against ``entropy`` (their Gaussian entropy drop), on constructed banks whose
answers are known."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.special import expit

from diagnosis.next_items import CRITERIA, Posterior, SelectionRule, select
from providers.item_response import items_to_forecast
from providers.local_fed import untrained_model
from providers.serving_bank import ServingBank, serving_bank
from qmatrix import Item, QMatrix

_Z90 = 1.6448536269514722  # the 90 % credible level's z


def _bank(q: QMatrix) -> ServingBank:
    untrained = untrained_model(tuple(q.concepts))
    return serving_bank(untrained, items_to_forecast(q), untrained=untrained)  # type: ignore[arg-type]


def _two_concept_bank() -> tuple[ServingBank, Posterior]:
    """Concept ``a`` at θ̂ = 0 with variance 1 (mastery interval ≈ 0.68 wide), concept ``b`` at θ̂ = 3 with variance
    1.2 (mastery ≈ 0.95, interval ≈ 0.23 wide: σ is flat there). Item ``ia`` reads ``a``, ``ib`` reads ``b``; ``ib``'s
    intercept puts its η at 0 for this student, so both items carry the same information and ``ib``'s relative
    variance drop is the larger (its prior variance is)."""
    q = QMatrix(id="two", concepts=("a", "b"), items=(Item("ia", ("a",)), Item("ib", ("b",))))
    bank = _bank(q)
    theta_b = 3.0
    intercept = bank.intercept.copy()
    intercept[1] = -bank.alpha[1] * theta_b
    bank = dataclasses.replace(bank, intercept=intercept)
    return bank, Posterior(theta=np.array([0.0, theta_b]), cov=np.diag([1.0, 1.2]))


def test_width_asks_for_the_concept_widest_in_mastery_space_where_entropy_does_not() -> None:
    bank, post = _two_concept_bank()
    pick = {c: select(bank, post, candidates=np.arange(2), targets=["a", "b"], count=1,
                      rule=SelectionRule(criterion=c)).picks[0] for c in CRITERIA}
    assert bank.item_ids[pick["width"].position] == "ia"  # narrows the wide mastery interval
    assert bank.item_ids[pick["entropy"].position] == "ib"  # the larger relative drop, on an already narrow interval
    default = select(bank, post, candidates=np.arange(2), targets=["a", "b"], count=1).picks[0]
    assert bank.item_ids[default.position] == "ia"  # the service's default is width


def test_narrowing_is_the_expected_width_after_the_answer() -> None:
    # Known answer: one concept, θ ~ N(0, 1), an item with c = 0 at θ̂ = 0: information a = α² κ / 4 (κ: the
    # probit factor of var η = α²), so the variance falls from 1 to v = 1/(1 + a); either answer (chance 1/2 each)
    # moves the mode by δ = α/2 · 1/(1 + a) up or down, and the 90 % mastery interval narrows from 2σ(z) − 1 to
    # W(±δ, v) = σ(δ + z√v) − σ(δ − z√v) (the same both ways).
    q = QMatrix(id="one", concepts=("c",), items=(Item("i1", ("c",)),))
    bank = _bank(q)
    alpha = float(bank.alpha[0])
    a = alpha**2 / math.sqrt(1 + math.pi / 8 * alpha**2) * 0.25
    post = Posterior(theta=np.zeros(1), cov=np.ones((1, 1)))
    pick = select(bank, post, candidates=np.asarray([0]), targets=["c"], count=1).picks[0]
    sd, delta = 1 / math.sqrt(1 + a), alpha / 2 / (1 + a)
    now, after = 2 * expit(_Z90) - 1, expit(delta + _Z90 * sd) - expit(delta - _Z90 * sd)
    assert after < 2 * expit(_Z90 * sd) - 1  # narrower than at the unmoved mode: σ is flatter away from 0
    assert pick.narrowing == pytest.approx(now - after, rel=1e-9)
    assert pick.gain == pytest.approx(0.5 * math.log(1 + a), rel=1e-9)  # the entropy drop is reported as well
    _, _, width_now, width_after = pick.informs[0]
    assert width_now - width_after == pytest.approx(pick.narrowing, rel=1e-9)


def test_min_gain_reads_the_entropy_drop_whichever_criterion_ranks() -> None:
    bank, post = _two_concept_bank()
    gains = sorted(p.gain for p in select(bank, post, candidates=np.arange(2), targets=["a", "b"], count=2,
                                          rule=SelectionRule(criterion="entropy")).picks)
    between = (gains[0] + gains[1]) / 2  # only ib's entropy drop is above it
    for criterion in CRITERIA:
        kept = select(bank, post, candidates=np.arange(2), targets=["a", "b"], count=2,
                      rule=SelectionRule(criterion=criterion, min_gain=between)).picks
        assert [bank.item_ids[p.position] for p in kept] == ["ib"]


def test_an_unknown_criterion_is_refused() -> None:
    with pytest.raises(ValueError, match="criterion"):
        SelectionRule(criterion="kl")  # type: ignore[arg-type]


@pytest.mark.parametrize("criterion", CRITERIA)
def test_the_shortlist_keeps_each_criterions_best(criterion: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import diagnosis.next_items as engine

    rng = np.random.default_rng(5)
    concepts = tuple(f"c{k}" for k in range(10))
    items = tuple(Item(f"i{n}", tuple(sorted({concepts[j] for j in rng.integers(0, 10, size=rng.integers(1, 3))})))
                  for n in range(300))
    bank = _bank(QMatrix(id="large", concepts=concepts, items=items))
    bank = dataclasses.replace(bank, intercept=rng.normal(0, 1, size=300))  # items of unlike difficulty
    answered = rng.choice(300, size=30, replace=False)
    theta = rng.normal(0, 1.5, size=len(concepts))  # some concepts far from 0: narrow in mastery space
    cov = np.diag(rng.uniform(0.2, 1.5, size=len(concepts)))
    post = Posterior(theta=theta, cov=cov)
    candidates = np.setdiff1d(np.arange(300), answered)
    rule = SelectionRule(criterion=criterion)  # type: ignore[arg-type]

    def picks() -> list[int]:
        return [p.position for p in select(bank, post, candidates=candidates, targets=concepts, count=3,
                                           rule=rule).picks]

    shortlisted = picks()
    monkeypatch.setattr(engine, "_SHORTLIST", 10_000)  # every candidate scored exactly
    assert picks() == shortlisted and len(shortlisted) == 3
