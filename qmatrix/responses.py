"""A student's responses to items: correctness (or a partial-credit score) and optional answer text."""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from qmatrix.identifiers import Identifier

__all__ = [
    "Response",
    "StudentResponses",
    "group_by_student",
    "load_responses_csv",
    "load_responses_wide_csv",
    "read_responses_csv",
    "score_of",
    "write_responses_csv",
]


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


_STUDENT_ID: TypeAdapter[str] = TypeAdapter(Identifier)


@contextlib.contextmanager
def _opened(p: Path) -> Iterator[TextIO]:
    """``p`` as text, a leading byte-order mark dropped (spreadsheets write one: the header's first name would carry
    it); the csv module's own errors (a field past its size limit…) become ``ValueError``s like every other problem of
    the file's content."""
    with p.open(newline="", encoding="utf-8-sig") as fh:
        try:
            yield fh
        except csv.Error as exc:
            raise ValueError(f"{p.name}: not a readable CSV: {exc}") from exc


def _student_id(cell: str, where: str) -> str:
    """The cell's student id, stripped, if it is one (``Identifier``: non-empty, at most 256 characters, nothing
    invisible). The refusal names the place, not the value: ids are personal data, and the message may be kept."""
    sid = cell.strip()
    try:
        return _STUDENT_ID.validate_python(sid)
    except ValidationError as exc:
        problems = "; ".join(e["msg"] for e in exc.errors(include_input=False, include_url=False))
        raise ValueError(f"{where}: not a valid student id ({problems})") from None


def load_responses_csv(path: str | Path, *, student_id: str | None = None) -> list[StudentResponses]:
    """Read a long-format CSV: ``[student_id,]item_id,correct[,answer]``.

    ``correct`` accepts 0/1, true/false or a score in [0, 1]. A student's responses may be spread over any
    rows. Without a ``student_id`` column, every row belongs to one student (``student_id`` argument, default the
    file stem); with one, every row must name a valid student id.
    """
    p = Path(path)
    with _opened(p) as fh:
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
            value = _correct(row.get("correct") or "", f"{p.name}, line {line}, column 'correct'")
            response = Response(item_id=item_id, correct=value, answer=row.get("answer") or None)
            if "student_id" in fields:
                sid = _student_id(row.get("student_id") or "", f"{p.name}, line {line}, column 'student_id'")
            else:
                sid = student_id or p.stem
            rows.append((sid, response))
    return group_by_student(rows)


def _correct(cell: str, where: str) -> bool | float:
    raw = cell.strip().lower()
    try:
        value: bool | float | None = {"true": True, "false": False}.get(raw)
        if value is None:
            number = float(raw)
            value = bool(number) if raw in ("0", "1") else number
        Response(item_id="x", correct=value)  # the one range check
    except ValueError as exc:
        raise ValueError(f"{where}: {raw!r} is not 0/1, true/false or a score in [0,1]") from exc
    return value


def load_responses_wide_csv(path: str | Path) -> list[StudentResponses]:
    """Read a wide-format CSV: ``student_id,<item id>,<item id>,...``, one row per student.

    A cell holds 0/1, true/false or a score in [0, 1]; an empty cell means the item was not
    answered. Students with no answered item are left out. A student id on a second row is refused
    (the form has one row per student: two rows of one student would otherwise count as two).
    """
    p = Path(path)
    with _opened(p) as fh:
        rows = [row for row in csv.reader(fh) if any(cell.strip() for cell in row)]
    if not rows or not rows[0] or rows[0][0].strip() != "student_id" or len(rows[0]) < 2:
        raise ValueError(f"{p.name}: a wide CSV starts with 'student_id' followed by one column per item")
    items = [cell.strip() for cell in rows[0][1:]]
    if any(not i for i in items) or len(set(items)) != len(items):
        raise ValueError(f"{p.name}: item columns must be named and unique")
    students: list[StudentResponses] = []
    seen: dict[str, int] = {}  # student id -> its line
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(items) + 1 or not row[0].strip():
            raise ValueError(f"{p.name}, line {line}: expected a student id and {len(items)} cells, got {len(row)} cells")
        sid = _student_id(row[0], f"{p.name}, line {line}, column 'student_id'")
        if sid in seen:
            raise ValueError(f"{p.name}, line {line}: the student of line {seen[sid]} again; a wide CSV has one row "
                             "per student (the long form may spread a student over rows)")
        seen[sid] = line
        responses = tuple(Response(item_id=item, correct=_correct(cell, f"{p.name}, line {line}, column '{item}'"))
                          for item, cell in zip(items, row[1:]) if cell.strip())
        if responses:
            students.append(StudentResponses(student_id=sid, responses=responses))
    return students


def read_responses_csv(path: str | Path) -> list[StudentResponses]:
    """A responses CSV in either form, told apart by its header: long (an ``item_id`` column,
    :func:`load_responses_csv`) or wide (``student_id`` then item columns, :func:`load_responses_wide_csv`)."""
    with _opened(Path(path)) as fh:
        header = [cell.strip() for cell in next(csv.reader(fh), [])]
    return load_responses_csv(path) if "item_id" in header else load_responses_wide_csv(path)


def write_responses_csv(path: str | Path, students: Iterable[StudentResponses]) -> None:
    """Write the long form :func:`load_responses_csv` reads: ``student_id,item_id,correct[,answer]``."""
    students = list(students)
    answers = any(r.answer for s in students for r in s.responses)
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["student_id", "item_id", "correct", *(["answer"] if answers else [])])
        for s in students:
            for r in s.responses:
                value = int(r.correct) if isinstance(r.correct, bool) else r.correct
                out.writerow([s.student_id, r.item_id, value, *([r.answer or ""] if answers else [])])
