"""The three evaluation protocols. Students are split train / validation / test (seeded);
calibrations and links are fitted on validation; every number is reported on test.

* ``paper`` — truth y_k = the student's proportion correct on items requiring k, computed
  from the very responses the entities see (so ``proportion-correct`` scores MAE 0: it
  *is* the truth). MAE and RMSE as the paper's formulas (7)–(8).
* ``heldout`` — 20 % of each student's responses are hidden (seeded); the diagnosis uses
  the rest and must predict the hidden ones through a logistic link fitted on
  validation: AUC, ACC, RMSE, ECE (15 bins).
* ``simulated`` — SIMULATED students (DINA and IRT generators) on the dataset's real
  Q-matrix, with known mastery: MAE and attribute-wise accuracy against it, next to the
  oracle posterior under the true parameters.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from evaluation.baselines import DINA, IRT2PL, ProportionCorrect, response_matrix
from evaluation.collect import NoiseSetting, collect_predictions
from evaluation.link import fit_link
from evaluation.results import EvaluationResult, Row
from evaluation.rows import federation_estimates
from evaluation.simulation import simulate
from evaluation.splits import holdout_responses, proportion_correct_truth, split_students
from evaluation.metrics import accuracy, auc, ece, mae, rmse
from providers import Entity
from qmatrix import Dataset, QMatrix, Response, StudentResponses

__all__ = ["PROTOCOLS", "evaluate"]

PROTOCOLS = ("paper", "heldout", "simulated")
Mastery = dict[str, float]
Progress = Callable[[int], None]


def _settings(epsilons: Sequence[float]) -> list[NoiseSetting]:
    return [NoiseSetting("laplace", None), *(NoiseSetting(m, e) for e in epsilons for m in ("laplace", "gaussian"))]


def _pairs(estimates: Sequence[Mastery], truths: Sequence[Mastery]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    pred, true, concepts = [], [], []
    for est, truth in zip(estimates, truths):
        for concept, value in truth.items():
            if concept in est:
                pred.append(est[concept])
                true.append(value)
                concepts.append(concept)
    return np.array(pred), np.array(true), concepts


def _mastery_row(name: str, eps: float | None, est: Sequence[Mastery], truths: Sequence[Mastery], result: EvaluationResult, *, mechanism: str = "none", generator: str | None = None, threshold: bool = False) -> Row:
    pred, true, concepts = _pairs(est, truths)
    key = f"{name}@{'inf' if eps is None else f'{eps:g}'}" + (f"[{generator}]" if generator else "")
    result.per_concept_error[key] = {
        c: float(np.mean(np.abs(pred[[i for i, x in enumerate(concepts) if x == c]] - true[[i for i, x in enumerate(concepts) if x == c]])))
        for c in dict.fromkeys(concepts)
    }
    return Row(
        name=name, epsilon=eps, mae=mae(pred, true), rmse=rmse(pred, true), n=int(pred.size), mechanism=mechanism,
        acc=accuracy(pred, true) if threshold else None, generator=generator,
    )


def _classical(train: Sequence[StudentResponses], q: QMatrix) -> dict[str, object]:
    x = response_matrix(list(train), q)
    return {"irt": IRT2PL().fit(x, q.matrix), "dina": DINA().fit(x, q.matrix), "proportion-correct": ProportionCorrect().fit(x, q.matrix)}


def _classical_mastery(model: object, students: Sequence[Sequence[Response]], q: QMatrix) -> list[Mastery]:
    x = response_matrix([StudentResponses(student_id=str(i), responses=tuple(r)) for i, r in enumerate(students)], q)
    m = model.mastery(x)  # type: ignore[attr-defined]
    out = []
    for i, responses in enumerate(students):
        assessed = q.concepts_for([r.item_id for r in responses])
        out.append({c: float(m[i, q.concepts.index(c)]) for c in assessed if not np.isnan(m[i, q.concepts.index(c)])})
    return out


async def _collect(entities, q, val, test, epsilons, *, sensitivity, delta, seed, concurrency, progress):  # type: ignore[no-untyped-def]
    settings = _settings(epsilons)
    val_c = await collect_predictions(entities, q, val, settings, sensitivity=sensitivity, delta=delta, seed=seed, concurrency=concurrency, on_progress=progress)
    test_c = await collect_predictions(entities, q, test, settings, sensitivity=sensitivity, delta=delta, seed=None if seed is None else seed + 1, concurrency=concurrency, on_progress=progress)
    calls = {n: val_c.calls.get(n, 0) + test_c.calls.get(n, 0) for n in entities}
    failures = {n: val_c.failures.get(n, 0) + test_c.failures.get(n, 0) for n in entities if val_c.failures.get(n) or test_c.failures.get(n)}
    return val_c, test_c, calls, failures


def _assessed(q: QMatrix, students: Sequence[Sequence[Response]]) -> list[tuple[str, ...]]:
    return [q.concepts_for([r.item_id for r in s]) for s in students]


async def _paper(dataset: Dataset, entities: Mapping[str, Entity], result: EvaluationResult, **kw: object) -> None:
    q = dataset.qmatrix
    split = split_students(dataset.students, seed=result.seed)
    val = [list(s.responses) for s in split.validation]
    test = [list(s.responses) for s in split.test]
    result.split = {"train": len(split.train), "validation": len(val), "test": len(test)}
    val_truth = [proportion_correct_truth(q, r) for r in val]
    test_truth = [proportion_correct_truth(q, r) for r in test]
    val_c, test_c, result.entity_calls, result.entity_failures = await _collect(entities, q, val, test, **kw)  # type: ignore[arg-type]
    for est in federation_estimates(val_c, test_c, val_truths=val_truth, val_concepts=_assessed(q, val), test_concepts=_assessed(q, test), entity_names=list(entities), epsilons=kw["epsilons"], method=result.method):  # type: ignore[arg-type]
        result.rows.append(_mastery_row(est.name, est.epsilon, est.test, test_truth, result, mechanism=est.mechanism))
        if est.name.startswith("single:") and est.epsilon is None:
            pred, true, _ = _pairs(est.test, test_truth)
            result.reliability[est.name.removeprefix("single:")] = list(zip(pred.tolist(), true.tolist()))
    for name, model in _classical(split.train, q).items():
        result.rows.append(_mastery_row(name, None, _classical_mastery(model, test, q), test_truth, result))
    result.notes.append("paper protocol: the truth is the proportion correct of the responses the entities are shown, "
                        "so 'proportion-correct' reproduces it exactly (MAE 0) and measures nothing but that identity")


def _heldout_pairs(est: Sequence[Mastery], held: Sequence[Sequence[Response]], q: QMatrix) -> tuple[np.ndarray, np.ndarray, int]:
    m, y, skipped = [], [], 0
    for mastery, responses in zip(est, held):
        for r in responses:
            values = [mastery[c] for c in q.item(r.item_id).concepts if c in mastery]
            if values:
                m.append(float(np.mean(values)))
                y.append(r.score)
            else:
                skipped += 1
    return np.array(m), np.array(y), skipped


def _split_holdout(students: Sequence[StudentResponses], seed: int) -> tuple[list[list[Response]], list[list[Response]]]:
    observed, held = [], []
    for s in students:
        rng = np.random.default_rng([seed, zlib.crc32(s.student_id.encode())])
        o, h = holdout_responses(s.responses, fraction=0.2, rng=rng)
        observed.append(o)
        held.append(h)
    return observed, held


def _response_row(name: str, eps: float | None, probs: np.ndarray, outcomes: np.ndarray, *, mechanism: str = "none") -> Row:
    return Row(name=name, epsilon=eps, auc=auc(probs, outcomes), acc=accuracy(probs, outcomes), rmse=rmse(probs, outcomes), ece=ece(probs, outcomes), n=int(probs.size), mechanism=mechanism)


async def _heldout(dataset: Dataset, entities: Mapping[str, Entity], result: EvaluationResult, **kw: object) -> None:
    q = dataset.qmatrix
    split = split_students(dataset.students, seed=result.seed)
    val_obs, val_held = _split_holdout(split.validation, result.seed)
    test_obs, test_held = _split_holdout(split.test, result.seed)
    result.split = {"train": len(split.train), "validation": len(val_obs), "test": len(test_obs)}
    # Calibration truth for validation students: proportion correct over all their responses.
    val_truth = [
        {c: v for c, v in proportion_correct_truth(q, list(s.responses)).items() if c in assessed}
        for s, assessed in zip(split.validation, _assessed(q, val_obs))
    ]
    val_c, test_c, result.entity_calls, result.entity_failures = await _collect(entities, q, val_obs, test_obs, **kw)  # type: ignore[arg-type]
    skipped_total = 0
    estimates = federation_estimates(val_c, test_c, val_truths=val_truth, val_concepts=_assessed(q, val_obs), test_concepts=_assessed(q, test_obs), entity_names=list(entities), epsilons=kw["epsilons"], method=result.method)  # type: ignore[arg-type]
    for est in estimates:
        vm, vy, _ = _heldout_pairs(est.validation, val_held, q)
        tm, ty, skipped = _heldout_pairs(est.test, test_held, q)
        skipped_total += skipped
        if vm.size == 0 or tm.size == 0:
            result.rows.append(Row(name=est.name, epsilon=est.epsilon, n=0, mechanism=est.mechanism))
            continue
        probs = fit_link(vm, vy)(tm)
        result.rows.append(_response_row(est.name, est.epsilon, probs, ty, mechanism=est.mechanism))
        if est.name.startswith("single:") and est.epsilon is None:
            result.reliability[est.name.removeprefix("single:")] = list(zip(probs.tolist(), ty.tolist()))
    ids = {item: i for i, item in enumerate(q.item_ids)}
    x_test = response_matrix([StudentResponses(student_id=str(i), responses=tuple(o)) for i, o in enumerate(test_obs)], q)
    for name, model in _classical(split.train, q).items():
        p = model.predict_proba(x_test)  # type: ignore[attr-defined]
        probs = np.array([p[s, ids[r.item_id]] for s, held in enumerate(test_held) for r in held])
        outcomes = np.array([r.score for held in test_held for r in held])
        keep = ~np.isnan(probs)
        result.rows.append(_response_row(name, None, probs[keep], outcomes[keep]))
    if skipped_total:
        result.notes.append(f"{skipped_total} held-out (row, response) pairs had no diagnosed concept of their item and were not scored")
    result.notes.append("heldout protocol: link P(correct) = sigmoid(a·mean mastery of the item's concepts + b), fitted on validation")


async def _simulated(dataset: Dataset, entities: Mapping[str, Entity], result: EvaluationResult, *, n_simulated: int, **kw: object) -> None:
    q = dataset.qmatrix
    result.simulated_data = True
    calls: dict[str, int] = {}
    for generator in ("dina", "irt"):
        sim = simulate(q, generator=generator, n_students=n_simulated, seed=result.seed)
        split = split_students(sim.dataset.students, seed=result.seed)
        val = [list(s.responses) for s in split.validation]
        test = [list(s.responses) for s in split.test]
        result.split = {"train": len(split.train), "validation": len(val), "test": len(test)}
        truth = sim.dataset.true_mastery

        def restrict(students: Sequence[StudentResponses], source: Mapping[str, Mastery]) -> list[Mastery]:
            return [{c: source[s.student_id][c] for c in q.concepts_for(s.item_ids())} for s in students]

        val_truth, test_truth = restrict(split.validation, truth), restrict(split.test, truth)
        val_c, test_c, gen_calls, failures = await _collect(entities, q, val, test, **kw)  # type: ignore[arg-type]
        for n, c in gen_calls.items():
            calls[n] = calls.get(n, 0) + c
        for n, c in failures.items():
            result.entity_failures[n] = result.entity_failures.get(n, 0) + c
        for est in federation_estimates(val_c, test_c, val_truths=val_truth, val_concepts=_assessed(q, val), test_concepts=_assessed(q, test), entity_names=list(entities), epsilons=kw["epsilons"], method=result.method):  # type: ignore[arg-type]
            result.rows.append(_mastery_row(est.name, est.epsilon, est.test, test_truth, result, mechanism=est.mechanism, generator=generator, threshold=True))
        for name, model in _classical(split.train, q).items():
            result.rows.append(_mastery_row(name, None, _classical_mastery(model, test, q), test_truth, result, generator=generator, threshold=True))
        result.rows.append(_mastery_row("oracle", None, restrict(split.test, sim.oracle), test_truth, result, generator=generator, threshold=True))
    result.entity_calls = calls
    result.notes.append("simulated protocol: SIMULATED students on the real Q-matrix; 'acc' is attribute-wise recovery "
                        "accuracy at 0.5; 'oracle' is the posterior under the true generating parameters (the ceiling)")


async def evaluate(
    dataset: Dataset,
    entities: Mapping[str, Entity],
    *,
    protocol: str,
    epsilons: Sequence[float],
    seed: int = 0,
    method: str = "bias",
    sensitivity: str = "paper",
    delta: float = 1e-5,
    concurrency: int = 4,
    n_simulated: int = 500,
    progress: Progress | None = None,
) -> EvaluationResult:
    """Run one protocol; ``epsilons`` are the finite noise levels (ε = ∞ is always included)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r} (use {', '.join(PROTOCOLS)})")
    if not entities:
        raise ValueError("evaluation needs at least one entity")
    start = time.perf_counter()
    result = EvaluationResult(
        dataset=dataset.name, protocol=protocol, n_students=len(dataset.students), seed=seed, rows=[],
        simulated_data=dataset.simulated, entities=list(entities), method=method,
    )
    kw = {"epsilons": list(epsilons), "sensitivity": sensitivity, "delta": delta, "seed": seed, "concurrency": concurrency, "progress": progress}
    if protocol == "paper":
        await _paper(dataset, entities, result, **kw)
    elif protocol == "heldout":
        await _heldout(dataset, entities, result, **kw)
    else:
        await _simulated(dataset, entities, result, n_simulated=n_simulated, **kw)
    if any(name.startswith("sim:") for name in entities):
        result.notes.append("entities named sim:* are SIMULATED (documented noise model in providers/simulated.py), not LLMs")
    result.seconds = time.perf_counter() - start
    return result
