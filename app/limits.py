"""Request limits that depend on settings (README "Limits"); each refusal is a 422 naming the field."""

from __future__ import annotations

from collections.abc import Sequence

from app.errors import InputError
from app.settings import Settings
from qmatrix import QMatrix, Response

__all__ = ["check_qmatrix_size", "check_responses"]


def check_qmatrix_size(q: QMatrix, settings: Settings, loc: Sequence[str | int]) -> None:
    problems = []
    if len(q.items) > settings.max_qmatrix_items:
        problems.append(f"{len(q.items)} items; at most {settings.max_qmatrix_items} per Q-matrix")
    if len(q.concepts) > settings.max_qmatrix_concepts:
        problems.append(f"{len(q.concepts)} concepts; at most {settings.max_qmatrix_concepts} per Q-matrix")
    if problems:
        raise InputError(loc, problems)


def check_responses(q: QMatrix, responses: Sequence[Response], settings: Settings, loc: Sequence[str | int]) -> None:
    """At most ``max_responses_per_student`` responses, every item id in the Q-matrix."""
    if len(responses) > settings.max_responses_per_student:
        raise InputError(
            (*loc, "responses"), [f"{len(responses)} responses; at most {settings.max_responses_per_student} per student"]
        )
    unknown = q.unknown_items(r.item_id for r in responses)
    if unknown:
        shown = unknown[:20]
        raise InputError(
            (*loc, "responses"),
            [f"unknown item ids for Q-matrix '{q.id}': {', '.join(shown)}" + (" …" if len(unknown) > 20 else "")],
            extra={"unknown_item_ids": shown},
        )
