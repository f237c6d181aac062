"""The privacy frontier: every point present, utility rises with ε, post-processing wins at small ε, files written."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from diagnosis.posterior import BetaPrior, posterior_aggregate
from qmatrix.catalog import load_dataset
from evaluation.frontier import (
    POSTPROCESSING,
    FrontierResult,
    FrontierSettings,
    posterior_means,
    postprocessing_verdicts,
    privacy_frontier,
    progress_total,
    recommend_default,
    write_frontier_report,
)
from evaluation.simulation import simulate
from privacy import make_rng
from privacy.registry import mechanism_for_request
from providers.simulated import simulated_family

EPSILONS = (0.5, 32.0)
MECHANISMS = ("laplace", "piecewise")


@pytest.fixture(scope="module")
def frontier() -> tuple[FrontierResult, int, int]:
    synthetic = load_dataset("synthetic", synthetic_students=120, seed=0)  # SIMULATED DINA on the example Q-matrix
    sim = simulate(synthetic.qmatrix, generator="dina", n_students=120, seed=1)  # with the oracle
    datasets = [synthetic, sim]
    calls: list[int] = []
    plan = FrontierSettings(epsilons=EPSILONS, mechanisms=MECHANISMS, seed=0, repeats=2)
    result = asyncio.run(privacy_frontier(datasets, simulated_family(0), plan, progress=calls.append))
    expected = progress_total(datasets, n_epsilons=len(EPSILONS), n_mechanisms=len(MECHANISMS), repeats=2, seed=0)
    return result, sum(calls), expected


def test_every_point_is_there(frontier: tuple[FrontierResult, int, int]) -> None:
    result, _, _ = frontier
    assert len(result.datasets) == 2 and len({d.name for d in result.datasets}) == 2  # same-named datasets kept apart
    for d in result.datasets:
        keys = {(p.mechanism, p.epsilon, p.postprocessing) for p in d.points}
        expected = {(m, e, k) for m in MECHANISMS for e in EPSILONS for k in POSTPROCESSING} | {("none", None, k) for k in POSTPROCESSING}
        assert keys == expected and len(d.points) == len(expected)
        for p in d.points:
            assert p.mae is not None and 0 <= p.mae <= 1 and p.n_mae > 0
            assert p.auc is not None and 0 <= p.auc <= 1 and p.n_auc > 0
            assert p.true_mae is not None  # both datasets are simulated: true mastery known
            assert (p.mae_diff is None) == (p.postprocessing == "mean")
        assert d.references["constant"]["mae"] is not None and d.references["constant"]["auc"] is not None
    assert "oracle" in result.datasets[1].references and "oracle" not in result.datasets[0].references


def test_progress_is_counted_exactly(frontier: tuple[FrontierResult, int, int]) -> None:
    _, reported, expected = frontier
    assert reported == expected


def test_entities_answer_each_prompt_once(frontier: tuple[FrontierResult, int, int]) -> None:
    result, _, _ = frontier
    for d in result.datasets:
        # one prompt per student and protocol (all responses; the observed 80 %) — not per setting or noise draw;
        # students with identical responses share a prompt, hence ≤
        prompts = 2 * (d.split["validation"] + d.split["test"])
        assert all(prompts * 0.8 <= calls <= prompts for calls in d.entity_calls.values()), d.entity_calls


def test_mae_falls_from_small_to_large_epsilon(frontier: tuple[FrontierResult, int, int]) -> None:
    result, _, _ = frontier
    small, large = EPSILONS
    for d in result.datasets:
        at = {e: np.mean([result.point(d.name, m, e, k).mae for m in MECHANISMS for k in POSTPROCESSING]) for e in EPSILONS}
        assert at[large] < at[small]
        for m in MECHANISMS:
            assert result.point(d.name, m, large, "mean").mae < result.point(d.name, m, small, "mean").mae


def test_posterior_beats_the_plain_mean_at_small_epsilon(frontier: tuple[FrontierResult, int, int]) -> None:
    result, _, _ = frontier
    small = EPSILONS[0]
    for d in result.datasets:
        for m in MECHANISMS:
            mean, post = result.point(d.name, m, small, "mean"), result.point(d.name, m, small, "posterior")
            assert post.mae <= mean.mae
            assert post.mae_diff == pytest.approx(post.mae - mean.mae)
            assert post.mae_diff_se is not None and post.mae_diff_se > 0
            # at ε = 0.5 (Δ = K) the reports say almost nothing: the posterior sits near the prior's mean
            assert abs(post.mae - d.references["prior_mean"]["mae"]) < 0.05


def test_verdicts_and_recommendation(frontier: tuple[FrontierResult, int, int]) -> None:
    result, _, _ = frontier
    verdicts = postprocessing_verdicts(result)
    assert len(verdicts) == len(result.datasets) * (len(MECHANISMS) * len(EPSILONS) + 1)
    assert all(v["mae_verdict"] in ("better", "tie", "worse") for v in verdicts)
    rec = recommend_default(result)
    assert rec.mechanism in MECHANISMS and rec.epsilon in EPSILONS and rec.rule
    assert set(rec.best_by_epsilon) == {f"{e:g}" for e in EPSILONS}
    assert set(rec.per_dataset) == {d.name for d in result.datasets}
    # a lower bar is reached no later; an unreachable bar falls back to the largest ε
    assert recommend_default(result, min_recovered=-100.0).epsilon <= rec.epsilon
    assert recommend_default(result, min_recovered=100.0).epsilon == EPSILONS[-1]
    # at the chosen ε the mechanism is the one whose posterior predicts held-out responses best (mean AUC rank over
    # every dataset), recomputed here from the points
    def auc(name: str, mechanism: str) -> float:
        value = result.point(name, mechanism, rec.epsilon, "posterior").auc
        return -1.0 if value is None or np.isnan(value) else value

    ranks = {m: np.mean([sorted(MECHANISMS, key=lambda k: -auc(d.name, k)).index(m) for d in result.datasets])
             for m in MECHANISMS}
    assert ranks[rec.mechanism] == min(ranks.values())


def test_report_files(frontier: tuple[FrontierResult, int, int], tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    result, _, _ = frontier
    paths = write_frontier_report(result, tmp_path / "frontier", command="fedcd evaluate --privacy-frontier --out X", python_command="python -c ...")
    names = {p.name for p in paths}
    assert {"frontier.json", "report.md", "frontier_mae.png", "frontier_auc.png", "frontier_true_mae.png"} <= names
    data = json.loads((tmp_path / "frontier" / "frontier.json").read_text())
    assert len(data["datasets"]) == 2 and len(data["datasets"][0]["points"]) == 3 * (len(MECHANISMS) * len(EPSILONS) + 1)
    assert data["recommendation"]["mechanism"] in MECHANISMS and data["simulated_entities"] == list(simulated_family(0))
    text = (tmp_path / "frontier" / "report.md").read_text()
    assert "SIMULATED entities" in text and "fedcd evaluate --privacy-frontier --out X" in text and "Recommended default" in text
    assert "Does post-processing beat the plain mean?" in text
    for p in paths:
        if p.suffix == ".png":
            assert p.stat().st_size > 10_000
            image = mpimg.imread(p)
            assert image.ndim == 3 and float(np.std(image)) > 0.01  # not blank


def test_vectorized_posterior_matches_posterior_aggregate() -> None:
    rng = make_rng(3)
    concepts = ["a", "b", "c"]
    entities = ["e1", "e2"]
    priors = {"a": BetaPrior(2, 3), "b": BetaPrior(0.5, 0.5)}
    taus = {"e1": 0.1, "e2": 0.25}
    for name in ("laplace", "piecewise", "duchi", "gaussian"):
        mech = mechanism_for_request(name=name, epsilon=4.0, mode="paper", n_concepts_total=3, n_concepts_assessed=3)
        preds = [{e: mech.privatize({c: float(rng.random()) for c in concepts}, rng) for e in entities} for _ in range(4)]
        preds[1]["e2"].pop("c")  # a missing report
        fast = posterior_means(preds, [concepts] * 4, [mech] * 4, entities, priors, taus)
        for p, got in zip(preds, fast):
            slow = posterior_aggregate(p, concepts, mech, priors, taus).mastery
            assert got == pytest.approx(slow, abs=1e-12)


def test_bad_arguments() -> None:
    data = [load_dataset("synthetic", synthetic_students=20, seed=0)]
    family = simulated_family(0)
    with pytest.raises(ValueError, match="unknown mechanisms"):
        asyncio.run(privacy_frontier(data, family, FrontierSettings(mechanisms=("laplace", "magic"))))
    with pytest.raises(ValueError, match="epsilons"):
        asyncio.run(privacy_frontier(data, family, FrontierSettings(epsilons=(0.0,))))
    with pytest.raises(ValueError, match="epsilons"):
        asyncio.run(privacy_frontier(data, family, FrontierSettings(epsilons=(math.inf,))))
    with pytest.raises(ValueError, match="repeats"):
        asyncio.run(privacy_frontier(data, family, FrontierSettings(repeats=0)))
    with pytest.raises(ValueError, match="dataset"):
        asyncio.run(privacy_frontier([], family))
    with pytest.raises(ValueError, match="entity"):
        asyncio.run(privacy_frontier(data, {}))
