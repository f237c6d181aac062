"""A student report a teacher can read (``GET /v1/students/{student_id}/report``, README "Student report").

Built from the latest stored diagnosis of the student on one Q-matrix (the released answer the privacy ledger keeps
for its repeat rule: reading it again releases nothing new and costs no ε). It shows, per concept in the Q-matrix's
order and with its names: the mastery estimate as a bar, its credible interval as a line across the bar, how many of
the student's answers the estimate rests on, and a plain-words reading; then what the diagnosis rests on (which
entities answered, the calibration, local-fed's model version) and what the interval means.

This module builds the report's content; ``app.presentation.report`` draws it (HTML page, SVG or PNG chart).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.schemas.students import StoredDiagnosis
from diagnosis.measured import MeasuredError, Narrowing, answers_to_narrow
from diagnosis.posterior import beta_floor_width
from qmatrix import QMatrix

__all__ = ["MAX_MORE", "THIN", "ConceptLine", "StudentReport", "SuggestedItem", "build_report"]

WIDE = 0.5  # an interval wider than this says the answers so far cannot tell (the reading says so)
# An interval wider than this is marked as resting on thin evidence: about ±0.15 is the most a mastery estimate can
# be off and still be read in the right band ("partly" spans 0.4–0.7). The number of further answers that would
# narrow it that far is read from the interval the diagnosis served — a stacking calibration's measured error, whose
# base part no number of answers removes (diagnosis.measured.answers_to_narrow) — or, for any other interval, from a
# Beta-Bernoulli interval at the estimate (docs/uncertainty.md): a guide either way, assuming the estimate stays
# where it is (the next answers are like those so far).
THIN = 0.3
MAX_MORE = 200  # beyond this the report says "many"


@dataclass(frozen=True)
class ConceptLine:
    """One concept of the report."""

    concept: str
    mastery: float
    low: float | None
    high: float | None
    evidence: int | None  # the student's answers assessing it (None: not recorded with this diagnosis)
    level: float = 0.9  # the credible level of the interval
    # the measured spread the diagnosis served the interval with (None: not a measured interval: the Beta guide)
    spread: MeasuredError | None = None

    @property
    def thin(self) -> bool:
        """The interval is wider than :data:`THIN` (or there is none and fewer than 5 answers)."""
        if self.low is not None and self.high is not None:
            return self.high - self.low > THIN
        return self.evidence is not None and self.evidence < 5

    @property
    def _narrowing(self) -> Narrowing | None:
        """The served measured interval's narrowing to :data:`THIN` (None: not thin, or not a measured interval)."""
        if not self.thin or self.spread is None or self.low is None:
            return None
        return answers_to_narrow(self.mastery, self.evidence or 0, THIN, self.spread, self.level)

    @property
    def narrowest(self) -> float | None:
        """The width the interval keeps however many answers come, when that is wider than :data:`THIN` (the
        measured spread's base); None when more answers can narrow it (or the evidence is not thin)."""
        narrowing = self._narrowing
        return narrowing.floor if narrowing is not None and narrowing.more is None else None

    @property
    def more_answers(self) -> int | None:
        """About how many more answers on the concept would narrow its interval below :data:`THIN` (None: not thin,
        or no number would — :attr:`narrowest`; ``MAX_MORE + 1``: more than that)."""
        if not self.thin:
            return None
        narrowing = self._narrowing
        if narrowing is not None:
            return None if narrowing.more is None else min(narrowing.more, MAX_MORE + 1)
        have = self.evidence or 0
        for more in range(1, MAX_MORE + 1):
            if beta_floor_width(have + more, self.level, self.mastery) <= THIN:
                return more
        return MAX_MORE + 1

    @property
    def more_text(self) -> str:
        """The thin-evidence note in words ("" when the evidence is not thin)."""
        if not self.thin:
            return ""
        floor = self.narrowest
        if floor is not None:
            return (f"thin evidence: more answers alone will not narrow this below ±{THIN / 2:g}: the calibration's "
                    f"own error keeps it at least {floor:.2f} wide")
        more = self.more_answers
        if more is None:
            return ""
        count = f"more than {MAX_MORE}" if more > MAX_MORE else f"about {more}"
        return f"thin evidence: {count} more answer{'s' if more != 1 else ''} on it would narrow it"

    @property
    def reading(self) -> str:
        """Plain words for the estimate: bands of the estimate, unless the interval is too wide to tell."""
        if self.low is not None and self.high is not None and self.high - self.low > WIDE:
            return "not enough evidence yet to tell"
        if self.mastery >= 0.7:
            return "likely mastered"
        if self.mastery >= 0.4:
            return "partly mastered"
        return "likely not yet mastered"


