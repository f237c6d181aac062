"""A student's responses to items: correctness (or a partial-credit score) and optional answer text."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from qmatrix.identifiers import Identifier

__all__ = ["Response", "StudentResponses", "group_by_student", "load_responses_csv", "score_of"]


class Response(BaseModel):
    """One response. ``correct`` is a bool or a score in [0, 1] (partial credit)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    item_id: Identifier
    correct: bool | float = Field(description="true/false, or a score in [0, 1]")
    answer: str | None = Field(default=None, description="the student's free-text answer, if any")

    @field_validator("correct")
    @classmethod
    def _score_in_unit_interval(cls, value: bool | float) -> bool | float:
        if isinstance(value, bool):
            return value
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError("score must be a boolean or a number in [0, 1]")
        return float(value)

    @property
    def score(self) -> float:
        return score_of(self.correct)


def score_of(correct: bool | float) -> float:
    return 1.0 if correct is True else 0.0 if correct is False else float(correct)


class StudentResponses(BaseModel):
    """All responses of one student (the unit a diagnosis is asked for)."""

    model_config = ConfigDict(frozen=True)

    student_id: str
    responses: tuple[Response, ...]

    def item_ids(self) -> list[str]:
        return [r.item_id for r in self.responses]


def group_by_student(rows: Iterable[tuple[str, Response]]) -> list[StudentResponses]:
    by_student: dict[str, list[Response]] = {}
    for student_id, response in rows:
        by_student.setdefault(student_id, []).append(response)
    return [StudentResponses(student_id=s, responses=tuple(rs)) for s, rs in by_student.items()]


def load_responses_csv(path: str | Path, *, student_id: str | None = None) -> list[StudentResponses]:
    """Read a long-format CSV: ``[student_id,]item_id,correct[,answer]``.

    ``correct`` accepts 0/1, true/false or a score in [0, 1]. Without a ``student_id``
    column, every row belongs to one student (``student_id`` argument, default the file stem).
    """
    p = Path(path)
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields: Sequence[str] = reader.fieldnames or []
        missing = [f for f in ("item_id", "correct") if f not in fields]
        if missing:
            raise ValueError(f"{p.name}: missing column(s) {', '.join(missing)}")
        rows: list[tuple[str, Response]] = []
        for line, row in enumerate(reader, start=2):
            item_id = (row.get("item_id") or "").strip()
            if not item_id:
                raise ValueError(f"{p.name}, line {line}, column 'item_id': must not be empty")
            raw = (row.get("correct") or "").strip().lower()
            try:
                value: bool | float = {"true": True, "false": False}.get(raw, None)  # type: ignore[assignment]
                if value is None:
                    number = float(raw)
                    value = bool(number) if raw in ("0", "1") else number
                response = Response(item_id=item_id, correct=value, answer=row.get("answer") or None)
            except ValueError as exc:
                raise ValueError(
                    f"{p.name}, line {line}, column 'correct': {raw!r} is not 0/1, true/false or a score in [0,1]"
                ) from exc
            sid = (row.get("student_id") or "").strip() or student_id or p.stem
            rows.append((sid, response))
    return group_by_student(rows)
