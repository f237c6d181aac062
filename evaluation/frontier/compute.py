"""Running the frontier: every (mechanism, ε) setting on one dataset, then on all of them."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evaluation.collect import CollectOptions, Collected, NoiseSetting, collect_predictions
from evaluation.frontier.estimators import (
    assessed_concepts,
    fit_posterior,
    plain_mean,
    posterior_means,
    release_mechanisms,
)
from evaluation.frontier.metrics import (
    abs_errors,
    constant_predictions,
    dina_heldout_oracle,
    heldout_scores,
    HeldoutScores,
    mean_abs_error,
    paired_auc_diff,
    paired_mae_diff,
)
from evaluation.frontier.results import (
    DEFAULT_EPSILONS,
    POSTPROCESSING,
    DatasetFrontier,
    FrontierPoint,
    FrontierResult,
    Mastery,
    Progress,
)
from evaluation.simulation import MAX_ORACLE_CONCEPTS, SimulatedStudents, dataset_and_simulation
from qmatrix.splits import split_holdout, split_students
from qmatrix.truth import proportion_correct_truth
from privacy import DEFAULT_DELTA, MECHANISM_NAMES, Mechanism
from providers import Entity
from qmatrix import Dataset

# --------------------------------------------------------------------------------------------
# The frontier
# --------------------------------------------------------------------------------------------


def _tally(collections: Sequence[Collected], names: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    calls = {n: sum(c.calls.get(n, 0) for c in collections) for n in names}
    failures = {n: sum(c.failures.get(n, 0) for c in collections) for n in names}
    return calls, {n: v for n, v in failures.items() if v}


@dataclass(frozen=True, kw_only=True)
class FrontierSettings:
    """What the frontier sweeps and how: the ε grid and mechanisms (ε = ∞ is always added), the seed of the
    split and of the noise, the sensitivity mode and δ of every release, the noise draws per test row and setting
    (``repeats``), and how many students are diagnosed at once. Checked by :func:`privacy_frontier`."""

    epsilons: Sequence[float] = DEFAULT_EPSILONS
    mechanisms: Sequence[str] = MECHANISM_NAMES
    seed: int = 0
    sensitivity: str = "paper"
    delta: float = DEFAULT_DELTA
    repeats: int = 1
    concurrency: int = 4


async def _dataset_frontier(
    item: Dataset | SimulatedStudents,
    entities: Mapping[str, Entity],
    settings: Sequence[NoiseSetting],
    *,
    seed: int,
    repeats: int,
    options: CollectOptions,
) -> DatasetFrontier:
    start = time.perf_counter()
    dataset, sim = dataset_and_simulation(item)
    q = dataset.qmatrix
    names = list(entities)
    split = split_students(dataset.students, seed=seed)
    n_val, n_test = len(split.validation), len(split.test)
    sensitivity, delta = options.sensitivity, options.delta
    clean = NoiseSetting("laplace", None)

    # Paper protocol: all responses shown; truth = proportion correct of them. Validation students
    # only calibrate the posterior (clean answers); test rows are the test students once per noise draw.
    val = [list(s.responses) for s in split.validation]
    test = [list(s.responses) for s in split.test]
    val_concepts = assessed_concepts(q, val)
    test_concepts = assessed_concepts(q, test) * repeats
    val_truth = [proportion_correct_truth(q, r) for r in val]
    test_truth = [proportion_correct_truth(q, r) for r in test] * repeats
    p_val = await collect_predictions(entities, q, val, [clean], seed=seed, options=options)
    p_test = await collect_predictions(entities, q, test * repeats, settings, seed=seed + 1, options=options)

    # Held-out protocol: 20 % hidden (as the heldout protocol); the link is fitted on validation rows.
    val_obs, val_held = split_holdout(split.validation, seed)
    test_obs, test_held = split_holdout(split.test, seed)
    hval_concepts, htest_concepts = assessed_concepts(q, val_obs), assessed_concepts(q, test_obs)
    hval_truth = [
        {c: v for c, v in proportion_correct_truth(q, list(s.responses)).items() if c in assessed}
        for s, assessed in zip(split.validation, hval_concepts)
    ]
    h_val = await collect_predictions(entities, q, val_obs * repeats, settings, seed=seed + 2, options=options)
    h_test = await collect_predictions(entities, q, test_obs * repeats, settings, seed=seed + 3, options=options)
    hval_rows, htest_rows = hval_concepts * repeats, htest_concepts * repeats
    val_held_rows, test_held_rows = val_held * repeats, test_held * repeats

    fit_paper = fit_posterior(p_val.predictions[clean], val_truth, names)
    fit_held = fit_posterior(h_val.predictions[clean][:n_val], hval_truth, names)
    true_truth: list[Mastery] | None = None
    val_true: list[Mastery] = []
    if dataset.true_mastery:
        true_truth = [{c: dataset.true_mastery[s.student_id][c] for c in cs} for s, cs in zip(split.test, test_concepts)] * repeats
        val_true = [{c: dataset.true_mastery[s.student_id][c] for c in cs} for s, cs in zip(split.validation, val_concepts)]

    rng = np.random.default_rng([seed, 7])
    points: list[FrontierPoint] = []
    for setting in settings:
        mech = setting.mechanism if setting.epsilon is not None else "none"

        def released(concepts: Sequence[Sequence[str]]) -> list[Mechanism]:
            return release_mechanisms(q, concepts, setting, sensitivity=sensitivity, delta=delta)  # noqa: B023

        d_test, d_hval, d_htest = released(test_concepts), released(hval_rows), released(htest_rows)
        pt = p_test.predictions[setting]
        hv, ht = h_val.predictions[setting], h_test.predictions[setting]
        paper_est = {
            "mean": plain_mean(pt, test_concepts),
            "posterior": posterior_means(pt, test_concepts, d_test, names, fit_paper.priors, fit_paper.taus),
            "posterior-uniform": posterior_means(pt, test_concepts, d_test, names, {}, fit_paper.taus),
        }
        held_est = {
            "mean": (plain_mean(hv, hval_rows), plain_mean(ht, htest_rows)),
            "posterior": (
                posterior_means(hv, hval_rows, d_hval, names, fit_held.priors, fit_held.taus),
                posterior_means(ht, htest_rows, d_htest, names, fit_held.priors, fit_held.taus),
            ),
            "posterior-uniform": (
                posterior_means(hv, hval_rows, d_hval, names, {}, fit_held.taus),
                posterior_means(ht, htest_rows, d_htest, names, {}, fit_held.taus),
            ),
        }
        errors = {k: abs_errors(v, test_truth) for k, v in paper_est.items()}
        scores = {k: heldout_scores(v[0], v[1], val_held_rows, test_held_rows, q, n_test) for k, v in held_est.items()}
        for kind in POSTPROCESSING:
            mae_value, n_mae = mean_abs_error(errors[kind])
            s = scores[kind]
            point = FrontierPoint(
                dataset=dataset.name, mechanism=mech, epsilon=setting.epsilon, postprocessing=kind,
                mae=mae_value, n_mae=n_mae, auc=s.auc() if s else None, n_auc=s.n if s else 0,
            )
            if true_truth is not None:
                point.true_mae = mean_abs_error(abs_errors(paper_est[kind], true_truth))[0]
            if kind != "mean":
                point.mae_diff, point.mae_diff_se = paired_mae_diff(errors[kind], errors["mean"], n_test)
                if s is not None and scores["mean"] is not None:
                    point.auc_diff, point.auc_diff_se = paired_auc_diff(s, scores["mean"], rng)
            points.append(point)

    # References: the constant predictor (and the oracle for DINA-simulated data).
    references: dict[str, dict[str, float | None]] = {}
    test_concepts1 = test_concepts[:n_test]
    const_scores = heldout_scores(constant_predictions(hval_truth, hval_concepts), constant_predictions(hval_truth, htest_concepts), val_held, test_held, q, n_test)
    references["constant"] = {
        "mae": mean_abs_error(abs_errors(constant_predictions(val_truth, test_concepts1), test_truth[:n_test]))[0],
        "auc": const_scores.auc() if const_scores else None,
        "true_mae": mean_abs_error(abs_errors(constant_predictions(val_true, test_concepts1), true_truth[:n_test]))[0] if true_truth is not None else None,
    }
    # The posterior's own ε → 0 limit: every student gets the fitted prior's mean (uniform: ½).
    prior_paper = [fit_paper.prior_means(cs) for cs in test_concepts1]
    prior_scores = heldout_scores([fit_held.prior_means(cs) for cs in hval_concepts], [fit_held.prior_means(cs) for cs in htest_concepts],
                                   val_held, test_held, q, n_test)
    references["prior_mean"] = {
        "mae": mean_abs_error(abs_errors(prior_paper, test_truth[:n_test]))[0],
        "auc": prior_scores.auc() if prior_scores else None,
        "true_mae": mean_abs_error(abs_errors(prior_paper, true_truth[:n_test]))[0] if true_truth is not None else None,
    }
    notes: list[str] = []
    if sim is not None and sim.generator == "dina" and len(q.concepts) <= MAX_ORACLE_CONCEPTS and true_truth is not None:
        oracle_est = [{c: sim.oracle[s.student_id][c] for c in cs} for s, cs in zip(split.test, test_concepts1)]
        oracle_held = dina_heldout_oracle(q, test_obs, test_held)
        references["oracle"] = {
            "mae": None,
            "auc": HeldoutScores(oracle_held, [np.array([r.score for r in h]) for h in test_held], n_test).auc(),
            "true_mae": mean_abs_error(abs_errors(oracle_est, true_truth[:n_test]))[0],
        }
        notes.append("oracle: the posterior under the true DINA parameters (slip, guess, mastery rate ½) — "
                     "true-mastery MAE from all responses, held-out AUC from the observed ones; no paper-protocol MAE "
                     "(that truth is a function of the prompt: proportion correct scores 0)")
    calls, failures = _tally([p_val, p_test, h_val, h_test], names)
    return DatasetFrontier(
        name=dataset.name,
        simulated_data=dataset.simulated,
        n_students=len(dataset.students),
        n_concepts=len(q.concepts),
        mean_assessed_concepts=float(np.mean([len(c) for c in test_concepts1])) if test_concepts1 else 0.0,
        split={"train (unused)": len(split.train), "validation": n_val, "test": n_test},
        points=points,
        references=references,
        posterior_fit={"paper": fit_paper.to_json(), "heldout": fit_held.to_json()},
        entity_calls=calls,
        entity_failures=failures,
        notes=notes,
        seconds=time.perf_counter() - start,
    )


async def privacy_frontier(
    datasets: Sequence[Dataset | SimulatedStudents],
    entities: Mapping[str, Entity],
    plan: FrontierSettings | None = None,
    *,
    progress: Progress | None = None,
) -> FrontierResult:
    """MAE (paper protocol) and held-out AUC for every (dataset, mechanism, ε, post-processing), plus ε = ∞.

    ``datasets``: :class:`Dataset` objects, or :class:`SimulatedStudents` (then the oracle is a
    reference too). ``plan.repeats``: independent noise draws per test (and held-out validation) student
    and setting, averaged — the entities still answer each prompt once (cached beneath the privacy
    wrapper). ``progress`` is called with 1 per diagnosed row per setting (:func:`progress_total`).
    """
    cfg = plan or FrontierSettings()
    epsilons, mechanisms, seed, repeats = cfg.epsilons, cfg.mechanisms, cfg.seed, cfg.repeats
    if not datasets:
        raise ValueError("the frontier needs at least one dataset")
    if not entities:
        raise ValueError("the frontier needs at least one entity")
    unknown = [m for m in mechanisms if m not in MECHANISM_NAMES]
    if unknown:
        raise ValueError(f"unknown mechanisms {unknown} (use {', '.join(MECHANISM_NAMES)})")
    eps = sorted({float(e) for e in epsilons})
    if not eps or any(not (math.isfinite(e) and e > 0) for e in eps):
        raise ValueError(f"epsilons must be finite numbers > 0, got {list(epsilons)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    start = time.perf_counter()
    settings = [NoiseSetting("laplace", None), *(NoiseSetting(m, e) for m in mechanisms for e in eps)]
    frontiers: list[DatasetFrontier] = []
    options = CollectOptions(sensitivity=cfg.sensitivity, delta=cfg.delta, concurrency=cfg.concurrency,
                             on_progress=progress)
    for item in datasets:
        frontier = await _dataset_frontier(item, entities, settings, seed=seed, repeats=repeats, options=options)
        taken = {f.name for f in frontiers}
        if frontier.name in taken:  # two datasets of one name: keep their points apart
            label = next(f"{frontier.name} #{i}" for i in range(2, len(frontiers) + 2) if f"{frontier.name} #{i}" not in taken)
            frontier.name = label
            for p in frontier.points:
                p.dataset = label
        frontiers.append(frontier)
    return FrontierResult(
        datasets=frontiers, epsilons=eps, mechanisms=list(mechanisms), entities=list(entities), seed=seed,
        sensitivity=cfg.sensitivity, delta=cfg.delta, repeats=repeats, seconds=time.perf_counter() - start,
    )
