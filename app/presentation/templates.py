"""The one template environment of the gateway: the console's pages and the student report's page, from
``app/presentation/templates``, HTML-escaped everywhere, with the filters the pages share."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader

__all__ = ["NAV", "templates"]

NAV = [("", "overview", "Overview"), ("/entities", "entities", "Entities"), ("/qmatrices", "qmatrices", "Q-matrices"),
       ("/jobs", "jobs", "Jobs"), ("/students", "students", "Students"), ("/keys", "keys", "Keys"),
       ("/policy", "policy", "Privacy policy")]  # the console's navigation


def _when(value: float | str | None) -> str:
    """An epoch or ISO 8601 time as ``YYYY-MM-DD HH:MM UTC``."""
    if value is None or value == "":
        return "—"
    try:
        moment = datetime.fromtimestamp(value, UTC) if isinstance(value, int | float) else datetime.fromisoformat(value)
    except (ValueError, OverflowError, OSError):
        return str(value)
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


_ENV = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True)
_ENV.filters["when"] = _when
_ENV.filters["num"] = _num
_ENV.globals["NAV"] = NAV
templates = Jinja2Templates(env=_ENV)  # TemplateResponse for the console's pages; templates.env renders the rest
