"""Stack or single member: the choice that keeps a calibrated federation from falling below its best member.

A stack fitted on a few hundred validation students can lose to one of its own members on new students: its
weights are fitted in-sample, per concept, on rows a weak member fits by chance. So the stacking calibration
scores, by k-fold cross-validation over the validation students (each fold predicted by parameters fitted on the
other folds), the full stack and each member on its own (the same stacking fit on that member's answers alone, so
its scale is calibrated too), on the loss the stack is fitted on: squared error against the truth, per
(student, concept) pair, through the aggregator a diagnosis uses.

**The rule.** The best single member replaces the stack only when it beats the stack by more than one standard
error of their paired difference (errors summed per student, the unit the folds split on); otherwise the stack is
kept. Clear evidence is asked of the change, not of the status quo: with few validation students the standard error
is wide, and dropping every other member on a noisy margin would change who is asked (and charged) on chance.
When the member wins, it is served and every other member gets weight 0. The record's ``params.selection`` holds
every candidate's cross-validated score, the margin and the choice.

Where the served member did not answer a concept (it failed, or was never asked) its weights would leave only the
intercept: there the stack of the other members answers instead (:class:`SelectedStackingAggregator`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from calibration.validation import Predictions, ValidationSet
from diagnosis import NO_NOISE, Aggregation, Aggregator, CalibrationTag, StackingAggregator
from privacy import Mechanism

__all__ = ["STACK", "HeldOut", "SelectedStackingAggregator", "Selection", "choose", "cross_validated_losses",
           "held_out_predictions"]

STACK = "stack"
CRITERION = "cross-validated squared error against the truth, per (student, concept) pair"
RULE = ("the best single member replaces the stack only if its loss is below the stack's by more than one standard "
        "error")

# The candidates fitted on a part of the validation students: candidate name -> the aggregator that scores it.
FitCandidates = Callable[[ValidationSet], Mapping[str, Aggregator]]


@dataclass(frozen=True)
class Selection:
    """What the choice saw: each candidate's cross-validated loss, the stack's margin over the best member (and
    one standard error of it), and the candidate served."""

    chosen: str
    scores: dict[str, float]
    best_single: str | None
    margin: float  # best single's loss − the stack's (positive: the stack is better)
    standard_error: float
    folds: int

    def to_json(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "criterion": CRITERION, "rule": RULE, "folds": self.folds,
                "scores": dict(self.scores), "best_single": self.best_single, "margin": self.margin,
                "standard_error": self.standard_error}

    def note(self) -> str:
        scores = ", ".join(f"{name} {loss:.5f}" for name, loss in sorted(self.scores.items(), key=lambda kv: kv[1]))
        if self.chosen == STACK:
            verdict = (f"the stack is served: the best single member ({self.best_single}) does not beat it by more "
                       f"than one standard error ({self.standard_error:.5f}; the stack's margin {self.margin:+.5f})")
        else:
            verdict = (f"{self.chosen} alone is served (the others get weight 0): it beats the stack by "
                       f"{-self.margin:.5f}, more than one standard error ({self.standard_error:.5f})")
        return f"stack or single member, by {self.folds}-fold {CRITERION}: {scores}; {verdict}"


HeldOut = dict[str, list[dict[str, float]]]  # candidate -> per validation student: concept -> held-out prediction


def held_out_predictions(fit: FitCandidates, data: ValidationSet, folds: int) -> HeldOut:
    """candidate -> per validation student, each concept's prediction by the candidate fitted on the other folds
    (k-fold over the students; the fold assignment is seeded, as for the record's ``validation_mae``)."""
    k = min(folds, len(data))
    fold_of = np.random.default_rng(0).permutation(len(data)) % k
    predicted: HeldOut = {}
    for f in range(k):
        train_idx, held_idx = np.flatnonzero(fold_of != f).tolist(), np.flatnonzero(fold_of == f).tolist()
        train = data.subset(train_idx)
        for name, aggregator in fit(train).items():
            per_student = predicted.setdefault(name, [{} for _ in range(len(data))])
            for i in held_idx:
                got = aggregator.aggregate(data.answers[i], list(data.truths[i]), mechanism=data.mechanisms[i]).mastery
                per_student[i] = {c: got[c] for c in data.truths[i] if c in got}
    return predicted


def cross_validated_losses(predicted: HeldOut, data: ValidationSet) -> tuple[dict[str, np.ndarray], int]:
    """candidate -> per validation student, the summed squared error of its held-out predictions over the pairs
    every candidate predicted (so the candidates are compared on the same pairs); and the pairs counted."""
    candidates = list(predicted)
    losses = {name: np.zeros(len(data)) for name in candidates}
    pairs = 0
    for i, truth in enumerate(data.truths):
        shared = set.intersection(*(set(predicted[name][i]) for name in candidates))
        pairs += len(shared)
        for name in candidates:
            losses[name][i] = sum((predicted[name][i][c] - truth[c]) ** 2 for c in shared)
    return losses, pairs


def choose(losses: Mapping[str, np.ndarray], pairs: int, folds: int) -> Selection:
    """The one-standard-error rule between the stack (``STACK``) and the best of the other candidates."""
    scores = {name: float(v.sum() / pairs) if pairs else float("nan") for name, v in losses.items()}
    singles = {name: s for name, s in scores.items() if name != STACK}
    if not singles or not pairs:
        return Selection(chosen=STACK, scores=scores, best_single=None, margin=float("nan"),
                         standard_error=float("nan"), folds=folds)
    best = min(singles, key=lambda name: (singles[name], name))
    diff = losses[best] - losses[STACK]  # per student; the margin is their pooled mean
    n = diff.size
    standard_error = float(np.sqrt(n) * diff.std(ddof=1) / pairs) if n > 1 else float("inf")
    margin = float(diff.sum() / pairs)
    chosen = best if -margin > standard_error else STACK  # the member only on clear evidence (module docstring)
    return Selection(chosen=chosen, scores=scores, best_single=best, margin=margin, standard_error=standard_error,
                     folds=folds)


class SelectedStackingAggregator(Aggregator):
    """One member's stack (``selected``: its weights, every other entity at 0) where ``member`` answered a concept;
    the other members' stack (``others``) where it did not (it failed, or was not asked), not the intercept alone.
    Entities in ``excluded`` are dropped first, as :mod:`calibration.exclusion` prescribes."""

    def __init__(
        self, *, member: str, selected: StackingAggregator, others: StackingAggregator, excluded: Iterable[str] = (),
        calibration: CalibrationTag | None = None,
    ) -> None:
        super().__init__(calibration=calibration)
        self.member, self.selected, self.others, self.excluded = member, selected, others, frozenset(excluded)

    def aggregate(self, predictions: Predictions, concepts: Sequence[str], *, mechanism: Mechanism = NO_NOISE) -> Aggregation:
        kept = {e: v for e, v in predictions.items() if e not in self.excluded}
        result = self.selected.aggregate(kept, concepts, mechanism=mechanism)
        uncovered = [c for c, names in result.contributors.items() if self.member not in names]
        if not uncovered:
            return result
        backup = self.others.aggregate(kept, uncovered, mechanism=mechanism)
        return replace(result, mastery={**result.mastery, **backup.mastery})
