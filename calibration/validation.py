"""The validation students a calibration is fitted on: the entities' answers as diagnoses will see them."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from calibration.held_out import ItemCheck
from diagnosis import NO_NOISE
from privacy import Mechanism

__all__ = ["Predictions", "Truth", "ValidationSet", "complete_concepts", "stacking_rows", "student_rows"]

Predictions = Mapping[str, Mapping[str, float]]  # entity -> concept -> value
Truth = Mapping[str, float]  # concept -> mastery in [0, 1]


@dataclass(frozen=True)
class ValidationSet:
    """Per validation student (same order in every list):

    * ``answers`` — the entities' answers privatized at the noise diagnoses will use;
    * ``clean`` — the same answers before the noise (what the posterior's τ is fitted on), or None
      when they were not collected (methods that fit on the released answers do not need them);
    * ``mechanisms`` — the mechanism each student's answers were released through;
    * ``truths`` — the mastery the calibration is fitted to;
    * ``evidence`` — how many of the student's answers assess each concept, where known (a stack's interval
      narrows with them: :mod:`calibration.measured`);
    * ``checks`` — the student's responses kept back from the entities, where they were split
      (:mod:`calibration.held_out`: what a DP release's guard scores its candidates' forecasts on).

    ``failures`` (entity -> validation students it was asked about and failed for, the students no entity
    answered included) and ``n_asked`` (validation students asked; None: as many as answered) say how often each
    entity answered, so a calibration can leave out one that rarely did (:meth:`answer_counts`).
    """

    answers: Sequence[Predictions]
    truths: Sequence[Truth]
    clean: Sequence[Predictions] | None
    mechanisms: Sequence[Mechanism]
    failures: Mapping[str, int] = field(default_factory=dict)
    n_asked: int | None = None
    evidence: Sequence[Mapping[str, int]] | None = None  # per student: concept -> their answers on it (None: unknown)
    checks: Sequence[Sequence[ItemCheck]] | None = None  # per student: held-out responses (None: not split)

    def __post_init__(self) -> None:
        sizes = {len(self.answers), len(self.truths), len(self.mechanisms)} | (
            {len(self.clean)} if self.clean is not None else set()
        ) | ({len(self.evidence)} if self.evidence is not None else set()) | (
            {len(self.checks)} if self.checks is not None else set())
        if len(sizes) != 1:
            raise ValueError(
                f"validation lists differ in length: {len(self.answers)} answers, {len(self.truths)} truths, "
                f"{'none' if self.clean is None else len(self.clean)} clean answers, {len(self.mechanisms)} "
                f"mechanisms, {'none' if self.checks is None else len(self.checks)} held-out checks"
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

    @property
    def students_asked(self) -> int:
        return len(self) if self.n_asked is None else max(self.n_asked, len(self))

    def answer_counts(self) -> dict[str, int]:
        """entity -> validation students it answered (any concept), for every entity that answered or failed."""
        counts = dict.fromkeys(self.failures, 0)
        for preds in self.answers:
            for entity, values in preds.items():
                counts[entity] = counts.get(entity, 0) + (1 if values else 0)
        return counts

    def without(self, entities: Collection[str]) -> ValidationSet:
        """The same students with ``entities``' answers (noisy and clean) removed."""
        if not entities:
            return self

        def drop(preds: Predictions) -> Predictions:
            return {e: v for e, v in preds.items() if e not in entities}

        return ValidationSet(
            answers=[drop(p) for p in self.answers], truths=self.truths,
            clean=None if self.clean is None else [drop(p) for p in self.clean], mechanisms=self.mechanisms,
            failures={e: n for e, n in self.failures.items() if e not in entities}, n_asked=self.n_asked,
            evidence=self.evidence, checks=self.checks,
        )

    def subset(self, indices: Sequence[int]) -> ValidationSet:
        return ValidationSet(
            answers=[self.answers[i] for i in indices], truths=[self.truths[i] for i in indices],
            clean=None if self.clean is None else [self.clean[i] for i in indices],
            mechanisms=[self.mechanisms[i] for i in indices],
            evidence=None if self.evidence is None else [self.evidence[i] for i in indices],
            checks=None if self.checks is None else [self.checks[i] for i in indices],
        )


def complete_concepts(preds: Predictions, truth: Truth, entities: Sequence[str]) -> list[str]:
    """The concepts of one student's truth that every entity of ``entities`` answered: a stack's rows."""
    return [c for c in truth if all(e in preds and c in preds[e] for e in entities)]


def student_rows(predictions: Sequence[Predictions], truths: Sequence[Truth], entities: Sequence[str]
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per student, (answers: rows × entities, truth: rows) over its complete concepts (:func:`complete_concepts`)."""
    out = []
    for preds, truth in zip(predictions, truths):
        concepts = complete_concepts(preds, truth, entities)
        x = np.array([[float(preds[e][c]) for e in entities] for c in concepts], dtype=float).reshape(-1, len(entities))
        out.append((x, np.array([float(truth[c]) for c in concepts], dtype=float)))
    return out


def stacking_rows(
    predictions: Sequence[Predictions], truths: Sequence[Truth], entities: Sequence[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """concept -> (answers: rows x entities, truth: rows) over the students where every entity answered it."""
    rows: dict[str, tuple[list[list[float]], list[float]]] = {}
    for preds, truth in zip(predictions, truths):
        for concept in complete_concepts(preds, truth, entities):
            x, y = rows.setdefault(concept, ([], []))
            x.append([float(preds[e][concept]) for e in entities])
            y.append(float(truth[concept]))
    return {
        c: (np.array(x, dtype=float).reshape(len(y), len(entities)), np.array(y, dtype=float))
        for c, (x, y) in rows.items()
    }
