"""A stack's error, measured on held-out validation students, for the intervals its diagnoses serve
(:mod:`diagnosis.measured` says what the model is and what the interval covers). A DP-released stack has its error
released with DP instead (:mod:`calibration.release_error`), from the same pairs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from calibration.validation import ValidationSet
from diagnosis import MeasuredError, fit_measured_error

__all__ = ["Pair", "measured_error", "measured_pairs"]

Pair = tuple[float, float, int]  # (the candidate's prediction, the truth, the student's answers on the concept)


def measured_pairs(predicted: Sequence[dict[str, float]], data: ValidationSet, members: Sequence[str] = ()
                   ) -> list[list[Pair]]:
    """Per validation student, the (prediction, truth, answers) of each concept that is measured: predicted, and
    answered by every entity of ``members`` (a diagnosis gets an interval only where they all answered,
    :class:`diagnosis.MeasuredError`). Answers are 0 where the counts are unknown (``data.evidence`` None)."""
    out: list[list[Pair]] = []
    for i, (held, truth) in enumerate(zip(predicted, data.truths)):
        evidence = data.evidence[i] if data.evidence is not None else {}
        out.append([(value, truth[c], evidence.get(c, 0)) for c, value in held.items()
                    if all(c in data.answers[i].get(m, {}) for m in members)])
    return out


def measured_error(predicted: Sequence[dict[str, float]], data: ValidationSet, folds: int,
                   members: Sequence[str] = ()) -> tuple[MeasuredError | None, str]:
    """The error model of the served candidate from its held-out predictions (per validation student: concept ->
    prediction by the candidate fitted on the other folds), and a note saying what was measured or why nothing was.
    ``members``: the entities the candidate weighs; only the pairs where every one of them answered are measured
    (:func:`measured_pairs`).

    Binary truths (SIMULATED DINA attributes held or not) have no logit to compare with, so nothing is measured on
    them. Without the students' answer counts one spread is fitted for every student (``per_answer`` 0)."""
    rows = [pair for pairs in measured_pairs(predicted, data, members) for pair in pairs]
    if not rows:
        return None, "no interval: no held-out prediction to measure the error on"
    value, truth, answers = (np.asarray(column, dtype=float) for column in zip(*rows))
    if np.isin(truth, (0.0, 1.0)).all():
        return None, ("no interval: the truths are binary (attributes held or not), so the stack's error has no "
                      "logit scale to be measured on; diagnoses with this calibration serve no interval")
    error = fit_measured_error(value, truth, answers.astype(int), with_answers=data.evidence is not None)
    if error is None:
        return None, f"no interval: {len(rows)} held-out (student, concept) pairs are too few to measure the error"
    error = replace(error, members=tuple(members))
    return error, (f"intervals from the stack's error on {error.rows} held-out (student, concept) pairs "
                   f"({min(folds, len(data))}-fold): logit sd² = {error.base:.3f} + {error.per_answer:.3f} / (answers + 1)"
                   + ("" if data.evidence is not None else "; no answer counts: one spread for every student"))
