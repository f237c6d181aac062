"""Domain errors → HTTP responses, in one place. Every error body is valid JSON.

* The layers below the routes raise ``app.domain_errors`` (no status, no ``loc``): each class has its status here
  (``InvalidInput`` 422, ``NotFound`` 404, ``Conflict`` 409, ``Unavailable`` 503, ``GroupBudgetSpent`` 429), and its
  field gets the ``loc`` the route received it under: ``path`` for a path parameter of the route, else ``query`` on
  a GET or DELETE, else ``body`` (:func:`http_error`). The body has FastAPI's ``detail`` shape: a list of
  ``{loc, msg, type}`` whose ``loc`` names the field.
* ``InputError`` is that same response made by the route layer itself (routes and their dependencies: an unknown
  query parameter, a cursor of another list…), with its ``loc`` and status (422 unless it says otherwise).
* Request validation errors → 422. The echoed input is made encodable (NaN, ±Infinity, lone
  surrogates, bytes that are not UTF-8) and shortened, so the error itself can never fail.
* Every error list is capped: the first ``MAX_ERRORS`` entries, then one counting the rest, and each
  message is shortened — a body of a million bad values gets a small 422, not one entry per value.
* A body that cannot be decoded (not UTF-8, not the declared content type) → 422, not 400.
* ``AllEntitiesFailed`` → 503 with each entity's reason; ``NoEntitySelected`` (none was there to ask, e.g. an
  empty federation) → 503 naming that cause, before anything is charged.
* ``BudgetExceeded`` → 429 saying the student's privacy budget is spent, ``type: privacy_budget``.
* ``RateLimited`` → 429 saying the tenant is over its request rate, ``type: rate_limit``.
* Every 429 carries ``Retry-After`` (seconds, at least 1): when the budget renews, when the bucket has a token. A
  budget that never renews under the current policy (a lifetime cap) says one day: only an admin's policy change
  can free it, and a client that retries on its own should not come back sooner (the body says so).
* ``QMatrixError`` raised below the services → 422.
* 405 lists, in ``Allow``, every method the path supports.
* Anything else → 500 with a request-free message (and the exception logged): never a stack
  trace or input echoed to the caller.
"""

from __future__ import annotations

import logging
import math
import re
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route, compile_path

from app.domain_errors import (
    NO_RENEWAL_RETRY_AFTER_S,
    Conflict,
    DomainError,
    GroupBudgetSpent,
    InvalidInput,
    NotFound,
    TryLater,
    Unavailable,
    budget_retry_after,
)
from app.ratelimit import RateLimited
from diagnosis import AllEntitiesFailed, NoEntitySelected
from privacy import BudgetExceeded, iso_utc
from qmatrix import QMatrixError

__all__ = [
    "MAX_ERRORS", "NO_RENEWAL_RETRY_AFTER_S", "InputError", "budget_refusal", "budget_retry_after", "http_error",
    "http_status", "install_error_handlers", "safe_json",
]

log = logging.getLogger("fedcd.errors")
_MAX_ECHO = 200  # characters of an offending input echoed back
MAX_ERRORS = 20  # entries of one error list; the rest are counted in one more entry
_MAX_MESSAGE = 4000  # characters of one message (20 of them listing 128-character ids fit)

# repr() of an echoed input, bounded before it is built: repr() of a million-element list would be built whole
# (tens of MB) only to be cut to _MAX_ECHO characters.
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = _repr.maxlong = _MAX_ECHO
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 10
_repr.maxlevel = 3


