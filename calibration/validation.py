"""The validation students a calibration is fitted on: the entities' answers as diagnoses will see them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from diagnosis import NO_NOISE, MechanismDescription

__all__ = ["Predictions", "Truth", "ValidationSet", "stacking_rows"]

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> value
Truth = Mapping[str, float]  # concept -> mastery in [0, 1]


@dataclass(frozen=True)
class ValidationSet:
    """Per validation student (same order in every list):

    * ``answers`` — the entities' answers privatized at the noise diagnoses will use;
    * ``clean`` — the same answers before the noise (what the posterior's τ is fitted on), or None
      when they were not collected (methods that fit on the released answers do not need them);
    * ``mechanisms`` — the public description of the noise each student's answers went through;
    * ``truths`` — the mastery the calibration is fitted to.
    """

    answers: Sequence[Predictions]
    truths: Sequence[Truth]
    clean: Sequence[Predictions] | None
    mechanisms: Sequence[MechanismDescription]

    def __post_init__(self) -> None:
        sizes = {len(self.answers), len(self.truths), len(self.mechanisms)} | (
            {len(self.clean)} if self.clean is not None else set()
        )
        if len(sizes) != 1:
            raise ValueError(
                f"validation lists differ in length: {len(self.answers)} answers, {len(self.truths)} truths, "
                f"{'none' if self.clean is None else len(self.clean)} clean answers, {len(self.mechanisms)} mechanisms"
            )

    def clean_answers(self) -> Sequence[Predictions]:
        if self.clean is None:
            raise ValueError("this method fits on the clean (pre-noise) answers, and none were collected")
        return self.clean

    @classmethod
    def noiseless(cls, answers: Sequence[Predictions], truths: Sequence[Truth]) -> ValidationSet:
        """Answers released without noise (they are their own clean answers)."""
        return cls(answers=answers, truths=truths, clean=answers, mechanisms=[NO_NOISE] * len(answers))

    def __len__(self) -> int:
        return len(self.answers)

    def subset(self, indices: Sequence[int]) -> ValidationSet:
        return ValidationSet(
            answers=[self.answers[i] for i in indices], truths=[self.truths[i] for i in indices],
            clean=None if self.clean is None else [self.clean[i] for i in indices],
            mechanisms=[self.mechanisms[i] for i in indices],
        )


def stacking_rows(
    predictions: Sequence[Predictions], truths: Sequence[Truth], entities: Sequence[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """concept -> (answers: rows x entities, truth: rows) over the students where every entity answered it."""
    rows: dict[str, tuple[list[list[float]], list[float]]] = {}
    for preds, truth in zip(predictions, truths):
        for concept, value in truth.items():
            if all(e in preds and concept in preds[e] for e in entities):
                x, y = rows.setdefault(concept, ([], []))
                x.append([float(preds[e][concept]) for e in entities])
                y.append(float(value))
    return {
        c: (np.array(x, dtype=float).reshape(len(y), len(entities)), np.array(y, dtype=float))
        for c, (x, y) in rows.items()
    }
