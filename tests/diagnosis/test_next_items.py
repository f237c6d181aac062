"""Adaptive item selection's engine (issue 34): the posterior it reads, the criterion's known answers, greedy lists,
randomesque exposure control and the stopping signal. Banks are read from the untrained evidence model and from a
model trained on SIMULATED students (the default model)."""

from __future__ import annotations

import math
import numpy as np
import pytest

from diagnosis.next_items import (
    Posterior,
    SelectionRule,
    concept_states,
    fold_in_mode,
    posterior,
    predictive_mode,
    select,
)
from federated import default_model_if_missing
from federated.registry import LoadedModel, ModelRegistry
from providers.item_response import items_to_forecast
from providers.local_fed import untrained_model
from providers.serving_bank import ServingBank, serving_bank
from qmatrix import Item, QMatrix
from qmatrix.example import example_qmatrix

Q = example_qmatrix()


def _bank(q: QMatrix = Q, loaded: object | None = None) -> ServingBank:
    untrained = untrained_model(tuple(q.concepts))
    items = items_to_forecast(q)
    return serving_bank(loaded or untrained, items, untrained=untrained)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    folder = tmp_path_factory.mktemp("registry")
    assert default_model_if_missing(folder, threads=1) is not None
    return ModelRegistry(folder).load(qmatrix_id=Q.id)


@pytest.fixture(scope="module")
def trained(loaded: LoadedModel) -> ServingBank:
    return _bank(Q, loaded)


def _all_but(bank: ServingBank, answered: list[str]) -> np.ndarray:
    return np.setdiff1d(np.arange(len(bank.item_ids)), bank.positions(answered))


def test_no_response_is_the_prior_and_answers_narrow_the_interval() -> None:
    bank = _bank()
    prior = posterior(bank, [], [])
    np.testing.assert_allclose(prior.cov, bank.prior_cov)
    after = posterior(bank, bank.positions(["q01", "q02"]).tolist(), [1.0, 1.0])
    concept = Q.item("q01").concepts[0]
    k = bank.concepts.index(concept)
    assert after.cov[k, k] < prior.cov[k, k]
    assert after.theta[k] > prior.theta[k]  # two correct answers raise that ability
    state = {s.concept: s for s in concept_states(bank, after)}[concept]
    assert 0 < state.interval[0] < state.mastery < state.interval[1] < 1


def test_the_score_is_the_exact_entropy_drop_of_a_rank_one_update() -> None:
    # Known answer: one concept, θ ~ N(0, 1), an item with c = 0 at θ̂ = 0: information a = α² κ p(1−p) with
    # p = 1/2 and κ = 1/sqrt(1 + π/8 · var η), var η = α², so the variance falls from 1 to 1/(1 + a).
    q = QMatrix(id="one", concepts=("c",), items=(Item("i1", ("c",)), Item("i2", ("c",))))
    bank = _bank(q)
    alpha = float(bank.alpha[0])
    assert bank.intercept[0] == 0
    post = Posterior(theta=np.zeros(1), cov=np.ones((1, 1)))
    chosen = select(bank, post, candidates=np.asarray([0]), targets=["c"], count=1)
    kappa = 1 / math.sqrt(1 + math.pi / 8 * alpha**2)
    a = alpha**2 * kappa * 0.25
    assert chosen.picks[0].gain == pytest.approx(0.5 * math.log(1 + a), rel=1e-9)
    concept, reduction, now, after = chosen.picks[0].informs[0]
    assert concept == "c" and reduction == pytest.approx(chosen.picks[0].gain) and after < now


def test_the_mode_is_the_served_models_fold_in(trained: ServingBank, loaded: LoadedModel) -> None:
    import torch

    answered = ["q01", "q02", "q05", "q07", "q09", "q11"]
    scores = [1.0, 0.0, 1.0, 0.5, 0.0, 1.0]
    feats = torch.from_numpy(np.stack([loaded.model.item_row(i, Q.item(i).concepts) for i in answered])).float()
    y = torch.tensor([scores])
    with torch.no_grad():
        theta, _ = loaded.model.posterior(feats.unsqueeze(0), y, torch.ones_like(y, dtype=torch.bool))
    ours = posterior(trained, trained.positions(answered).tolist(), scores).theta
    np.testing.assert_allclose(ours, theta.reshape(-1).double().numpy(), atol=2e-3)


def test_the_predictive_mode_is_the_mode_of_the_model_that_predicts(trained: ServingBank) -> None:
    # Prepare: answers on items reading one, two and three concepts (q06, q11, q12)
    answered = ["q01", "q02", "q05", "q06", "q11", "q12"]
    rows, y = trained.positions(answered), np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5])
    # Execute
    theta = predictive_mode(trained, rows, y)
    # Assert: the gradient of Σ log-likelihood + log prior vanishes, Σ_i α_i (y_i − p_i) w_i = Σ⁻¹ (θ − μ)
    alpha, idx, w = trained.alpha[rows], trained.index[rows], trained.weight[rows]
    p = 1 / (1 + np.exp(-(alpha * (w * theta[idx]).sum(-1) + trained.intercept[rows])))
    score = np.zeros_like(theta)
    np.add.at(score, idx, (alpha * (y - p))[:, None] * w)
    prior_precision: np.ndarray = trained.prior_precision  # type: ignore[attr-defined]
    np.testing.assert_allclose(score, prior_precision @ (theta - trained.prior_mean), atol=1e-7)
    # an item reading several concepts is one answer here, split between them in the fold-in: other modes
    assert not np.allclose(theta, fold_in_mode(trained, rows, y), atol=1e-3)
    # with items reading one concept each, the two likelihoods are one: the same mode
    single = trained.positions(["q01", "q02", "q05"])
    np.testing.assert_allclose(predictive_mode(trained, single, y[:3]), fold_in_mode(trained, single, y[:3]), atol=1e-7)
    assert np.array_equal(predictive_mode(trained, single[:0], y[:0]), trained.prior_mean)


