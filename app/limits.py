"""Request limits that depend on settings (README "Limits"); each refusal is an ``InvalidInput`` naming the field (a
422).

Q-matrix sizes are checked while a Q-matrix is read (:func:`qmatrix_from_csv_checked`,
:func:`qmatrix_from_json_checked`): reading stops at the first row or column past the limit, so an
oversized upload is refused before its rows are built. :func:`check_qmatrix_size` checks one that is
already built (e.g. an inline Q-matrix a service parsed itself).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

from app.domain_errors import InvalidInput
from app.schemas.qmatrices import MAX_ITEM_CONCEPTS
from app.settings import Settings
from qmatrix import QMatrix, QMatrixError, Response, qmatrix_from_json
from qmatrix.io import check_size, qmatrix_from_csv_lines

__all__ = [
    "MAX_LISTED",
    "check_qmatrix_size",
    "check_responses",
    "qmatrix_from_csv_checked",
    "qmatrix_from_json_checked",
]

MAX_LISTED = 20  # ids listed in one message; the rest are counted


def check_qmatrix_size(q: QMatrix, settings: Settings, field: Sequence[str | int]) -> None:
    try:
        check_size(len(q.items), len(q.concepts), max_items=settings.max_qmatrix_items,
                   max_concepts=settings.max_qmatrix_concepts)
    except QMatrixError as exc:
        raise InvalidInput(field, exc.problems) from exc


def qmatrix_from_json_checked(data: dict[str, Any], settings: Settings, field: Sequence[str | int]) -> QMatrix:
    """The JSON form, its item and concept counts checked against the settings before any item is built."""
    try:
        return qmatrix_from_json(data, max_items=settings.max_qmatrix_items, max_concepts=settings.max_qmatrix_concepts)
    except QMatrixError as exc:  # capped: at most qmatrix.model.MAX_PROBLEMS listed, the rest counted
        raise InvalidInput(field, exc.problems) from exc


def qmatrix_from_csv_checked(
    data: bytes | Iterable[str], qid: str, settings: Settings, field: Sequence[str | int]
) -> QMatrix:
    """The CSV form; reading stops at the first row past ``max_qmatrix_items`` (a header with more than
    ``max_qmatrix_concepts`` concept columns is refused before any row is read).

    Bytes are decoded as they are read (UTF-8, an optional BOM dropped, undecodable bytes replaced) rather
    than into one string first: a 16 MiB body with one non-ASCII character would otherwise become a 64 MiB
    string, and another copy inside the reader.
    """
    lines: Iterable[str] = (
        io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", errors="replace", newline="")
        if isinstance(data, bytes) else data
    )
    try:
        q = qmatrix_from_csv_lines(lines, id=qid, max_items=settings.max_qmatrix_items,
                                   max_concepts=settings.max_qmatrix_concepts)
    except QMatrixError as exc:
        raise InvalidInput(field, exc.problems) from exc
    crowded = [item.id for item in q.items if len(item.concepts) > MAX_ITEM_CONCEPTS]
    if crowded:  # the JSON form refuses these in its model; a stored one could not be shown again (a 500)
        raise InvalidInput(field, [f"items assessing more than {MAX_ITEM_CONCEPTS} concepts: "
                                   f"{', '.join(crowded[:MAX_LISTED])}"
                                   + (f" … and {len(crowded) - MAX_LISTED} more" if len(crowded) > MAX_LISTED else "")])
    return q


def check_responses(q: QMatrix, responses: Sequence[Response], settings: Settings, field: Sequence[str | int]) -> None:
    """At most ``max_responses_per_student`` responses, every item id in the Q-matrix."""
    if len(responses) > settings.max_responses_per_student:
        most = settings.max_responses_per_student
        raise InvalidInput((*field, "responses"), [f"{len(responses)} responses; at most {most} per student"])
    unknown = q.unknown_items(r.item_id for r in responses)
    if unknown:
        shown = unknown[:MAX_LISTED]
        raise InvalidInput(
            (*field, "responses"),
            [f"unknown item ids for Q-matrix '{q.id}': {', '.join(shown)}"
             + (f" … and {len(unknown) - MAX_LISTED} more" if len(unknown) > MAX_LISTED else "")],
            details={"unknown_item_ids": shown},
        )
