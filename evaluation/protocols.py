"""The three evaluation protocols. Students are split train / validation / test (seeded);
calibrations and links are fitted on validation; every number is reported on test.

* ``paper`` — truth y_k = the student's proportion correct on items requiring k, computed
  from the very responses the entities see (so ``proportion-correct`` scores MAE 0: it
  *is* the truth). MAE and RMSE as the paper's formulas (7)–(8).
* ``heldout`` — 20 % of each student's responses are hidden (seeded); the diagnosis uses
  the rest and must predict the hidden ones (:mod:`evaluation.heldout`): AUC, ACC, RMSE, ECE
  (15 bins), and a paired bootstrap of ``served`` against each baseline.
* ``simulated`` — SIMULATED students (DINA and IRT generators) on the dataset's real
  Q-matrix, with known mastery: MAE and attribute-wise accuracy against it, next to the
  oracle posterior under the true parameters.

With a :class:`~evaluation.served.ServedConfig` the held-out and simulated protocols add the
``served`` rows, and ``local-fed`` (trained on the train split) joins the federation for every row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from evaluation.harness import (
    EvaluationConfig,
    Federation,
    Mastery,
    assessed,
    baseline_mastery,
    baselines,
    collect,
    federation,
    fill_uncovered,
    served_setting,
)
from evaluation.heldout import heldout_protocol
from evaluation.metrics import accuracy, mae, rmse
from evaluation.results import EvaluationResult, Row
from evaluation.rows import federation_estimates, single_estimates
from evaluation.served import ServedRowSource, ServedValidation, local_fed_folder, served_estimates
from evaluation.simulation import simulate
from qmatrix.splits import split_students
from qmatrix.truth import proportion_correct_truth
from providers import Entity
from qmatrix import Dataset, StudentResponses

__all__ = ["PROTOCOLS", "EvaluationConfig", "evaluate"]  # EvaluationConfig: defined in evaluation.harness

PROTOCOLS = ("paper", "heldout", "simulated")
Progress = Callable[[int], None]


def _pairs(estimates: Sequence[Mastery], truths: Sequence[Mastery]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    pred, true, concepts = [], [], []
    for est, truth in zip(estimates, truths):
        for concept, value in truth.items():
            if concept in est:
                pred.append(est[concept])
                true.append(value)
                concepts.append(concept)
    return np.array(pred), np.array(true), concepts


def _mastery_row(name: str, eps: float | None, est: Sequence[Mastery], truths: Sequence[Mastery], result: EvaluationResult,
                 *, mechanism: str = "none", generator: str | None = None, filled: int = 0) -> Row:
    """One row scored against ``truths``; with a ``generator`` (SIMULATED truth) also the attribute-wise accuracy at
    0.5, which the paper protocol's proportion-correct truth has no use for."""
    pred, true, concepts = _pairs(est, truths)
    key = f"{name}@{'inf' if eps is None else f'{eps:g}'}" + (f"[{generator}]" if generator else "")
    result.per_concept_error[key] = {
        c: float(np.mean(np.abs(pred[[i for i, x in enumerate(concepts) if x == c]] - true[[i for i, x in enumerate(concepts) if x == c]])))
        for c in dict.fromkeys(concepts)
    }
    return Row(
        name=name, epsilon=eps, mae=mae(pred, true), rmse=rmse(pred, true), n=int(pred.size), mechanism=mechanism,
        acc=accuracy(pred, true) if generator is not None else None, generator=generator, filled=filled,
    )


async def _paper(dataset: Dataset, fed: Federation, result: EvaluationResult, config: EvaluationConfig, *, split,  # type: ignore[no-untyped-def]
                 progress: Progress | None) -> None:
    q, epsilons = dataset.qmatrix, config.epsilons
    val = [list(s.responses) for s in split.validation]
    test = [list(s.responses) for s in split.test]
    result.split = {"train": len(split.train), "validation": len(val), "test": len(test)}
    val_truth = [proportion_correct_truth(q, r) for r in val]
    test_truth = [proportion_correct_truth(q, r) for r in test]
    val_c, test_c, result.entity_failures = await collect(fed, q, val, test, epsilons, seed=config.seed,
                                                          options=config.collect_options(progress))
    for est in federation_estimates(val_c, test_c, val_truths=val_truth, val_concepts=assessed(q, val), test_concepts=assessed(q, test), entity_names=list(fed.entities), epsilons=epsilons, method=result.method):
        result.rows.append(_mastery_row(est.name, est.epsilon, est.test, test_truth, result, mechanism=est.mechanism))
        if est.name.startswith("single:") and est.epsilon is None:
            pred, true, _ = _pairs(est.test, test_truth)
            result.reliability[est.name.removeprefix("single:")] = list(zip(pred.tolist(), true.tolist()))
    for name, model in baselines(split.train, q, config.ncdm).items():
        result.rows.append(_mastery_row(name, None, baseline_mastery(model, test, q), test_truth, result))
    result.notes.append("paper protocol: the truth is the proportion correct of the responses the entities are shown, "
                        "so 'proportion-correct' reproduces it exactly (MAE 0) and measures nothing but that identity")


