"""Entities a calibration leaves out: those with too few successful validation answers.

An entity that failed on most validation students (timeouts on a busy machine, a broken key) has
no measured accuracy: a stacking weight or a residual fitted on a handful of students is noise,
and stacking rows need every entity's answer, so one rarely-answering entity also starves the fit
of the others. Every method therefore fits on the other entities only, and the record lists the
left-out entity under ``params.excluded`` (with its successful answers out of the validation
students asked); its answers are dropped before aggregating, so it does not move a diagnosis
(stacking also shows its weight as 0). For Bayes post-processing this is exclusion, not the widest
measured τ: that τ would still let it move the posterior as much as the least accurate measured
member, which nothing says it is as good as.

An entity that was never asked (``skipped`` for every student, e.g. ``local-fed`` without a model
for the Q-matrix yet, or not in the federation when the calibration ran) is not left out: it is
unmeasured, as before (no stacking weight, no residual, not weighed by the posterior).

The minimum is ``min_answers``, or every validation student asked when fewer were asked (a calibration on 8
students cannot ask for 20 answers from anyone). Students count as asked although no entity answered them: an
entity that answered 3 of 30 is left out even when the others failed on the same 27.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from calibration.validation import ValidationSet
from diagnosis import Aggregation, PosteriorAggregator, ResidualAggregator, StackingAggregator
from diagnosis.aggregation import Predictions
from privacy import Mechanism

__all__ = [
    "DEFAULT_MIN_ANSWERS",
    "ExcludingPosteriorAggregator",
    "ExcludingResidualAggregator",
    "ExcludingStackingAggregator",
    "TooFewAnswers",
    "entities_to_exclude",
    "exclusion_note",
    "required_answers",
]

# 20: below it a per-entity weight or residual is fitted on fewer students than stacking fits a concept on.
DEFAULT_MIN_ANSWERS = 20

Exclusions = Mapping[str, Mapping[str, int]]  # entity -> {"answers": successful, "students": asked}


class TooFewAnswers(ValueError):
    """No entity answered enough validation students: there is nothing to calibrate."""


def required_answers(data: ValidationSet, min_answers: int) -> int:
    """The successful answers an entity needs: ``min_answers``, or every student asked when fewer were."""
    if min_answers < 1:
        raise ValueError(f"min_answers must be >= 1, got {min_answers}")
    return min(min_answers, data.students_asked)


def entities_to_exclude(data: ValidationSet, min_answers: int) -> dict[str, dict[str, int]]:
    """entity -> {"answers", "students"} for every asked entity with fewer successful answers than required.

    Raises :class:`TooFewAnswers` when that is every entity that answered at all.
    """
    required = required_answers(data, min_answers)
    counts = data.answer_counts()
    excluded = {
        e: {"answers": n, "students": data.students_asked} for e, n in sorted(counts.items()) if n < required
    }
    if counts and all(e in excluded for e in counts):
        raise TooFewAnswers(
            f"no entity answered at least {required} of the {data.students_asked} validation students "
            f"({_listing(excluded)}): nothing to calibrate"
        )
    return excluded


def exclusion_note(excluded: Exclusions, required: int) -> str:
    return (
        f"left out (fewer than {required} successful validation answers; weight 0, no fitted parameters, their "
        f"answers are not aggregated under this calibration; these counts are released as they are): "
        f"{_listing(excluded)}"
    )


def _listing(excluded: Exclusions) -> str:
    return ", ".join(f"{e} answered {c['answers']} of {c['students']}" for e, c in excluded.items())


class _DropsExcluded:
    """Aggregator mixin: the excluded entities' answers are dropped before the aggregator sees them, so they move
    nothing; a concept only they answered is reported missing (nothing trusted answered it)."""

    def __init__(self, *, excluded: Iterable[str] = (), **options: Any) -> None:
        super().__init__(**options)
        self.excluded = frozenset(excluded)

    def aggregate(
        self, predictions: Predictions, concepts: Sequence[str], *, mechanism: Mechanism
    ) -> Aggregation:
        kept = {e: v for e, v in predictions.items() if e not in self.excluded}
        return super().aggregate(kept, concepts, mechanism=mechanism)  # type: ignore[misc]


class ExcludingResidualAggregator(_DropsExcluded, ResidualAggregator):
    pass


class ExcludingStackingAggregator(_DropsExcluded, StackingAggregator):
    pass


class ExcludingPosteriorAggregator(_DropsExcluded, PosteriorAggregator):
    pass
