"""Proportion-correct: the model-free classical-test-theory baseline.

A student's mastery of concept k is their mean score on the items they answered that
require k (the Q-matrix columns); no latent variable, no item parameters. It is the
estimator every cognitive-diagnosis model has to beat on held-out responses, because it
already knows which items measure which concept.

**The paper protocol's "ground truth" mastery IS this estimator** (per-concept proportion
correct over the student's responses), so, evaluated against that truth on the same
responses, proportion-correct scores MAE 0 by construction, without any smoothing. A
comparison against it there measures distance from this estimator, not diagnostic skill;
use simulated data with known mastery, or held-out responses, to rank models.

When a student answered no item requiring k, the estimate is undefined. The default
fallback is the training-set mean for k (the mean, over training students who answered an
item requiring k, of their proportion correct), stated in ``fallback``; ``fallback="nan"``
returns nan instead. There is never a silent 0.5.

``predict_proba`` for item i is the mean of the student's mastery over the concepts item i
requires (a compensatory reading: each concept contributes equally, which is also what the
protocol's truth assumes; DINA would take the minimum/product instead).
"""

from __future__ import annotations

from typing import Literal, Self

import numpy as np

from evaluation.baselines.common import CDMBaseline, check_q, check_responses, select_items, split_scores

__all__ = ["ProportionCorrect", "proportion_correct"]

Fallback = Literal["train-mean", "nan"]


def proportion_correct(responses: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Students x concepts mean score on answered items requiring each concept; nan if none answered."""
    _, correct, _ = split_scores(responses)
    observed = ~np.isnan(responses)
    qf = np.asarray(q, dtype=float)
    answered = observed @ qf
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(answered > 0, (correct @ qf) / np.maximum(answered, 1), np.nan)


class ProportionCorrect(CDMBaseline):
    """Per-concept proportion correct, with a documented fallback for concepts a student never met."""

    name = "proportion-correct"

    def __init__(self, *, fallback: Fallback = "train-mean") -> None:
        if fallback not in ("train-mean", "nan"):
            raise ValueError(f"fallback must be 'train-mean' or 'nan', got {fallback!r}")
        self.fallback = fallback
        self.concept_means_: np.ndarray | None = None

    def fit(self, responses: np.ndarray, q: np.ndarray) -> Self:
        """Learn only the fallback: each concept's mean proportion correct over training students.

        A concept no training student met falls back to the overall training mean score; a
        training set with no answers at all cannot define any fallback and is an error.
        """
        q = check_q(q)
        responses = check_responses(responses, n_items=q.shape[0])
        if np.isnan(responses).all():
            raise ValueError("training responses contain no answered item")
        per_student = proportion_correct(responses, q)
        met = ~np.isnan(per_student).all(axis=0)
        means = np.full(q.shape[1], float(np.nanmean(responses)))
        means[met] = np.nanmean(per_student[:, met], axis=0)
        self._q = q
        self.concept_means_ = means
        return self

    def mastery(self, responses: np.ndarray) -> np.ndarray:
        responses = self._new_responses(responses)
        estimate = proportion_correct(responses, self.q_)
        if self.fallback == "train-mean":
            assert self.concept_means_ is not None
            estimate = np.where(np.isnan(estimate), self.concept_means_[None, :], estimate)
        return estimate

    def predict_proba(self, responses: np.ndarray, items: np.ndarray | None = None) -> np.ndarray:
        """Mean mastery over each item's concepts (over those with a value when ``fallback='nan'``)."""
        idx = select_items(items, self.q_.shape[0])
        m = self.mastery(responses)
        q = self.q_[idx].astype(float)
        known = ~np.isnan(m)
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.where(known, m, 0.0) @ q.T
            count = known.astype(float) @ q.T
            return np.where(count > 0, total / np.maximum(count, 1), np.nan)
