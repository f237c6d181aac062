"""The common interface of the classical cognitive-diagnosis baselines, and their input checks.

A baseline is fitted once on a TRAIN split of students (a students x items response matrix
and the items x concepts Q-matrix) and then applied to NEW students from their responses
alone: ``mastery`` gives P(mastered) per concept, ``predict_proba`` gives P(correct) for
every item, which is what a held-out-response evaluation scores.

Response matrices hold a score in [0, 1] per (student, item) and ``np.nan`` where the
student did not answer. **Partial credit is treated as a Bernoulli-probability weight**: a
score y contributes ``y·log P(correct) + (1 − y)·log P(wrong)`` to a log-likelihood, i.e.
it counts as y of a correct answer and 1 − y of a wrong one. For 0/1 data this is the usual
Bernoulli likelihood; for fractional scores it keeps every bit of information (a threshold
at 0.5 would turn 0.49 and 0.0 into the same answer) and every EM step stays closed-form.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Self

import numpy as np
from scipy import sparse

from qmatrix import QMatrix, QMatrixError, StudentResponses

__all__ = [
    "CDMBaseline",
    "NotFittedError",
    "check_q",
    "check_responses",
    "response_matrix",
    "select_items",
    "sparse_scores",
    "split_scores",
]


class NotFittedError(RuntimeError):
    """``mastery`` or ``predict_proba`` was called before ``fit``."""


class CDMBaseline(ABC):
    """A cognitive-diagnosis model fitted on training students and applied to new ones."""

    name: str

    @abstractmethod
    def fit(self, responses: np.ndarray, q: np.ndarray) -> Self:
        """Estimate the item (and population) parameters from training responses; returns self."""

    @abstractmethod
    def mastery(self, responses: np.ndarray) -> np.ndarray:
        """Per-concept mastery in [0, 1] for each new student (students x concepts)."""

    @abstractmethod
    def predict_proba(self, responses: np.ndarray, items: np.ndarray | None = None) -> np.ndarray:
        """P(correct) for each item (all, or the ``items`` selected) given each student's observed responses."""

    def predict_pairs(self, responses: np.ndarray, students: np.ndarray, items: np.ndarray) -> np.ndarray:
        """P(correct) for each (student row of ``responses``, item index) pair — what a held-out score needs."""
        wanted = np.unique(np.asarray(items, dtype=int))
        column = {int(i): k for k, i in enumerate(wanted)}
        probs = self.predict_proba(responses, wanted)
        return np.array([probs[s, column[int(i)]] for s, i in zip(students, items)], dtype=float)

    # --- shared plumbing -------------------------------------------------------------
    _q: np.ndarray | None = None

    @property
    def q_(self) -> np.ndarray:
        """The Q-matrix the model was fitted with (items x concepts, int8)."""
        if self._q is None:
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(responses, q) first")
        return self._q

    def _new_responses(self, responses: np.ndarray) -> np.ndarray:
        """Validate a new-student matrix against the fitted item count."""
        return check_responses(responses, n_items=self.q_.shape[0])


def check_q(q: np.ndarray) -> np.ndarray:
    """A 2-D 0/1 items x concepts matrix: every item requires a concept, every concept has an item.

    An item that requires nothing informs no concept (and has a DINA ideal response of 1
    for everyone); a concept no item requires cannot be diagnosed. The QMatrix class
    already forbids both, so they are errors here too.
    """
    arr = np.asarray(q)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"q must be a non-empty 2-D items x concepts array, got shape {arr.shape}")
    if not np.isin(arr, (0, 1)).all():
        raise ValueError("q must contain only 0 and 1")
    empty = np.flatnonzero(arr.sum(axis=1) == 0)
    if empty.size:
        raise ValueError(f"q rows {empty.tolist()} require no concept")
    unused = np.flatnonzero(arr.sum(axis=0) == 0)
    if unused.size:
        raise ValueError(f"q columns {unused.tolist()} are required by no item")
    return arr.astype(np.int8)


def check_responses(responses: np.ndarray, *, n_items: int) -> np.ndarray:
    """A float students x items matrix with values in [0, 1] or nan (unanswered)."""
    arr = np.asarray(responses, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != n_items:
        raise ValueError(f"responses must be a 2-D students x {n_items} items array, got shape {arr.shape}")
    seen = arr[~np.isnan(arr)]
    if seen.size and (seen.min() < 0.0 or seen.max() > 1.0):
        raise ValueError("responses must be scores in [0, 1] (or nan for unanswered)")
    return arr


def select_items(items: np.ndarray | Sequence[int] | None, n_items: int) -> np.ndarray:
    """Integer column indices from ``None`` (all items), an index array or a boolean mask."""
    if items is None:
        return np.arange(n_items)
    idx = np.asarray(items)
    if idx.dtype == bool:
        if idx.shape != (n_items,):
            raise ValueError(f"a boolean item mask must have shape ({n_items},), got {idx.shape}")
        return np.flatnonzero(idx)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError("items must be a 1-D integer index array or a boolean mask")
    if idx.size and (idx.min() < -n_items or idx.max() >= n_items):
        raise ValueError(f"item index out of range for {n_items} items")
    return idx


def split_scores(responses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(observed, correct_weight, wrong_weight)``: 0/1 mask, y and 1 − y with 0 where unanswered.

    These three arrays are all a Bernoulli log-likelihood needs, and they turn it into two
    matrix products (``correct @ log p.T + wrong @ log(1 − p).T``).
    """
    observed = ~np.isnan(responses)
    y = np.where(observed, responses, 0.0)
    return observed.astype(float), y, observed - y


def sparse_scores(responses: np.ndarray) -> tuple[sparse.csr_array, sparse.csr_array, sparse.csr_array]:
    """:func:`split_scores` as sparse matrices that store only the answered cells.

    Real response matrices are mostly unanswered (ASSIST0910: ~1% of a student's row), so
    the likelihood products cost O(answers) instead of O(students x items).
    """
    student, item = np.nonzero(~np.isnan(responses))
    y = responses[student, item]

    def build(values: np.ndarray) -> sparse.csr_array:
        return sparse.csr_array((values, (student, item)), shape=responses.shape)

    return build(np.ones_like(y)), build(y), build(1.0 - y)


def response_matrix(students: Sequence[StudentResponses], qmatrix: QMatrix) -> np.ndarray:
    """Students x items scores in ``qmatrix.items`` order, ``np.nan`` where not answered.

    A student who answered an item more than once gets the mean of those scores (the
    Bernoulli-weight reading of repeated attempts). Item ids the Q-matrix does not define
    raise :class:`QMatrixError` naming them, rather than being dropped silently.
    """
    column = {item_id: i for i, item_id in enumerate(qmatrix.item_ids)}
    unknown = qmatrix.unknown_items(r.item_id for s in students for r in s.responses)
    if unknown:
        raise QMatrixError([f"unknown item ids for Q-matrix '{qmatrix.id}': {', '.join(unknown)}"])
    total = np.zeros((len(students), len(column)))
    count = np.zeros_like(total)
    for s, student in enumerate(students):
        for response in student.responses:
            i = column[response.item_id]
            total[s, i] += response.score
            count[s, i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)