@dataclass(frozen=True)
class SuggestedItem:
    """An item to ask next for the report's thin-evidence concepts (``app.services.next_items``), with the concepts it
    informs."""

    item_id: str
    informs: tuple[str, ...]


@dataclass(frozen=True)
class StudentReport:
    student_id: str
    qmatrix_id: str
    diagnosed_at: str
    concepts: list[ConceptLine]
    level: float | None  # the credible level of the intervals (0.9: 90 %)
    basis: str  # one sentence: calibrated or not, trained model or not
    entities: list[str]  # the entities whose answers the diagnosis combined
    calibration: str | None
    model_version: str | None
    aggregation: str
    privacy: str
    not_answered: list[str] = field(default_factory=list)  # assessed concepts no entity answered
    next_items: list[SuggestedItem] = field(default_factory=list)  # to ask next for thin concepts (issue 34)

    @property
    def level_percent(self) -> str:
        return f"{round(100 * self.level)} %" if self.level is not None else ""


def build_report(stored: StoredDiagnosis, q: QMatrix | None) -> StudentReport:
    """The report of one stored diagnosis; ``q`` (the Q-matrix, when it still exists) orders and names the
    concepts."""
    d: dict[str, Any] = stored.diagnosis
    mastery: dict[str, float] = d.get("mastery") or {}
    intervals: dict[str, list[float]] = d.get("mastery_interval") or {}
    evidence: dict[str, int] = d.get("evidence") or {}
    spread = _measured_spread(d.get("interval_spread"))
    order = [c for c in q.concepts if c in mastery] if q is not None else []
    order += sorted(c for c in mastery if c not in order)
    lines = [ConceptLine(concept=c, mastery=float(mastery[c]),
                         low=float(intervals[c][0]) if c in intervals else None,
                         high=float(intervals[c][1]) if c in intervals else None,
                         evidence=evidence.get(c) if evidence else None,
                         level=float(d.get("interval_level") or 0.9),
                         spread=spread if c in intervals else None) for c in order]
    basis = d.get("basis") or {}
    reports = d.get("entities") or []
    answered = [r["name"] for r in reports if r.get("mastery")] if reports else []
    if not answered:  # entities were not included in the response: who did not answer is still known
        left = set(d.get("failed_entities") or []) | {s["name"] for s in d.get("skipped_entities") or []}
        answered = [f"{len(left)} entit{'y' if len(left) == 1 else 'ies'} did not answer"] if left else []
    privacy = d.get("privacy") or {}
    epsilon = privacy.get("epsilon")
    return StudentReport(
        student_id=stored.diagnosis.get("student_id", ""), qmatrix_id=str(d.get("qmatrix_id") or ""),
        diagnosed_at=stored.created_at, concepts=lines, level=d.get("interval_level"),
        basis=str(basis.get("summary") or "not recorded"), entities=answered,
        calibration=(f"{basis.get('calibration_id')} ({basis.get('calibration_students')} students)"
                     if basis.get("calibration") == "calibrated" else "uncalibrated"),
        model_version=basis.get("local_model_version") or basis.get("local_model"),
        aggregation=str(d.get("aggregation") or ""),
        privacy=(f"each answer privatized ({privacy.get('mechanism')}, ε {epsilon:g})" if epsilon is not None
                 else "answers not privatized"),
        not_answered=list(d.get("missing_concepts") or []),
    )


def _measured_spread(data: dict[str, Any] | None) -> MeasuredError | None:
    """The measured spread a stored diagnosis served its intervals with (its ``interval_spread``); None for any
    other interval, or a diagnosis stored before the field existed (the Beta guide stands in)."""
    if not data or data.get("kind") != "measured":
        return None
    # how many validation pairs measured it is not served (nor needed: the guide reads the spread alone)
    return MeasuredError(base=float(data["base"]), per_answer=float(data["per_answer"]), rows=1)
