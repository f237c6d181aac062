"""The stacked rows of the coverage report: a stacking calibration (the default method) and the intervals it
serves from its measured error (:mod:`diagnosis.measured`), on simulated students.

A calibration is fitted as ``/v1/calibrate`` fits one, on SIMULATED validation students of the generator with mixed
amounts of evidence (an equal share at each of the report's response counts): local-fed's answer (the generator's
own model, as in ``trained``) and two SIMULATED stand-ins for LLMs (the truth plus independent N(0, 0.2²) error,
:mod:`evaluation.coverage_served`), each released through the server's default mechanism, the truth their simulated
mastery. The same calibration then diagnoses the report's students at each response count; their intervals are
``σ(logit(stack) ± z·sd(n))`` with the student's own answer counts.

``stacked, served`` is that calibration released without noise (as the server releases one fitted on SIMULATED
students); ``stacked, served, DP-released`` the same validation students released as a real cohort is by default:
with differential privacy at ε = ``RELEASE_EPSILON`` per student, the stack, a DP guard (which may serve the plain mean) and its error each getting a share
(:mod:`calibration.release_error`; its residuals in-sample under the released stack).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from calibration import StackingCalibrator, ValidationSet
from diagnosis import Aggregator
from diagnosis.measured import measured_intervals
from evaluation.coverage_served import simulated_llm_answers, simulated_requests
from evaluation.coverage_sim import Simulated, coverage, simulate_model
from federated.hocdm import HigherOrderCDM
from privacy import Mechanism
from qmatrix import QMatrix

__all__ = ["DP_RELEASED", "RELEASE_EPSILON", "STACKED", "fit_stacked", "fit_stacks", "stacked_intervals",
           "stacked_rows"]

STACKED, DP_RELEASED = "stacked, served", "stacked, served, DP-released"
RELEASE_EPSILON = 4.0  # the server's default for a real cohort's calibration (FEDCD_CALIBRATION_RELEASE_EPSILON)


def _released(model: HigherOrderCDM, sim: Simulated, rng: np.random.Generator
              ) -> list[tuple[dict[str, dict[str, float]], Mechanism, dict[str, int], list[int]]]:
    """Per student: the three members' released answers, the mechanism, the answers behind each concept and the
    answered concepts' columns."""
    with torch.no_grad():
        mastery = model.mastery(sim.feats, sim.scores, torch.ones_like(sim.scores).bool()).double().numpy()
    out = []
    for request in simulated_requests(list(model.concepts), sim.feats, sim):
        b, answered, concepts = request.student, request.columns, request.concepts
        members = {"local-fed": dict(zip(concepts, mastery[b, answered].tolist()))}
        for name in ("llm-a", "llm-b"):
            members[name] = dict(zip(concepts, simulated_llm_answers(sim.truth[b, answered], rng).tolist()))
        released = {name: request.mechanism.privatize(values, rng) for name, values in members.items()}
        out.append((released, request.mechanism, request.answers, answered))
    return out


def _validation(q: QMatrix, model: HigherOrderCDM, *, students: int, counts: Sequence[int], seed: int) -> ValidationSet:
    """``students`` SIMULATED validation students, an equal share at each of ``counts`` responses (module docstring)."""
    rng = np.random.default_rng(seed)
    answers, truths, mechanisms, evidence = [], [], [], []
    for n in counts:
        sim = simulate_model(q, model, n_students=max(students // len(counts), 1), n_responses=n, seed=seed + 7 * n)
        for b, (released, mechanism, behind, answered) in enumerate(_released(model, sim, rng)):
            answers.append(released)
            mechanisms.append(mechanism)
            evidence.append(behind)
            truths.append({model.concepts[j]: float(sim.truth[b, j]) for j in answered})
    return ValidationSet(answers=answers, truths=truths, clean=None, mechanisms=mechanisms, evidence=evidence)


def _fit(data: ValidationSet, release_epsilon: float | None, seed: int) -> Aggregator:
    if release_epsilon is None:
        return StackingCalibrator().fit(data).params.aggregator()
    rng = np.random.default_rng(seed + 1)  # the release's noise, seeded
    return StackingCalibrator().fit(data, release_epsilon=release_epsilon, rng=rng).params.aggregator()


def fit_stacked(q: QMatrix, model: HigherOrderCDM, *, students: int, counts: Sequence[int], seed: int,
                release_epsilon: float | None = None) -> Aggregator:
    """The stacking calibration fitted on ``students`` SIMULATED validation students, an equal share at each of
    ``counts`` responses (module docstring); with ``release_epsilon``, released with DP (seeded)."""
    data = _validation(q, model, students=students, counts=counts, seed=seed)
    return _fit(data, release_epsilon, seed)


def fit_stacks(q: QMatrix, model: HigherOrderCDM, *, students: int, counts: Sequence[int], seed: int
               ) -> dict[str, Aggregator]:
    """The report's two stacking calibrations on the same SIMULATED validation students: released without noise
    (``STACKED``) and with DP at ``RELEASE_EPSILON`` (``DP_RELEASED``)."""
    data = _validation(q, model, students=students, counts=counts, seed=seed)
    return {STACKED: _fit(data, None, seed), DP_RELEASED: _fit(data, RELEASE_EPSILON, seed)}


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


def stacked_rows(stacks: Mapping[str, Aggregator], model: HigherOrderCDM, sim: Simulated, *, responses: int,
                 seed: int) -> list[dict]:
    """The report's rows for each of ``stacks`` (label -> calibration) on ``sim``: coverage, the worst concept's, mean
    width; NaN for a calibration that serves no interval (a DP release whose noisy count fell below its floor)."""
    rows = []
    for label, stack in stacks.items():
        overall = worst = width = float("nan")
        if stack.measured_error is not None:
            lower, upper = stacked_intervals(stack, model, sim, seed=seed)
            overall, worst = coverage(sim.truth, lower, upper, sim.answered)
            width = float(np.nanmean(upper - lower))
        rows.append({"generator": "model", "config": label, "responses": responses, "coverage": overall,
                     "worst": worst, "width": width})
    return rows
