"""Releasing a DP stack's error with differential privacy, so the default real-data calibration serves intervals.

A stacking calibration released with ``release_epsilon`` = ε (:mod:`calibration.release_stack`) spends, by basic
composition, ``(1 − ERROR_SHARE − GUARD_SHARE)·ε`` on the stack's sufficient statistics, ``GUARD_SHARE·ε`` on the DP
guard that serves it or the plain mean (:mod:`calibration.release_guard`) and ``ERROR_SHARE·ε`` on the served
candidate's error; each validation student is charged ε in all, as before.

**The residuals.** The stack (or the plain mean the guard chose) is released first; its aggregate is public. Each
validation student's residuals ``r = logit(released aggregate) − logit(truth)`` are then a function of that public
output and the student's own data (on the pairs :func:`calibration.measured.measured_pairs` measures: every weighed
member answered). Unlike the non-DP path, which cross-fits (each student predicted by a stack fitted on the other
folds), these residuals are in-sample: the noisy stack was fitted on the same students. A stack has a few weights
against hundreds of students (and a DP stack's noise dwarfs what it learns of any one), so the optimism is small; the coverage tests
(``tests/calibration/test_release_error.py``) and the report's ``stacked, served, DP-released`` rows measure the consequence. A truth of exactly 0 or 1 (a
proportion correct from one answer) is measured as the non-DP path measures it, its logit clipped at
``RESIDUAL_CLIP``: dropping it would fit the thin-evidence part on students with two answers or more and extrapolate
it to the one-answer students it serves. Its residual then usually reaches the ±R clip, and the clip's reach (below)
refuses a cohort whose errors the clip cannot measure. (The non-DP path measures nothing when *every* truth is
binary, SIMULATED DINA attributes: a decision on all students at once, itself a statistic of them, which no DP
release here makes; such calibrations are by default never DP-released.)

**The statistics.** Each student weighs 1 in all: its m measured pairs weigh 1/m each. With |r| clipped to
``RESIDUAL_BOUND`` = R, r² ≤ C = R², and u = 1/(n + 1) ∈ (0, 1] (n: the student's answers on the concept), the five
sufficient statistics of the least-squares fit of r² on [1, u] are Σw, Σw·u, Σw·u², Σw·r², Σw·r²·u.

**Sensitivity.** Replace-one neighbours: the weights are normalised per student, so replacing one student changes
only that student's own contribution, a vector in [0, 1]³ × [0, C]² (all zero when it has no measured pair, and
then Σw changes by 1). Two such vectors differ by at most 1 + 1 + 1 + C + C in L1: ``SENSITIVITY`` Δ₁ = 3 + 2C,
attained by an empty student replaced by one with every residual at the clip and u = 1. Each statistic gets
Laplace noise of scale Δ₁ / (ERROR_SHARE·ε). Per-student (not per-pair) weights are what keeps Δ₁ free of how many
concepts a student was assessed on.

**The fit** (post-processing: no more ε). The noisy statistics are projected onto the values real ones can take
(0 ≤ Σwu² ≤ Σwu ≤ Σw, (Σwu)² ≤ Σw·Σwu², 0 ≤ Σwr²u ≤ Σwr² ≤ C·Σw) and the non-negative least-squares
(base, per_answer) solved from the normal equations. A noisy count below the floor, a mean r² beyond the clip's
reach (both below), or base + per_answer ≤ 0 serves no interval; the note says which. The record holds only released
values: the error's base and per_answer, the noisy count (as ``rows``: students, not pairs) and the split of ε.

**The constants**, argued from the noise, not tuned on a data set:

* ``RESIDUAL_BOUND`` 3 logits: a stack's residual sd is about 1.4 logits with no answers on a concept and shrinks
  with evidence; at sd 1.4 the clip removes ~6 % of E[r²] (it bites beyond ~2 sd), while R = 4 would raise Δ₁
  from 21 to 35, two thirds more noise on every statistic.
* ``ERROR_SHARE`` 0.2, kept from when the stack's noise grew with the number of concepts: now the stack's 14
  statistics (three entities, :mod:`calibration.release_stack`) share one scale, 7/((1 − s − g)·ε), and the error's
  five one scale, 21/(s·ε), neither growing with K. The stack's point reaches every diagnosis while its error only
  sets the interval's width, so most of ε stays with the stack (and 0.1 with the guard that checks it,
  :mod:`calibration.release_guard`). Less would blur the error where it is thinnest: its per-answer part rests on
  Σw·u², a small statistic (u = 1/(n + 1)), so the split between thin and thick evidence is the first thing the
  noise blurs.
* the floor: the noisy count must reach ``MIN_STUDENTS`` (20, as the non-DP fit's fewest pairs) and
  ``NOISE_FLOOR`` = 4 noise scales (Δ₁/(s·ε): 105 students at ε = 4). A cohort with nothing to measure (no pair
  every member answered) then passes by noise with probability e^−4/2 < 1 %, and at the floor the
  count's own noise is at most √2/4 ≈ 35 % of it.
* the clip's reach, ``REACH`` = C/4: a released mean of the clipped r² above it (a typical residual beyond 1.5
  logits) serves no interval. The clip removes 8 % of a normal residual's E[r²] at sd 1.5, 22 % at 2, 48 % at 3, so
  beyond it the measured spread is the clip's, not the stack's: a DP stack fitted on too few students for its noise
  (its aggregate saturating near 0 or 1) would otherwise serve intervals far too narrow for its errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import logit

from calibration.measured import Pair, measured_pairs
from calibration.release_guard import GUARD_SHARE
from calibration.validation import ValidationSet
from diagnosis import Aggregator, MeasuredError
from diagnosis.measured import RESIDUAL_CLIP  # the non-DP fit's clip of a truth's logit, shared

__all__ = ["ERROR_SHARE", "MIN_STUDENTS", "NOISE_FLOOR", "REACH", "RESIDUAL_BOUND", "SENSITIVITY", "ReleasedError",
           "error_statistics", "release_measured_error", "solve_error", "split_epsilon"]

ERROR_SHARE = 0.2
RESIDUAL_BOUND = 3.0
SENSITIVITY = 3.0 + 2.0 * RESIDUAL_BOUND**2
MIN_STUDENTS = 20.0
NOISE_FLOOR = 4.0  # and at least this many noise scales: an empty cohort passes with probability e^-4 / 2 < 1 %
REACH = RESIDUAL_BOUND**2 / 4  # the largest mean clipped r² the clip measures honestly (module docstring)


def split_epsilon(epsilon: float) -> tuple[float, float, float]:
    """(the stack's ε, the DP guard's ε, the error's ε): basic composition, the three sum to ``epsilon``."""
    return epsilon * (1.0 - ERROR_SHARE - GUARD_SHARE), epsilon * GUARD_SHARE, epsilon * ERROR_SHARE


def _residuals(pairs: Sequence[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """(clipped logit residuals, u = 1/(answers + 1)) of one student's measured pairs (a truth of 0 or 1 at the
    clipped logit, as the non-DP path reads it)."""
    if not pairs:
        return np.zeros(0), np.zeros(0)
    p, t, n = (np.asarray(column, dtype=float) for column in zip(*pairs))
    clip = (RESIDUAL_CLIP, 1 - RESIDUAL_CLIP)
    r = logit(np.clip(p, *clip)) - logit(np.clip(t, *clip))
    return np.clip(r, -RESIDUAL_BOUND, RESIDUAL_BOUND), 1.0 / (np.maximum(n, 0.0) + 1.0)


def error_statistics(students: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """[Σw, Σw·u, Σw·u², Σw·r², Σw·r²·u] over students given as (residuals, u): each student's pairs weigh 1/m.
    Residuals are clipped to ``RESIDUAL_BOUND`` here too, so the sensitivity holds whatever the caller passes."""
    total = np.zeros(5)
    for r, u in students:
        finite = np.isfinite(np.asarray(r, float)) & np.isfinite(np.asarray(u, float))
        r, u = np.asarray(r, float)[finite], np.asarray(u, float)[finite]  # a NaN is no residual: left out before 1/m
        if len(r):
            r2 = np.clip(np.asarray(r, float), -RESIDUAL_BOUND, RESIDUAL_BOUND) ** 2
            u = np.clip(np.asarray(u, float), 0.0, 1.0)
            total += np.array([1.0, u.mean(), (u * u).mean(), r2.mean(), (r2 * u).mean()])
    return total


def solve_error(stats: np.ndarray, *, floor: float = MIN_STUDENTS, with_answers: bool = True
                ) -> tuple[float, float] | None:
    """Non-negative least-squares (base, per_answer) from (noisy) statistics (module docstring; None: the count is
    below ``floor``, the mean r² beyond ``REACH`` or the solution 0). ``with_answers`` False: one spread (per_answer
    0)."""
    s0, s1, s2, t0, t1 = (float(v) for v in stats)
    if s0 < max(floor, MIN_STUDENTS):
        return None
    s1 = min(max(s1, 0.0), s0)
    s2 = min(max(s2, s1 * s1 / s0), s1)
    t0 = min(max(t0, 0.0), RESIDUAL_BOUND**2 * s0)
    t1 = min(max(t1, 0.0), t0)
    if t0 / s0 > REACH:
        return None
    candidates = [(t0 / s0, 0.0)]
    if with_answers:
        if s2 > 0:
            candidates.append((0.0, t1 / s2))
        det = s0 * s2 - s1 * s1
        if det > 1e-12 * s0 * s0:
            base, per_answer = (s2 * t0 - s1 * t1) / det, (s0 * t1 - s1 * t0) / det
            if base >= 0 and per_answer >= 0:
                candidates = [(base, per_answer)]  # the unconstrained optimum is feasible: it is the optimum

    def loss(x: tuple[float, float]) -> float:  # Σw(r² − base − pa·u)² up to a constant
        b, p = x
        return s0 * b * b + 2 * s1 * b * p + s2 * p * p - 2 * (t0 * b + t1 * p)

    base, per_answer = min(candidates, key=loss)
    return (base, per_answer) if base + per_answer > 0 else None


@dataclass(frozen=True)
class ReleasedError:
    """What the release publishes: the error (None: no interval), the noisy statistics it was solved from, the ε it
    spent and a note. Nothing here is an un-noised statistic of the students."""

    error: MeasuredError | None
    statistics: tuple[float, ...]
    epsilon: float
    note: str

    def to_json(self) -> dict[str, Any]:
        """``params.measured_error``: the error, plus how it was released (``rows``: the noisy student count)."""
        if self.error is None:
            return {}
        return {**self.error.to_json(), "release": {
            "epsilon": self.epsilon, "mechanism": "laplace", "sensitivity": SENSITIVITY,
            "residual_bound_logit": RESIDUAL_BOUND, "rows": "noisy count of validation students (not pairs)",
            "in_sample": True}}


def release_measured_error(stack: Aggregator, data: ValidationSet, members: Sequence[str], *, epsilon: float,
                           rng: np.random.Generator) -> ReleasedError:
    """The released ``stack``'s error on ``data`` (its own validation students), released with ``epsilon``-DP
    (module docstring). ``members``: the entities the stack weighs (public: its released weights)."""
    predicted = []
    for answers, truth, mechanism in zip(data.answers, data.truths, data.mechanisms):
        got = stack.aggregate(answers, list(truth), mechanism=mechanism).mastery
        predicted.append({c: got[c] for c in truth if c in got})
    students = [_residuals(pairs) for pairs in measured_pairs(predicted, data, members)]
    scale = SENSITIVITY / epsilon
    noisy = error_statistics(students) + rng.laplace(0.0, scale, size=5)
    with_answers, floor = data.evidence is not None, max(MIN_STUDENTS, NOISE_FLOOR * scale)
    solved = solve_error(noisy, floor=floor, with_answers=with_answers)
    head = (f"the stack's error released with differential privacy (ε = {epsilon:g}, Laplace, L1 sensitivity "
            f"{SENSITIVITY:g}, residuals clipped at ±{RESIDUAL_BOUND:g} logits, in-sample under the released stack)")
    if solved is None:
        why = (f"the noisy count of measured students ({noisy[0]:.0f}) is below {floor:.0f} (at least "
               f"{MIN_STUDENTS:.0f} and {NOISE_FLOOR:g} noise scales)" if noisy[0] < floor
               else f"the released mean squared residual ({noisy[3] / noisy[0]:.2f}) is beyond what the clip measures "
               f"({REACH:g}): the stack's errors are too large to be measured" if noisy[3] / noisy[0] > REACH
               else "the noisy statistics solve to no spread")
        return ReleasedError(None, tuple(noisy.tolist()), epsilon, f"no interval: {head}; {why}")
    error = MeasuredError(base=solved[0], per_answer=solved[1], rows=int(round(noisy[0])), members=tuple(members))
    note = (f"intervals from {head}: ~{error.rows} students (noisy count); logit sd² = {error.base:.3f} + "
            f"{error.per_answer:.3f} / (answers + 1)" + ("" if with_answers else "; no answer counts: one spread"))
    return ReleasedError(error, tuple(noisy.tolist()), epsilon, note)
