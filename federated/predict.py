"""Diagnosis with a trained :class:`~federated.model.CDModel`, in the project's own types.

Inputs are :class:`qmatrix.StudentResponses` over a :class:`qmatrix.QMatrix`, which may be a
different item bank from the one trained on: items are features, not ids. Items a student
answered that the model never saw in training are still used, and listed in
``Diagnosis.unseen_items`` so a report can say its evidence includes untested items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from federated.data import encode_students
from federated.model import CDModel
from federated.models import DiagnosisModel
from qmatrix import QMatrix, Response, StudentResponses

__all__ = [
    "Diagnosis",
    "diagnose",
    "diagnose_batch",
    "predict_heldout",
    "predict_mastery",
    "predict_mastery_batch",
    "predict_response_proba",
    "predict_response_proba_batch",
]


@dataclass(frozen=True)
class Diagnosis:
    """Mastery of every Q-matrix concept (the caller filters to the Q-filtered set)."""

    student_id: str
    mastery: dict[str, float]
    unseen_items: tuple[str, ...]
    n_responses: int

    @property
    def has_unseen_items(self) -> bool:
        return bool(self.unseen_items)


def _mastery(model: CDModel, qmatrix: QMatrix, students: Sequence[StudentResponses]) -> torch.Tensor:
    data = encode_students(qmatrix, students, table=model.item_table(qmatrix))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            feats, scores, observed = data.batch(range(len(data)))
            return model.mastery(feats.to(device), scores.to(device), observed.to(device)).cpu()
    finally:
        model.train(was_training)


def diagnose_batch(model: CDModel, qmatrix: QMatrix, students: Sequence[StudentResponses]) -> list[Diagnosis]:
    """One :class:`Diagnosis` per student, in order, from one batched forward pass."""
    if not students:
        return []
    mastery = _mastery(model, qmatrix, students)
    column = {c: k for k, c in enumerate(model.concepts)}
    out = []
    for s, student in enumerate(students):
        unseen = dict.fromkeys(r.item_id for r in student.responses if r.item_id not in model.seen_item_ids)
        out.append(
            Diagnosis(
                student_id=student.student_id,
                mastery={c: float(mastery[s, column[c]]) for c in qmatrix.concepts},
                unseen_items=tuple(unseen),
                n_responses=len(student.responses),
            )
        )
    return out


def diagnose(model: CDModel, qmatrix: QMatrix, responses: StudentResponses) -> Diagnosis:
    return diagnose_batch(model, qmatrix, [responses])[0]


def predict_mastery_batch(
    model: CDModel, qmatrix: QMatrix, students: Sequence[StudentResponses]
) -> list[dict[str, float]]:
    return [d.mastery for d in diagnose_batch(model, qmatrix, students)]


def predict_mastery(model: CDModel, qmatrix: QMatrix, responses: StudentResponses) -> dict[str, float]:
    """Concept -> mastery in [0, 1] for every concept of ``qmatrix``."""
    return diagnose(model, qmatrix, responses).mastery


def predict_response_proba_batch(
    model: CDModel, qmatrix: QMatrix, students: Sequence[StudentResponses], item_ids: Sequence[str]
) -> list[dict[str, float]]:
    """Per student, item id -> P(correct) for each of ``item_ids`` (any items of ``qmatrix``)."""
    if not students:
        return []
    for item_id in item_ids:
        qmatrix.item(item_id)  # raises QMatrixError for an unknown id
    mastery = _mastery(model, qmatrix, students)
    data = encode_students(qmatrix, [], table=model.item_table(qmatrix))
    row = {item_id: r for r, item_id in enumerate(qmatrix.item_ids)}
    device = next(model.parameters()).device
    targets = data.features[[row[i] for i in item_ids]].to(device)
    with torch.no_grad():
        proba = model.response_proba(mastery.to(device), targets.expand(len(students), -1, -1)).cpu()
    return [{item_id: float(proba[s, t]) for t, item_id in enumerate(item_ids)} for s in range(len(students))]


def predict_response_proba(
    model: CDModel, qmatrix: QMatrix, responses: StudentResponses, item_ids: Sequence[str]
) -> dict[str, float]:
    return predict_response_proba_batch(model, qmatrix, [responses], item_ids)[0]


def predict_heldout(
    model: DiagnosisModel, qmatrix: QMatrix, observed: Sequence[Sequence[Response]],
    held: Sequence[Sequence[Response]], *, batch_size: int = 128,
) -> np.ndarray:
    """P(correct) of every held-out response (flattened in order), each student diagnosed from their
    ``observed`` responses only: the model's own (posterior-predictive) prediction."""
    out: list[np.ndarray] = []
    model_was_training = model.training
    model.eval()
    try:
        for start in range(0, len(observed), batch_size):
            chunk = range(start, min(start + batch_size, len(observed)))
            students = [StudentResponses(student_id=str(i), responses=tuple(observed[i]) + tuple(held[i]))
                        for i in chunk]
            data = encode_students(qmatrix, students, table=model.item_table(qmatrix))
            feats, scores, present = data.batch(range(len(students)))
            position = torch.arange(present.shape[1]).unsqueeze(0)
            n_obs = torch.tensor([len(observed[i]) for i in chunk]).unsqueeze(1)
            n_all = torch.tensor([len(observed[i]) + len(held[i]) for i in chunk]).unsqueeze(1)
            with torch.no_grad():
                proba = model(feats, scores, present & (position < n_obs))
            target = (position >= n_obs) & (position < n_all)
            out.append(proba[target].numpy().astype(float))  # row-major: student by student, held order
    finally:
        model.train(model_was_training)
    return np.concatenate(out) if out else np.zeros(0)
