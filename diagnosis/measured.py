"""Intervals for a mean aggregation (a stack), from its error measured on held-out validation students (issue 33).

A stack (``calibration.stacking``) is a point estimate: without more, a calibrated diagnosis served no interval, and
its item forecasts were read as if the mastery were known exactly (``σ(α·θ + c)`` at the point), which makes them
over-confident (Jensen: a spread of θ around the point pulls the expected P(correct) toward one half).

The calibration measures what the stack gets wrong: for every validation student and concept, the stack fitted on
the *other* folds predicts the held-out student, and the residual ``r = logit(stack) − logit(truth)`` is kept with the
number of the student's answers on that concept, ``n``. Its spread is modelled as::

    E[r²] = base + per_answer / (n + 1)          (base, per_answer ≥ 0; least squares on r²)

— what no number of answers removes (the entities' and the stack's own error) plus what thins out with evidence
(the student's responses were too few to say). A diagnosis with ``n`` answers on concept ``k`` is then given
``θ_k ~ N(logit(mastery_k), sd(n)²)`` and the interval ``σ(logit(mastery_k) ± z·sd(n))``: an interval of the
typical validation student with that much evidence, narrowing as the student answers more. What it covers is the
calibration's truth (on real data: the ability the serving model reads from all a student's responses), stated in
the record. Item forecasts average over it (:mod:`diagnosis.forecast`'s probit approximation).

As answers come, ``sd(n)`` falls only towards ``√base``: :func:`answers_to_narrow` says how many more answers bring
the served interval to a given width, or that none do (the student report's thin-evidence guide); a diagnosis states
the spread it served (the response's ``interval_spread``) so that a stored one can be re-read.

Pure post-processing of the released aggregate and the request's answer counts: no ε.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import nnls
from scipy.special import expit, logit
from scipy.stats import norm

from diagnosis.forecast import LOGIT_CLIP

__all__ = ["MEASURED_LEVEL", "RESIDUAL_CLIP", "MeasuredError", "Narrowing", "answer_counts", "answers_to_narrow", "fit_measured_error",
           "measured_intervals"]

MEASURED_LEVEL = 0.9
# A residual's logits are clipped wider than a served value's: a truth of 0 or 1 (rare on real data) would otherwise
# dominate the fitted spread.
RESIDUAL_CLIP = 1e-3
_MIN_ROWS = 20  # fewer held-out (student, concept) pairs measure no spread worth serving


@dataclass(frozen=True)
class MeasuredError:
    """The spread of a mean aggregation's logit error: ``sd(n)² = base + per_answer / (n + 1)``, measured on ``rows``
    held-out (student, concept) pairs (module docstring) on which every entity of ``members`` answered — the ones the
    aggregation weighs. A concept some member did not answer (it failed, or was not asked) is aggregated from fewer
    answers than were measured, so it is given no interval."""

    base: float
    per_answer: float
    rows: int
    members: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.base < 0 or self.per_answer < 0 or self.base + self.per_answer <= 0 or self.rows < 1:
            raise ValueError(f"a measured error needs base, per_answer >= 0 (not both 0) and rows >= 1; got {self}")

    def sd(self, answers: int) -> float:
        """The logit-scale sd of the aggregate for a concept with ``answers`` of the student's answers behind it."""
        return math.sqrt(self.base + self.per_answer / (max(answers, 0) + 1))

    def covers(self, contributors: Sequence[str]) -> bool:
        """Whether a concept aggregated from ``contributors`` has every member's answer, as measured."""
        return set(self.members) <= set(contributors)

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "per_answer": self.per_answer, "rows": self.rows, "members": list(self.members)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> MeasuredError | None:
        return None if not data else cls(base=float(data["base"]), per_answer=float(data["per_answer"]),
                                         rows=int(data["rows"]), members=tuple(data.get("members", ())))


def _logit(p: np.ndarray, clip: float = LOGIT_CLIP) -> np.ndarray:
    return logit(np.clip(p, clip, 1 - clip))


