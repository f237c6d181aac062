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

__all__ = ["simulate_dina"]


def simulate_dina(
    qmatrix: QMatrix,
    *,
    n_students: int,
    slip: float = 0.1,
    guess: float = 0.2,
    mastery_rate: float = 0.5,
    seed: int = 0,
    student_prefix: str = "sim",
) -> Dataset:
    """Generate ``n_students`` with independent Bernoulli(``mastery_rate``) mastery per concept."""
    for name, value in (("slip", slip), ("guess", guess), ("mastery_rate", mastery_rate)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value}")
    if slip + guess >= 1.0:
        raise ValueError(f"slip + guess must be < 1 for items to be informative, got {slip + guess}")
    if n_students < 1:
        raise ValueError(f"n_students must be >= 1, got {n_students}")
    rng = np.random.default_rng(seed)
    q = qmatrix.matrix.astype(bool)  # (items, concepts)
    alpha = rng.random((n_students, len(qmatrix.concepts))) < mastery_rate  # (students, concepts)
    # eta[s, i] = student s masters every concept item i requires
    eta = ~((~alpha)[:, None, :] & q[None, :, :]).any(axis=2)
    p_correct = np.where(eta, 1.0 - slip, guess)
    correct = rng.random(p_correct.shape) < p_correct
    width = len(str(n_students))
    students: list[StudentResponses] = []
    truth: dict[str, dict[str, float]] = {}
    for s in range(n_students):
        sid = f"{student_prefix}{s + 1:0{width}d}"
        students.append(
            StudentResponses(
                student_id=sid,
                responses=tuple(
                    Response(item_id=item.id, correct=bool(correct[s, i])) for i, item in enumerate(qmatrix.items)
                ),
            )
        )
        truth[sid] = {c: float(alpha[s, k]) for k, c in enumerate(qmatrix.concepts)}
    return Dataset(
        name=f"simulated-dina({qmatrix.id})", qmatrix=qmatrix, students=students, simulated=True, true_mastery=truth
    )
