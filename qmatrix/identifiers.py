"""Identifiers (student, item, concept ids) that look the same are the same.

An id with leading/trailing whitespace, a control character, or an invisible format character
(zero-width space, bidi overrides…) is refused: otherwise ``"victim "`` or ``"victim\\u200b"``
would be a different student than ``"victim"`` — with a fresh privacy budget — while looking
identical on every screen. Ids are otherwise opaque and case-sensitive.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator, Field

__all__ = ["REFUSED_CATEGORIES", "Identifier", "check_identifier", "identifier_problem"]

# Cc control, Cf format (zero-width, bidi), Cs lone surrogates, Co private use, Zl/Zp line/paragraph separators.
REFUSED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


def identifier_problem(value: str, *, padded_ok: bool = False) -> str | None:
    """Why ``value`` is not an acceptable id, or ``None``.

    ``padded_ok`` allows leading/trailing spaces (concept *names* as published, e.g. ASSISTments
    skill names, which are labels, not keys a caller types), never invisible characters.
    """
    if not value or not value.strip():
        return "must be non-empty"
    if value != value.strip() and not padded_ok:
        return "has leading or trailing whitespace"
    for ch in value:
        if unicodedata.category(ch) in REFUSED_CATEGORIES:
            return f"contains the invisible or control character U+{ord(ch):04X}"
    return None


def check_identifier(value: str) -> str:
    problem = identifier_problem(value)
    if problem is not None:
        raise ValueError(f"identifier {problem}")
    return value


Identifier = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(check_identifier)]