def fit_measured_error(predicted: Sequence[float], truth: Sequence[float], answers: Sequence[int], *,
                       with_answers: bool = True) -> MeasuredError | None:
    """The error model from held-out predictions, their truths and the answers behind each (None: too few pairs).
    ``with_answers`` False: the counts are unknown, so one spread (``base``) is fitted for every student."""
    if len(predicted) < _MIN_ROWS:
        return None
    r2 = (_logit(np.asarray(predicted, float), RESIDUAL_CLIP) - _logit(np.asarray(truth, float), RESIDUAL_CLIP)) ** 2
    if not with_answers:
        return MeasuredError(base=float(r2.mean()), per_answer=0.0, rows=int(r2.size)) if r2.mean() > 0 else None
    design = np.column_stack([np.ones(r2.size), 1.0 / (np.asarray(answers, float) + 1.0)])
    (base, per_answer), _ = nnls(design, r2)
    if base + per_answer <= 0:
        return None
    return MeasuredError(base=float(base), per_answer=float(per_answer), rows=int(r2.size))


def answer_counts(item_concepts: Iterable[Sequence[str]]) -> dict[str, int]:
    """concept -> how many of the student's answered items assess it."""
    return dict(Counter(c for concepts in item_concepts for c in concepts))


def measured_intervals(mastery: Mapping[str, float], error: MeasuredError, answers: Mapping[str, int],
                       level: float = MEASURED_LEVEL, contributors: Mapping[str, Sequence[str]] | None = None
                       ) -> dict[str, tuple[float, float]]:
    """Each concept's interval at credible ``level``: ``σ(logit(mastery) ± z·sd(n))``; with ``contributors``
    (concept -> the entities aggregated), only for the concepts every measured member answered."""
    z = _z(level)
    return {concept: _interval(value, z * error.sd(answers.get(concept, 0))) for concept, value in mastery.items()
            if contributors is None or error.covers(contributors.get(concept, ()))}


# Steps of one answer the guide takes around its closed-form count (the float boundary); far more than rounding needs
_SETTLE_STEPS = 64


@dataclass(frozen=True)
class Narrowing:
    """How many further answers narrow a measured interval to a target width (:func:`answers_to_narrow`).
    ``more`` None: no number of answers does — the spread's ``base`` alone keeps the interval ``floor`` wide."""

    more: int | None
    floor: float  # the width the interval tends to with ever more answers (sd = √base)


def answers_to_narrow(mastery: float, answers: int, width: float, error: MeasuredError,
                      level: float = MEASURED_LEVEL) -> Narrowing:
    """The fewest further answers ``k ≥ 1`` after which the interval :func:`measured_intervals` serves for a concept
    at ``mastery`` with ``answers`` answers is at most ``width`` wide. A guide: it assumes the estimate stays at
    ``mastery`` (the next answers are like those so far). The width grows with the sd at a fixed centre and the sd
    falls towards ``√base`` as answers come, so the floor decides whether any number suffices."""
    z, have = _z(level), max(answers, 0)
    floor = _width(mastery, z * math.sqrt(error.base))
    if error.per_answer == 0:  # nothing thins out: the next answer is as good as any
        return Narrowing(more=1 if floor <= width else None, floor=floor)
    if floor >= width:  # the sd only approaches √base: the width stays above the floor
        return Narrowing(more=None, floor=floor)
    if _width(mastery, z * error.sd(have + 1)) <= width:
        return Narrowing(more=1, floor=floor)
    # the largest sd whose interval fits, by bisection on the monotone width: √base fits, sd(have + 1) does not
    low, high = math.sqrt(error.base), error.sd(have + 1)
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (mid, high) if _width(mastery, z * mid) <= width else (low, mid)
    gap = low * low - error.base
    if gap <= 0:  # a target within float precision of the floor: no count worth stating reaches it
        return Narrowing(more=None, floor=floor)
    # sd(n)² ≤ low² ⇔ n + 1 ≥ per_answer / gap; the served width itself decides near the boundary
    more = max(1, math.ceil(error.per_answer / gap) - 1 - have)
    for _ in range(_SETTLE_STEPS):  # bounded: a target within rounding of the floor would step for ever
        if more > 1 and _width(mastery, z * error.sd(have + more - 1)) <= width:
            more -= 1
        elif _width(mastery, z * error.sd(have + more)) > width:
            more += 1
        else:
            break
    return Narrowing(more=more, floor=floor)


def _z(level: float) -> float:
    return float(norm.ppf(0.5 + level / 2))


def _interval(mastery: float, spread: float) -> tuple[float, float]:
    """``σ(logit(mastery) ± spread)``: the served interval, and the one the narrowing guide reads."""
    centre = float(_logit(np.asarray(mastery)))
    return float(expit(centre - spread)), float(expit(centre + spread))


def _width(mastery: float, spread: float) -> float:
    low, high = _interval(mastery, spread)
    return high - low
