"""SIMULATED students with known ground truth, from the DINA model.

DINA ("deterministic input, noisy and"): a student masters each concept or not
(``alpha``); they would answer an item correctly iff they master every concept the item
requires (``eta``), but slip with probability ``slip`` and guess with probability ``guess``:

    P(correct) = (1 - slip) ** eta * guess ** (1 - eta)

Everything produced here is labelled simulated (``Dataset.simulated``), so a report can
never mistake it for real students.
"""

from __future__ import annotations

import numpy as np

from qmatrix.datasets import Dataset
from qmatrix.model import QMatrix
from qmatrix.responses import Response, StudentResponses

__all__ = ["DINA_GUESS", "DINA_MASTERY_RATE", "DINA_SLIP", "simulate_dina"]

# The defaults: what a dataset simulated without further choices (``synthetic``) used, for its labels to say.
DINA_SLIP, DINA_GUESS, DINA_MASTERY_RATE = 0.1, 0.2, 0.5


def simulate_dina(
    qmatrix: QMatrix,
    *,
    n_students: int,
    slip: float = DINA_SLIP,
    guess: float = DINA_GUESS,
    mastery_rate: float = DINA_MASTERY_RATE,
    seed: int = 0,
    student_prefix: str = "sim",
    items_per_student: int | None = None,
) -> Dataset:
    """Generate ``n_students`` with independent Bernoulli(``mastery_rate``) mastery per concept.

    ``items_per_student``: each student answers that many items drawn at random (in Q-matrix order), as a real
    student answers part of a large bank; None: every item. The truth covers every concept either way.
    """
    for name, value in (("slip", slip), ("guess", guess), ("mastery_rate", mastery_rate)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if slip + guess >= 1.0:
        raise ValueError(f"slip + guess must be < 1 for items to be informative, got {slip + guess}")
    if n_students < 1:
        raise ValueError(f"n_students must be >= 1, got {n_students}")
    if items_per_student is not None and items_per_student < 1:
        raise ValueError(f"items_per_student must be >= 1, got {items_per_student}")
    rng = np.random.default_rng(seed)
    q = qmatrix.matrix.astype(bool)  # (items, concepts)
    alpha = rng.random((n_students, len(qmatrix.concepts))) < mastery_rate  # (students, concepts)
    # eta[s, i] = student s masters every concept item i requires: no required concept unmastered. A product, not a
    # (students, items, concepts) array, which a tenant's bank (thousands of items, hundreds of concepts) would not fit.
    eta = ((~alpha).astype(np.float64) @ q.T.astype(np.float64)) == 0
    p_correct = np.where(eta, 1.0 - slip, guess)
    correct = rng.random(p_correct.shape) < p_correct
    n_items = len(qmatrix.items)
    # Drawn after every other draw, so the default (every item) simulates exactly what it always did.
    answered = (
        [np.sort(rng.choice(n_items, size=items_per_student, replace=False)) for _ in range(n_students)]
        if items_per_student is not None and items_per_student < n_items
        else [np.arange(n_items)] * n_students
    )
    width = len(str(n_students))
    students: list[StudentResponses] = []
    truth: dict[str, dict[str, float]] = {}
    for s in range(n_students):
        sid = f"{student_prefix}{s + 1:0{width}d}"
        students.append(
            StudentResponses(
                student_id=sid,
                responses=tuple(
                    Response(item_id=qmatrix.items[i].id, correct=bool(correct[s, i])) for i in answered[s]
                ),
            )
        )
        truth[sid] = {c: float(alpha[s, k]) for k, c in enumerate(qmatrix.concepts)}
    return Dataset(
        name=f"simulated-dina({qmatrix.id})", qmatrix=qmatrix, students=students, simulated=True, true_mastery=truth
    )