def test_an_uninformative_item_scores_low_and_a_target_picks_its_concept(trained: ServingBank) -> None:
    post = posterior(trained, [], [])
    for concept in Q.concepts:
        chosen = select(trained, post, candidates=_all_but(trained, []), targets=[concept], count=1)
        assert concept in trained.item_concepts[chosen.picks[0].position]  # its own items inform it most
        assert chosen.picks[0].informs[0][0] == concept


def test_a_list_does_not_ask_the_same_concept_twice_when_others_are_open() -> None:
    bank = _bank()
    post = posterior(bank, [], [])
    chosen = select(bank, post, candidates=_all_but(bank, []), targets=list(Q.concepts), count=4)
    assert len(chosen.picks) == 4 and len({p.position for p in chosen.picks}) == 4
    first = [bank.item_concepts[p.position] for p in chosen.picks]
    assert len(set(first)) == 4, first  # greedy update: the second pick goes elsewhere
    assert all(a.gain >= b.gain - 1e-9 for a, b in zip(chosen.picks, chosen.picks[1:]))


def test_randomesque_spreads_the_first_item_and_one_switches_it_off(trained: ServingBank) -> None:
    post = posterior(trained, [], [])
    candidates = _all_but(trained, [])
    best = {select(trained, post, candidates=candidates, targets=list(Q.concepts), count=1,
                   rng=np.random.default_rng(s)).picks[0].position for s in range(20)}
    spread = {select(trained, post, candidates=candidates, targets=list(Q.concepts), count=1, rule=SelectionRule(randomesque=4),
                     rng=np.random.default_rng(s)).picks[0].position for s in range(20)}
    assert len(best) == 1 and len(spread) > 1 and best <= spread


def test_stopping_signals() -> None:
    bank = _bank()
    post = posterior(bank, [], [])
    candidates = _all_but(bank, [])
    assert select(bank, post, candidates=candidates, targets=list(Q.concepts), count=2,
                  rule=SelectionRule(target_width=0.999)).stop_reason == "target_width_reached"
    assert select(bank, post, candidates=np.asarray([], dtype=np.int64), targets=list(Q.concepts),
                  count=1).stop_reason == "no_items_left"
    nothing = select(bank, post, candidates=candidates, targets=list(Q.concepts), count=1, rule=SelectionRule(min_gain=5.0))
    assert nothing.picks == [] and nothing.stop_reason == "nothing_worth_asking"
    wide = select(bank, post, candidates=candidates, targets=list(Q.concepts), count=1, rule=SelectionRule(target_width=0.05))
    assert wide.stop_reason is None and wide.picks


def test_only_open_targets_count(trained: ServingBank) -> None:
    answered = ["q01", "q02", "q03", "q04"]
    post = posterior(trained, trained.positions(answered).tolist(), [1.0, 0.0, 1.0, 1.0])
    widths = {s.concept: s.width for s in concept_states(trained, post)}
    narrow = min(widths, key=widths.__getitem__)
    cut = (widths[narrow] + sorted(widths.values())[1]) / 2
    chosen = select(trained, post, candidates=_all_but(trained, answered), targets=list(Q.concepts), count=3,
                    rule=SelectionRule(target_width=cut))
    assert all(narrow not in [c for c, *_ in p.informs] for p in chosen.picks)


def test_bad_arguments_are_refused() -> None:
    bank = _bank()
    with pytest.raises(ValueError):
        select(bank, posterior(bank, [], []), candidates=np.arange(3), targets=list(Q.concepts), count=0)


def test_a_one_factor_model_reads_every_concept_from_one_ability() -> None:
    from federated.irt2pl import IRT2PL

    loaded = LoadedModel(version="v0001", model=IRT2PL(tuple(Q.concepts)), manifest={"items": {}},
                         signature_verified=True)
    bank = _bank(Q, loaded)
    assert bank.index.shape[1] == 1 and set(bank.dim_of.tolist()) == {0}
    post = posterior(bank, bank.positions(["q01"]).tolist(), [1.0])
    chosen = select(bank, post, candidates=_all_but(bank, ["q01"]), targets=list(Q.concepts), count=2)
    assert len(chosen.picks) == 2


def test_the_shortlist_against_a_large_bank_picks_what_scoring_every_item_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    import diagnosis.next_items as engine

    rng = np.random.default_rng(3)
    concepts = tuple(f"c{k}" for k in range(12))
    items = tuple(Item(f"i{n}", tuple(sorted({concepts[j] for j in rng.integers(0, 12, size=rng.integers(1, 4))})))
                  for n in range(400))
    bank = _bank(QMatrix(id="large", concepts=concepts, items=items))
    answered = rng.choice(400, size=25, replace=False)
    post = posterior(bank, answered.tolist(), rng.integers(0, 2, size=25).astype(float).tolist())
    candidates = np.setdiff1d(np.arange(400), answered)

    def picks() -> list[tuple[tuple[str, ...], float]]:  # items with one Q-row tie (untrained: α, c alike)
        chosen = select(bank, post, candidates=candidates, targets=concepts[:6], count=4)
        return [(bank.item_concepts[p.position], round(p.gain, 9)) for p in chosen.picks]

    shortlisted = picks()
    monkeypatch.setattr(engine, "_SHORTLIST", 10_000)  # every candidate scored exactly
    assert picks() == shortlisted and len(shortlisted) == 4
