"""What the async client and its generated sync twin share: settings, request bodies, paths, job states.

The sync client (``_sync_client.py``) is generated from the async one (``scripts/unasync.py``), which renames
``AsyncX`` to ``X``: so each alias here that differs between the two comes as a pair, ``AsyncSleep``/``Sleep``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

__all__ = [
    "DEFAULT_BASE_URL", "DEFAULT_TIMEOUT_S", "FAILED_STATES", "FINISHED_STATES", "USER_AGENT", "AsyncFetch",
    "AsyncSleep", "Fetch", "PageLike", "Sleep", "body_of", "resolve_settings", "segment",
]

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 60.0  # a diagnosis asks several LLMs; the gateway's own deadline ends it well before this
USER_AGENT = "fedcd-client/0.1.0"
FINISHED_STATES = frozenset({"succeeded", "failed", "cancelled"})
FAILED_STATES = frozenset({"failed", "cancelled"})

M = TypeVar("M", bound=BaseModel)
T_co = TypeVar("T_co", covariant=True)
P = TypeVar("P")

Sleep = Callable[[float], None]
AsyncSleep = Callable[[float], Awaitable[None]]


class PageLike(Protocol[T_co]):
    """A cursor page of any list (``{data, count, limit, next_cursor}``)."""

    @property
    def data(self) -> Sequence[T_co]: ...

    @property
    def next_cursor(self) -> str | None: ...


Fetch = Callable[[str | None], P]  # cursor → page
AsyncFetch = Callable[[str | None], Awaitable[P]]


def resolve_settings(base_url: str | None, api_key: str | None) -> tuple[str, str | None]:
    """The base URL and API key: the arguments, else ``FEDCD_BASE_URL`` / ``FEDCD_API_KEY``, else the local default."""
    url = base_url or os.environ.get("FEDCD_BASE_URL") or DEFAULT_BASE_URL
    key = api_key if api_key is not None else os.environ.get("FEDCD_API_KEY")
    return url.rstrip("/"), (key.strip() if key else None)


def body_of(model: type[M], value: M | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body of a request model, or of a mapping checked against it first (a typo fails here, not on the
    server). Only the fields the caller set are sent: an omitted field takes the server's default, which ``null``
    would not."""
    checked = value if isinstance(value, model) else model.model_validate(value)
    return checked.model_dump(mode="json", by_alias=True, exclude_unset=True)


def segment(value: str) -> str:
    """One path segment: an id with ``/`` or ``?`` in it must not change the route."""
    return quote(value, safe="")
