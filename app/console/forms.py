"""Reading the console's forms into the API's own models, so a form is validated exactly as the API validates the
same body (a 422 message lands next to the field it names)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from app.schemas import PrivacyPolicy
from qmatrix import Identifier

__all__ = ["FieldErrors", "number", "policy_from_form", "student_id_from_form"]

FieldErrors = dict[str, list[str]]
_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)


def number(form: Mapping[str, str], name: str, errors: FieldErrors, *, optional: bool = False) -> float | None:
    """The form field as a finite number (blank: None when ``optional``), else an error under its name."""
    text = (form.get(name) or "").strip()
    if not text:
        if not optional:
            errors.setdefault(name, []).append("required")
        return None
    try:
        value = float(text)
    except ValueError:
        errors.setdefault(name, []).append(f"not a number: {text[:40]!r}")
        return None
    if not math.isfinite(value):
        errors.setdefault(name, []).append("must be a finite number")
        return None
    return value


def _terms(text: str, errors: FieldErrors) -> list[dict[str, str]]:
    """One term per line: ``YYYY-MM-DD YYYY-MM-DD`` (first and last day)."""
    terms = []
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.replace(",", " ").split()
        if not parts:
            continue
        if len(parts) != 2:
            errors.setdefault("period.terms", []).append(f"line {n}: give the first and last day, YYYY-MM-DD YYYY-MM-DD")
            continue
        terms.append({"start": parts[0], "end": parts[1]})
    return terms


def _field(loc: tuple[Any, ...], message: str) -> str:
    """The form field a validation error of :class:`PrivacyPolicy` belongs to."""
    if not loc:
        return "form"
    if loc[0] != "period":
        return str(loc[0])
    if len(loc) == 1:
        return "period.kind"
    if len(loc) == 2:  # a whole-period check (its time zone, its terms)
        return "period.timezone" if "time zone" in message else "period.terms"
    return f"period.{loc[2]}"


def policy_from_form(form: Mapping[str, str]) -> tuple[PrivacyPolicy | None, FieldErrors]:
    """The policy the form describes, or the errors by field name (the form's ``name`` attributes)."""
    errors: FieldErrors = {}
    kind = (form.get("period.kind") or "").strip()
    period: dict[str, Any] = {"kind": kind}
    if kind == "rolling":
        period["window_s"] = number(form, "period.window_s", errors)
    if kind in ("day", "week", "term"):
        period["timezone"] = (form.get("period.timezone") or "").strip() or "UTC"
    if kind == "term":
        period["terms"] = _terms(form.get("period.terms") or "", errors)
    data = {
        "period": period,
        "cap_epsilon": number(form, "cap_epsilon", errors),
        "cap_delta": number(form, "cap_delta", errors),
        "default_mechanism": (form.get("default_mechanism") or "").strip(),
        "default_epsilon": number(form, "default_epsilon", errors),
        "sensitivity": (form.get("sensitivity") or "").strip(),
        "allow_unnoised": form.get("allow_unnoised") in ("on", "true", "1"),
        "warning_fraction": number(form, "warning_fraction", errors),
    }
    if errors:
        return None, errors
    try:
        return PrivacyPolicy.model_validate(data), {}
    except ValidationError as exc:
        for error in exc.errors():
            message = str(error.get("msg", "invalid"))
            errors.setdefault(_field(tuple(error.get("loc", ())), message), []).append(message)
        return None, errors


def student_id_from_form(form: Mapping[str, str], errors: FieldErrors) -> str | None:
    """The form's ``student_id``, checked as the API checks a path's student id."""
    raw = form.get("student_id") or ""
    try:
        return _IDENTIFIER.validate_python(raw)
    except ValidationError as exc:
        errors.setdefault("student_id", []).extend(str(e.get("msg", "invalid")) for e in exc.errors())
        return None