async def _simulated(dataset: Dataset, entities: Mapping[str, Entity], result: EvaluationResult,
                     config: EvaluationConfig, *, folder: Path, progress: Progress | None) -> None:
    q, served, epsilons = dataset.qmatrix, config.served, config.epsilons
    result.simulated_data = True
    calls: dict[str, int] = {}
    for generator in ("dina", "irt"):
        sim = simulate(q, generator=generator, n_students=config.n_simulated, seed=result.seed)
        split = split_students(sim.dataset.students, seed=result.seed)
        val = [list(s.responses) for s in split.validation]
        test = [list(s.responses) for s in split.test]
        result.split = {"train": len(split.train), "validation": len(val), "test": len(test)}
        truth = sim.dataset.true_mastery

        def restrict(students: Sequence[StudentResponses], source: Mapping[str, Mastery]) -> list[Mastery]:
            return [{c: source[s.student_id][c] for c in q.concepts_for(s.item_ids())} for s in students]

        val_truth, test_truth = restrict(split.validation, truth), restrict(split.test, truth)
        fed = federation(entities, split.train, q, simulated=True, served=served, seed=result.seed, folder=folder / generator)
        if fed.local_fed:
            result.served.setdefault("local_fed", {})[generator] = fed.local_fed
        val_c, test_c, failures = await collect(fed, q, val, test, epsilons, seed=result.seed,
                                                options=config.collect_options(progress), extra=served_setting(served))
        estimates = federation_estimates(val_c, test_c, val_truths=val_truth, val_concepts=assessed(q, val), test_concepts=assessed(q, test), entity_names=list(fed.entities), epsilons=epsilons, method=result.method)
        for setting in served_setting(served):
            estimates += single_estimates(val_c, test_c, entity_names=list(fed.entities), setting=setting)
        if served is not None:
            run = await served_estimates(fed.entities, q, validation=ServedValidation(val, val_truth), test=test,
                                         config=served, seed=result.seed, concurrency=config.concurrency)
            estimates += run.estimates
            result.served.setdefault("calibrations", {})[generator] = run.calibrations
        for n, c in fed.calls().items():
            calls[n] = calls.get(n, 0) + c
        for n, c in failures.items():
            result.entity_failures[n] = result.entity_failures.get(n, 0) + c
        needed = [list(t) for t in test_truth]
        for est in estimates:
            filled_est, filled = fill_uncovered(est.test, needed, est.validation)
            result.rows.append(_mastery_row(est.name, est.epsilon, filled_est, test_truth, result, mechanism=est.mechanism, generator=generator, filled=filled))
        for name, model in baselines(split.train, q, config.ncdm).items():
            result.rows.append(_mastery_row(name, None, baseline_mastery(model, test, q), test_truth, result, generator=generator))
            if name == "ncdm":
                result.baselines["ncdm"] = model.describe()  # type: ignore[attr-defined]
        result.rows.append(_mastery_row("oracle", None, restrict(split.test, sim.oracle), test_truth, result, generator=generator))
    result.entity_calls = calls
    result.notes.append("simulated protocol: SIMULATED students on the real Q-matrix; 'acc' is attribute-wise recovery "
                        "accuracy at 0.5 (a true mastery y counts as y mastered and 1 − y not, so IRT's continuous "
                        "truth is scored by the same rule as binary DINA truth); 'oracle' is the posterior under the "
                        "true generating parameters (the ceiling)")


async def evaluate(
    dataset: Dataset,
    entities: Mapping[str, Entity],
    config: EvaluationConfig,
    *,
    progress: Progress | None = None,
    served_via: ServedRowSource | None = None,
) -> EvaluationResult:
    """Run one protocol as ``config`` says (:class:`EvaluationConfig`). ``served_via`` (held-out protocol): one
    more served row, measured through a running gateway (``evaluation.served_api``)."""
    protocol, seed, served = config.protocol, config.seed, config.served
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (use {', '.join(PROTOCOLS)})")
    if not entities and (served is None or served.local_fed is None):
        raise ValueError("evaluation needs at least one entity")
    start = time.perf_counter()
    result = EvaluationResult(
        dataset=dataset.name, protocol=protocol, n_students=len(dataset.students), seed=seed, rows=[],
        simulated_data=dataset.simulated, entities=list(entities), method=config.method,
    )
    if served is not None:
        result.served["config"] = {"noise": served.noise.fields(), "calibration_method": served.calibration_method,
                                   "aggregation": served.aggregation, "release_epsilon": served.release_epsilon,
                                   "local_fed": None if served.local_fed is None else vars(served.local_fed)}
    with local_fed_folder() as tmp:
        folder = Path(tmp)
        if protocol == "simulated":
            await _simulated(dataset, entities, result, config, folder=folder, progress=progress)
        else:
            split = split_students(dataset.students, seed=seed)
            with_served = served if protocol == "heldout" else None
            fed = federation(entities, split.train, dataset.qmatrix, simulated=dataset.simulated, served=with_served,
                             seed=seed, folder=folder)
            if fed.local_fed:
                result.served["local_fed"] = fed.local_fed
            if protocol == "paper":
                await _paper(dataset, fed, result, config, split=split, progress=progress)
            else:
                await heldout_protocol(fed, dataset.qmatrix, split, result, config, progress=progress,
                                       served_via=served_via)
            result.entity_calls = fed.calls()
    result.entities = sorted(result.entity_calls) or list(entities)
    if any(name.startswith("sim:") for name in result.entities):
        result.notes.append("entities named sim:* are SIMULATED (documented noise model in providers/simulated.py), not LLMs")
    if "local-fed" in result.entities:
        result.notes.append("local-fed: trained federatedly on this run's train split only (3 simulated institutions, "
                            "FedAvg, fedcd train's defaults, seeded), then served as an entity")
    result.seconds = time.perf_counter() - start
    return result