class InputError(Exception):
    def __init__(
        self,
        loc: Sequence[str | int],
        messages: Sequence[str],
        *,
        status_code: int = 422,
        extra: dict[str, Any] | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        self.loc, self.messages, self.status_code, self.extra = list(loc), list(messages), status_code, extra or {}
        self.retry_after_s = retry_after_s  # sent as Retry-After (a 429 must say when to come back)
        super().__init__("; ".join(messages))

    def detail(self) -> list[dict[str, Any]]:
        messages = self.messages
        # A caller that capped its own list (e.g. QMatrixError: MAX_ERRORS problems and one counting the rest) keeps
        # its count line; an uncapped list is capped here.
        if len(messages) > MAX_ERRORS + 1:
            messages = [*messages[:MAX_ERRORS], f"… and {len(messages) - MAX_ERRORS} more problems"]
        return [{"loc": self.loc, "msg": _shortened(m), "type": "value_error", **self.extra} for m in messages]


def _shortened(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + "…"


@dataclass(frozen=True)
class _Answer:
    """How the API answers a class of domain error."""

    status: int
    type: str = "value_error"  # each error entry's ``type``


# The one table of how a domain error is answered (the first class of its MRO listed here).
_ANSWERS: dict[type[DomainError], _Answer] = {
    InvalidInput: _Answer(422), NotFound: _Answer(404), Conflict: _Answer(409), Unavailable: _Answer(503),
    GroupBudgetSpent: _Answer(429, "privacy_budget"),
}
_QUERY_METHODS = ("GET", "HEAD", "DELETE")  # requests without a body: a field that is no path parameter is a query's


def _answer(exc: DomainError) -> _Answer:
    return next((_ANSWERS[c] for c in type(exc).__mro__ if c in _ANSWERS), _Answer(422))


def http_status(exc: DomainError) -> int:
    return _answer(exc).status


def http_error(exc: DomainError, request: Request) -> InputError:
    """The response of a domain error: its status and type, its field's ``loc`` as the route received it (a path
    parameter of the route; else the query of a request without a body; else the body), and, when the error says
    when to come back, ``Retry-After`` and ``retry_after_s``."""
    field, answer, retry_after = exc.field, _answer(exc), exc.retry_after_s
    where = ("path" if field and field[0] in request.path_params
             else "query" if request.method in _QUERY_METHODS else "body")
    when = {} if retry_after is None else {"retry_after_s": retry_after}
    return InputError((where, *field), exc.messages, status_code=answer.status,
                      extra={"type": answer.type, **when, **exc.details}, retry_after_s=retry_after)


def budget_refusal(exc: BudgetExceeded) -> dict[str, Any]:
    """The body of a privacy-budget 429."""
    retry_after = budget_retry_after(exc)
    text = str(exc)
    if retry_after == NO_RENEWAL_RETRY_AFTER_S and exc.renews_at is None:
        text += (f"; Retry-After is {NO_RENEWAL_RETRY_AFTER_S} s only as a floor: this budget frees up only if the "
                 "tenant's privacy policy changes")
    return {"detail": text, "type": "privacy_budget", "renews_at": iso_utc(exc.renews_at),
            "retry_after_s": retry_after}


def safe_json(value: Any, *, limit: int | None = None) -> Any:
    """``value`` as JSON-encodable data that ``json.dumps(allow_nan=False)`` and UTF-8 always accept."""
    if isinstance(value, str):
        text = value.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates → \\ud800
        return text if limit is None or len(text) <= limit else text[:limit] + "…"
    if isinstance(value, bytes):
        return safe_json(value.decode("utf-8", "backslashreplace"), limit=limit)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(safe_json(k, limit=limit)): safe_json(v, limit=limit) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [safe_json(v, limit=limit) for v in value]
    return safe_json(str(value), limit=limit)


def _json(status_code: int, content: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status_code, content=safe_json(content), headers=headers)


def _validation_detail(errors: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    detail = []
    for error in errors[:MAX_ERRORS]:
        item = {"loc": list(error.get("loc", ())), "msg": _shortened(str(error.get("msg", ""))),
                "type": error.get("type", "")}
        if "input" in error:
            text = _repr.repr(error["input"]) if not isinstance(error["input"], str) else error["input"]
            item["input"] = safe_json(text, limit=_MAX_ECHO)
        if error.get("ctx"):
            item["ctx"] = safe_json(error["ctx"], limit=_MAX_ECHO)
        detail.append(item)
    if len(errors) > MAX_ERRORS:
        first = list(errors[MAX_ERRORS].get("loc", ()))[:1]  # "body" or "query": where the rest are
        detail.append({"loc": first, "msg": f"… and {len(errors) - MAX_ERRORS} more errors", "type": "too_many_errors"})
    return detail


class _AllowedMethods:
    """Every method the API documents on a path (Starlette's 405 names only the first matching route's)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._table: list[tuple[re.Pattern[str], set[str]]] | None = None

    def __call__(self, path: str) -> list[str]:
        if self._table is None:  # built on first use, once every route is registered
            self._table = [
                (compile_path(template)[0], {m.upper() for m in item})
                for template, item in self.app.openapi().get("paths", {}).items()
            ]
        return sorted({m for regex, methods in self._table if regex.match(path) for m in methods})


def install_error_handlers(app: FastAPI) -> None:
    allowed_methods = _AllowedMethods(app)

    @app.exception_handler(InputError)
    async def _input_error(_: Request, exc: InputError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
        return _json(exc.status_code, {"detail": exc.detail()}, headers=headers)

    @app.exception_handler(DomainError)
    async def _domain_error(request: Request, exc: DomainError) -> JSONResponse:
        return await _input_error(request, http_error(exc, request))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _json(422, {"detail": _validation_detail(exc.errors())})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # the body could not be parsed (not UTF-8, a broken multipart form…)
            return _json(422, {"detail": [{"loc": ["body"], "msg": f"the body could not be parsed: {exc.detail}; send "
                                           "UTF-8 in the declared content type", "type": "value_error"}]})
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request.scope["path"]))
        return _json(exc.status_code, {"detail": exc.detail}, headers=headers)

    @app.exception_handler(QMatrixError)
    async def _qmatrix_error(_: Request, exc: QMatrixError) -> JSONResponse:
        detail = [{"loc": ["body"], "msg": _shortened(p), "type": "value_error"} for p in exc.problems[:MAX_ERRORS + 1]]
        return _json(422, {"detail": detail})

    @app.exception_handler(TryLater)
    async def _try_later(_: Request, exc: TryLater) -> JSONResponse:
        return _json(503, {"detail": str(exc)}, headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(BudgetExceeded)
    async def _budget_spent(_: Request, exc: BudgetExceeded) -> JSONResponse:
        body = budget_refusal(exc)
        return _json(429, body, headers={"Retry-After": str(body["retry_after_s"])})

    @app.exception_handler(RateLimited)
    async def _rate_limited(_: Request, exc: RateLimited) -> JSONResponse:
        return _json(429, {"detail": str(exc), "type": "rate_limit", "retry_after_s": exc.retry_after_s},
                     headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(AllEntitiesFailed)
    async def _all_failed(_: Request, exc: AllEntitiesFailed) -> JSONResponse:
        return _json(503, {
            "detail": "no entity answered (each failed or was skipped); no diagnosis was made",
            "entities": [{"name": o.name, "status": o.status, "reason": o.reason, "error": o.error}
                         for o in exc.outcomes],
        })

    @app.exception_handler(NoEntitySelected)
    async def _none_selected(_: Request, exc: NoEntitySelected) -> JSONResponse:
        return _json(503, {"detail": str(exc), "entities": []})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        route = request.scope.get("route")
        template = route.path if isinstance(route, Route) else "<unmatched>"
        log.error("unexpected %s on %s %s", type(exc).__name__, request.method, template, exc_info=exc)
        return _json(500, {"detail": "internal error; the request was not completed and nothing was charged"})
