"""Cursor pagination shared by every list route: ``?limit=`` and ``?cursor=`` in, one envelope out.

Every list answers ``{data, count, limit, next_cursor}``; ``next_cursor`` is ``null`` on the last page, otherwise
the value to send as ``?cursor=`` for the next one. A cursor is opaque to clients, and each list's OpenAPI
parameter states its exact form (``pattern``): the list's name, then the sort key of the last item sent, one
``~``-separated part per key field (keyset pagination, so an item added or removed between two requests never
shifts the pages — with offsets it would be skipped or sent twice). An integer part is written in decimal, a
real one as Python's ``repr``, a string as unpadded base64url of its UTF-8.

Every string of that form is a cursor of the list: it decodes to a key of the list's shape, and the page is the
items after that key (bytes that are not UTF-8 read as U+FFFD), so a schema-valid cursor is never refused. A
cursor of another list, or anything else, does not match the pattern: a 422 naming ``query.cursor``.

A cursor is not signed: editing one only moves the caller within its own tenant's list (every list filters by
tenant on the server), so there is nothing to protect.

Lists that live in a database table page there (``GET /v1/jobs``); the small ones (keys, Q-matrix ids,
calibrations, policy versions, entities) are read whole and cut here by :func:`page_of` — the same cursor rules,
one implementation.
"""

# No `from __future__ import annotations`: the dependency made in pages() has annotations naming its own format,
# which FastAPI must read as objects, not as strings it cannot resolve.

import base64
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, TypeVar

from fastapi import Query, Request
from pydantic import BaseModel, Field

from app.errors import InputError
from app.schemas.patterns import SchemaPattern

__all__ = ["DEFAULT_LIMIT", "MAX_CURSOR", "MAX_LIMIT", "CursorFormat", "Page", "Paginated", "page_of", "pages"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_CURSOR = 2048  # characters; a real one is well under 300

T = TypeVar("T")
Key = tuple[Any, ...]
Part = type[int] | type[float] | type[str]

# One key part each. Bounded so every match decodes: an int fits 64 bits, a real has no exponent (never inf), a
# base64url string has no length of 1 mod 4 (the one length that decodes to nothing).
_PART_PATTERNS: dict[Part, str] = {
    int: r"-?[0-9]{1,18}",
    float: r"-?[0-9]{1,17}\.[0-9]{1,17}",
    str: r"(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?",
}
_FORMATS: dict[str, "CursorFormat"] = {}  # list name -> its format: to tell "another list's cursor" from garbage


@dataclass(frozen=True)
class CursorFormat:
    """The cursor of one list: its name and the types of its sort key's parts."""

    name: str
    parts: tuple[Part, ...]
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z]+", self.name) or not self.parts:
            raise ValueError(f"a cursor format needs a lower-case name and at least one part: {self!r}")
        object.__setattr__(self, "_regex", re.compile(self.body))

    @property
    def body(self) -> str:
        return re.escape(self.name) + "".join(rf"~{_PART_PATTERNS[p]}" for p in self.parts)

    @property
    def pattern(self) -> str:
        """The ECMA-262 pattern of the OpenAPI parameter (the same regex the server checks)."""
        return f"^{self.body}$"

    def encode(self, key: Sequence[Any]) -> str:
        parts = [self.name]
        for kind, value in zip(self.parts, key, strict=True):
            if kind is str:
                parts.append(base64.urlsafe_b64encode(str(value).encode()).rstrip(b"=").decode())
            else:
                parts.append(repr(kind(value)))
        text = "~".join(parts)
        if not self._regex.fullmatch(text):  # a key this format cannot carry: the route declared it wrong
            raise ValueError(f"the sort key {key!r} does not fit the cursor format of list '{self.name}'")
        return text

    def decode(self, cursor: str) -> Key:
        """The sort key of a cursor of this list; a 422 naming ``query.cursor`` for anything else."""
        if not self._regex.fullmatch(cursor):
            name = cursor.split("~", 1)[0]
            other = name != self.name and name in _FORMATS
            raise InputError(("query", "cursor"), [
                f"{'this cursor belongs to another list' if other else 'not a cursor'}; send the next_cursor of a "
                f"page of this list, unchanged (pattern {self.pattern})"])
        return tuple(_part(kind, text) for kind, text in zip(self.parts, cursor.split("~")[1:], strict=True))


def _part(kind: Part, text: str) -> Any:
    if kind is str:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        # U+0000 is no character a stored key holds, and PostgreSQL refuses it in a parameter: U+FFFD stands in.
        return raw.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    return kind(text)


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
    format: CursorFormat

    def cursor(self, key: Sequence[Any]) -> str:
        """The cursor that continues after the item with sort key ``key``."""
        return self.format.encode(key)

    def envelope(self, data: list[Any], last_key: Sequence[Any] | None) -> dict[str, Any]:
        """The fields of a :class:`Paginated` page: ``last_key`` is the sort key of its last item when more follow."""
        return {"data": data, "count": len(data), "limit": self.limit,
                "next_cursor": self.cursor(last_key) if last_key is not None else None}


def pages(name: str, *parts: Part) -> Callable[..., Awaitable[Page]]:
    """The ``?limit=&cursor=`` dependency of the list ``name`` whose sort key has ``parts`` (``int``, ``float`` or
    ``str`` each): ``page: Annotated[Page, Depends(pages("jobs", str, str))]``."""
    fmt = CursorFormat(name, parts)
    if _FORMATS.setdefault(name, fmt) != fmt:
        raise ValueError(f"two lists named '{name}' with different cursors")

    async def page(
        request: Request,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="items per page")] = DEFAULT_LIMIT,
        cursor: Annotated[Annotated[str, SchemaPattern(lambda: fmt.pattern)] | None, Query(
            max_length=MAX_CURSOR, description="the next_cursor of the previous page, unchanged (opaque: its form is this list's name and "
            "the last item's sort key); none: the first page",
        )] = None,
    ) -> Page:
        for param in ("limit", "cursor"):  # one value each: with two, which page was meant?
            if len(request.query_params.getlist(param)) > 1:
                raise InputError(("query", param), [f"'{param}' given more than once; send it once"])
        return Page(limit=limit, after=fmt.decode(cursor) if cursor is not None else None, format=fmt)

    return page


def page_of(items: Iterable[T], page: Page, *, key: Callable[[T], Key], newest_first: bool = False) -> tuple[list[T], Key | None]:
    """One page of an in-memory list ordered by ``key`` (descending when ``newest_first``): the items, and the sort
    key of the last one when more follow (for :meth:`Page.envelope`)."""
    ordered = sorted(items, key=key, reverse=newest_first)
    if page.after is not None:
        after = page.after
        ordered = [i for i in ordered if (key(i) < after if newest_first else key(i) > after)]
    chunk = ordered[: page.limit]
    return chunk, (key(chunk[-1]) if len(ordered) > page.limit else None)
