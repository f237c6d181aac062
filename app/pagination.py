"""Cursor pagination shared by every list route: ``?limit=`` and ``?cursor=`` in, one envelope out.

Every list answers ``{data, count, limit, next_cursor}``; ``next_cursor`` is ``null`` on the last page, otherwise
the value to send as ``?cursor=`` for the next one. A cursor is opaque to clients: base64url of a small JSON object
holding the sort key of the last item sent (keyset pagination, so an item added or removed between two requests
never shifts the pages — with offsets it would be skipped or sent twice) and a tag of the list it came from, so a
cursor of one list sent to another is a 422, not a silently wrong page.

A cursor is not signed: editing one only moves the caller within its own tenant's list (every list filters by
tenant on the server), so there is nothing to protect.

Lists that live in a database table page there (``GET /v1/jobs``); the small ones (keys, Q-matrix ids,
calibrations, policy versions, entities) are read whole and cut here by :func:`page_of` — the same cursor rules,
one implementation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Depends, Query, Request
from pydantic import BaseModel, Field
from starlette.routing import Route

from app.errors import InputError

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Page", "PageDep", "Paginated", "page_of"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_MAX_CURSOR = 1024  # characters; a real one is well under 200
_MAX_KEY_PART = 256  # characters of one string in a sort key

T = TypeVar("T")
Key = tuple[Any, ...]


class Paginated(BaseModel, Generic[T]):
    """One page of a list (README "Pagination")."""

    data: list[T]
    count: int = Field(description="items on this page")
    limit: int = Field(description="the most items a page holds (?limit=)")
    next_cursor: str | None = Field(
        default=None, description="send as ?cursor= for the next page; null: this is the last page"
    )


@dataclass(frozen=True)
class Page:
    """The page a request asks for: how many items, and after which sort key (``None``: from the start)."""

    limit: int
    after: Key | None
    tag: str  # which list: cursors of another list are refused

    def cursor(self, key: Sequence[Any]) -> str:
        """The cursor that continues after the item with sort key ``key``."""
        raw = json.dumps({"l": self.tag, "k": list(key)}, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    def envelope(self, data: list[Any], last_key: Sequence[Any] | None) -> dict[str, Any]:
        """The fields of a :class:`Paginated` page: ``last_key`` is the sort key of its last item when more follow."""
        return {"data": data, "count": len(data), "limit": self.limit,
                "next_cursor": self.cursor(last_key) if last_key is not None else None}


def _tag(request: Request) -> str:
    """The route template (not the raw path: ``/v1/jobs`` and ``/v1/jobs/`` are one list), hashed short."""
    route = request.scope.get("route")
    template = route.path if isinstance(route, Route) else request.url.path
    return hashlib.sha256(template.encode()).hexdigest()[:8]


def _bad_cursor(message: str) -> InputError:
    return InputError(("query", "cursor"), [f"{message}; send the next_cursor of a page of this list, unchanged"])


def _decode(cursor: str, tag: str) -> Key:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
    except (binascii.Error, ValueError):  # not base64, not UTF-8, not JSON
        raise _bad_cursor("not a cursor") from None
    if not isinstance(body, dict) or not isinstance(body.get("k"), list) or not 1 <= len(body["k"]) <= 8:
        raise _bad_cursor("not a cursor")
    if body.get("l") != tag:
        raise _bad_cursor("this cursor belongs to another list")
    key = tuple(body["k"])
    for part in key:
        ok = isinstance(part, int | float | str) and not isinstance(part, bool)
        if not ok or (isinstance(part, str) and len(part) > _MAX_KEY_PART):
            raise _bad_cursor("not a cursor")
    return key


async def _page(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="items per page")] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, Query(max_length=_MAX_CURSOR, description="the next_cursor of the previous page; none: the first page")
    ] = None,
) -> Page:
    for name in ("limit", "cursor"):  # one value each: with two, which page was meant?
        if len(request.query_params.getlist(name)) > 1:
            raise InputError(("query", name), [f"'{name}' given more than once; send it once"])
    tag = _tag(request)
    return Page(limit=limit, after=_decode(cursor, tag) if cursor else None, tag=tag)


PageDep = Annotated[Page, Depends(_page)]


def page_of(items: Iterable[T], page: Page, *, key: Callable[[T], Key], newest_first: bool = False) -> tuple[list[T], Key | None]:
    """One page of an in-memory list ordered by ``key`` (descending when ``newest_first``): the items, and the sort
    key of the last one when more follow (for :meth:`Page.envelope`)."""
    ordered = sorted(items, key=key, reverse=newest_first)
    if page.after is not None:
        after = page.after
        if ordered and not _same_shape(after, key(ordered[0])):
            raise _bad_cursor("this cursor belongs to another list")
        ordered = [i for i in ordered if (key(i) < after if newest_first else key(i) > after)]
    chunk = ordered[: page.limit]
    return chunk, (key(chunk[-1]) if len(ordered) > page.limit else None)


def _same_shape(a: Key, b: Key) -> bool:
    """Keys compare only part by part of one type (an edited cursor must be a 422, not a TypeError's 500)."""
    def kind(v: Any) -> type:
        return float if isinstance(v, int | float) else type(v)

    return len(a) == len(b) and all(kind(x) is kind(y) for x, y in zip(a, b, strict=True))
