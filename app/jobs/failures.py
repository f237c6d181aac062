"""What a failed job keeps of its exception: text that cannot hold the job's input.

A job's ``error`` is stored with the job, shown by ``GET /v1/jobs/{id}`` and the console, sent in webhooks, and no
erasure or retention sweep rewrites it. An exception's text may quote what it was raised on (a pydantic
``ValidationError`` quotes the offending input: once, the raw student ids of an upload), so only exceptions whose
text the code writes itself from safe facts keep it:

- :class:`app.domain_errors.DomainError`, :class:`JobFailed` — the service's own words for a refusal or a failure;
- :class:`privacy.LedgerError` — ``BudgetExceeded`` names no student (its own docstring);
- :class:`calibration.TooFewAnswers` — entity names and counts.

A ``ValidationError`` keeps its field paths and error types, never the input; anything else keeps its type alone.
The log gets the same text and the traceback's frames (where it failed), not the exception's message either.
"""

from __future__ import annotations

import traceback

from pydantic import ValidationError

from app.domain_errors import DomainError
from calibration import TooFewAnswers
from privacy import LedgerError

__all__ = ["JobFailed", "failure_trace", "stored_error"]

_SAFE_TEXT = (DomainError, LedgerError, TooFewAnswers)
_LISTED = 10  # invalid fields named; the rest are counted
_NAME_CHARS = 64  # a path part longer than a field name is read as a value (a dict key), and not kept


class JobFailed(Exception):
    """A job failed for a reason the code states, in a text that holds none of the job's input (no student id, no
    response): stored and shown as it is."""


def _part(part: str | int) -> str:
    """One part of a field path: an index or a field name; a dict key (which may be input) is shown as ``*``."""
    if isinstance(part, int) or (part.isidentifier() and len(part) <= _NAME_CHARS):
        return str(part)
    return "*"


def stored_error(exc: BaseException) -> str:
    """``exc`` as a job's stored ``error``: its text only when the code wrote it (module docstring)."""
    name = type(exc).__name__
    if isinstance(exc, _SAFE_TEXT + (JobFailed,)):
        return f"{name}: {exc}"
    if isinstance(exc, ValidationError):
        problems = [f"{'.'.join(_part(p) for p in e['loc']) or '(the whole input)'} ({e['type']})"
                    for e in exc.errors(include_input=False, include_url=False, include_context=False)]
        more = f" … and {len(problems) - _LISTED} more" if len(problems) > _LISTED else ""
        return f"{name}: invalid {exc.title}: {', '.join(problems[:_LISTED])}{more}"
    return f"{name} (its message is not kept: it may quote the job's input; the server log has where it failed)"


def failure_trace(exc: BaseException) -> str:
    """The traceback of ``exc`` and of the exceptions it was raised from, frames and types only (no messages)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    parts = []
    for link in reversed(chain):  # the first cause first, as Python prints it
        frames = "".join(traceback.format_tb(link.__traceback__))
        parts.append(f"Traceback (most recent call last):\n{frames}{type(link).__module__}.{type(link).__qualname__}")
    return "\n\nwhich led to\n\n".join(parts)
