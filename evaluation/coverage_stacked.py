"""The stacked rows of the coverage report: a stacking calibration (the default method) and the intervals it
serves from its measured error (:mod:`diagnosis.measured`), on simulated students.

A calibration is fitted as ``/v1/calibrate`` fits one, on SIMULATED validation students of the generator with mixed
amounts of evidence (an equal share at each of the report's response counts): local-fed's answer (the generator's
own model, as in ``trained``) and two SIMULATED stand-ins for LLMs (the truth plus independent N(0, 0.2²) error,
:mod:`evaluation.coverage_served`), each released through the server's default mechanism, the truth their simulated
mastery. The same calibration then diagnoses the report's students at each response count; their intervals are
``σ(logit(stack) ± z·sd(n))`` with the student's own answer counts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from calibration import StackingCalibrator, ValidationSet
from diagnosis import Aggregator
from diagnosis.measured import measured_intervals
from evaluation.coverage_served import EPSILON, MECHANISM, simulated_llm_answers
from evaluation.coverage_sim import Simulated, simulate_model
from federated.hocdm import HigherOrderCDM
from privacy import Mechanism
from privacy.registry import mechanism_for_request
from qmatrix import QMatrix

__all__ = ["fit_stacked", "stacked_intervals"]


def _released(model: HigherOrderCDM, sim: Simulated, rng: np.random.Generator
              ) -> list[tuple[dict[str, dict[str, float]], Mechanism, dict[str, int], list[int]]]:
    """Per student: the three members' released answers, the mechanism, the answers behind each concept and the
    answered concepts' columns."""
    k, names = sim.truth.shape[1], list(model.concepts)
    with torch.no_grad():
        mastery = model.mastery(sim.feats, sim.scores, torch.ones_like(sim.scores).bool()).double().numpy()
    counts = sim.feats[..., :k].sum(1).numpy().astype(int)
    out = []
    for b in range(sim.truth.shape[0]):
        answered = [j for j in range(k) if sim.answered[b, j]]
        concepts = [names[j] for j in answered]
        mechanism = mechanism_for_request(name=MECHANISM, epsilon=EPSILON, mode="assessed", n_concepts_total=k,
                                          n_concepts_assessed=len(concepts))
        members = {"local-fed": dict(zip(concepts, mastery[b, answered].tolist()))}
        for name in ("llm-a", "llm-b"):
            members[name] = dict(zip(concepts, simulated_llm_answers(sim.truth[b, answered], rng).tolist()))
        released = {name: mechanism.privatize(values, rng) for name, values in members.items()}
        out.append((released, mechanism, {names[j]: int(counts[b, j]) for j in answered}, answered))
    return out


def fit_stacked(q: QMatrix, model: HigherOrderCDM, *, students: int, counts: Sequence[int], seed: int
                ) -> Aggregator:
    """The stacking calibration fitted on ``students`` SIMULATED validation students, an equal share at each of
    ``counts`` responses (module docstring)."""
    rng = np.random.default_rng(seed)
    answers, truths, mechanisms, evidence = [], [], [], []
    for n in counts:
        sim = simulate_model(q, model, n_students=max(students // len(counts), 1), n_responses=n, seed=seed + 7 * n)
        for b, (released, mechanism, behind, answered) in enumerate(_released(model, sim, rng)):
            answers.append(released)
            mechanisms.append(mechanism)
            evidence.append(behind)
            truths.append({model.concepts[j]: float(sim.truth[b, j]) for j in answered})
    data = ValidationSet(answers=answers, truths=truths, clean=None, mechanisms=mechanisms, evidence=evidence)
    return StackingCalibrator().fit(data).params.aggregator()


def stacked_intervals(stack: Aggregator, model: HigherOrderCDM, sim: Simulated, *, seed: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) per (student, concept) as a diagnosis under ``stack`` serves them (NaN: not answered)."""
    if stack.measured_error is None:
        raise ValueError("the stacking calibration measured no error, so it serves no interval")
    rng = np.random.default_rng(seed)
    lower, upper = np.full(sim.truth.shape, np.nan), np.full(sim.truth.shape, np.nan)
    for b, (released, mechanism, behind, answered) in enumerate(_released(model, sim, rng)):
        concepts = [model.concepts[j] for j in answered]
        mastery = stack.aggregate(released, concepts, mechanism=mechanism).mastery
        intervals = measured_intervals(mastery, stack.measured_error, behind)
        for j in answered:
            lower[b, j], upper[b, j] = intervals[model.concepts[j]]
    return lower, upper
