"""The console's plumbing: pages (from the one template environment, ``app.presentation``), the signed-in user
(every request), CSRF-checked forms, and errors as pages.

Every console response goes through :class:`ConsoleRoute`, which turns errors into readable pages with the right
status — 401/403 sign-in problems, 404 unknown ids, 409 conflicts, 422 field messages, 429 rate limits — instead of
the API's JSON, and adds the security headers (a strict Content-Security-Policy: the console's own script and
stylesheet only; no framing; no caching).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from app.auth import Principal
from app.console.data import ConsoleData
from app.console.session import COOKIE, csrf_token, valid_token, verify_session
from app.deps import app_gateway, gateway_of
from app.domain_errors import DomainError
from app.errors import InputError, http_status
from app.metrics import count_rate_limited
from app.presentation.templates import templates
from app.ratelimit import RateLimited

__all__ = ["ConsolePage", "ConsoleRoute", "SignIn", "User", "UserDep", "base", "data_of", "page", "posted",
           "secure_cookies", "session_secret", "storable"]

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class SignIn(Exception):
    """Not signed in (no, forged or expired session), or the session's key is no longer an active admin key."""

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason
        super().__init__(reason or "sign in")


class ConsolePage(Exception):
    """An error shown as a page: ``status`` and what to tell the operator."""

    def __init__(self, status: int, title: str, messages: list[str] | None = None) -> None:
        self.status, self.title, self.messages = status, title, messages or []
        super().__init__(title)


@dataclass(frozen=True)
class User:
    tenant: str
    key_id: str
    session: str
    csrf: str

    @property
    def principal(self) -> Principal:
        return Principal(tenant=self.tenant, role="admin", key_id=self.key_id)


def data_of(request: Request) -> ConsoleData:
    return ConsoleData(gateway_of(request))


def base(request: Request) -> str:
    """The console's URL path (behind a proxy prefix too)."""
    return request.scope.get("root_path", "").rstrip("/") + "/console"


def session_secret(app: FastAPI) -> bytes:
    """The key console sessions and forms are signed under (``FEDCD_CONSOLE_SECRET_KEY``, else
    ``<state_dir>/console-secret``): read, or created, once per process."""
    return app_gateway(app).console_sessions.secret


def secure_cookies(request: Request) -> bool:
    """Whether the console's cookies are ``Secure``: ``FEDCD_CONSOLE_SECURE_COOKIE``, or on ``auto`` whether this
    request came over HTTPS (a TLS proxy that does not forward the scheme needs ``true``)."""
    setting = gateway_of(request).settings.console_secure_cookie
    return request.url.scheme == "https" if setting == "auto" else bool(setting)


async def _user(request: Request) -> User:
    data, sessions = data_of(request), gateway_of(request).console_sessions
    secret = sessions.secret
    value = request.cookies.get(COOKIE)
    session = verify_session(secret, value) if value else None
    if session is None:
        raise SignIn("Your session expired: sign in again." if value else None)

    def check() -> tuple[bool, int]:  # one worker thread for both reads
        return data.key_active(session.tenant, session.key_id), sessions.generation(session.key_id)

    active, generation = await asyncio.to_thread(check)
    if not active:
        raise SignIn("The key this session was opened with was revoked or expired: sign in again.")
    if generation != session.generation:
        raise SignIn("This session was signed out (here or in another browser): sign in again.")
    try:
        await data.rate_check(session.tenant)
    except RateLimited:
        count_rate_limited(session.tenant)
        raise
    user = User(tenant=session.tenant, key_id=session.key_id, session=session.value,
                csrf=csrf_token(secret, session.value))
    request.state.principal = user.principal  # the access log names the tenant
    return user


UserDep = Annotated[User, Depends(_user)]


def same_origin(request: Request) -> None:
    """Refuse a cross-site POST outright (the CSRF token and SameSite cookie refuse it too)."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise ConsolePage(403, "Refused: a cross-site request", ["Forms of the console are sent from the console only."])
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise ConsolePage(403, "Refused: a request from another site", [f"Origin {origin} is not this console."])


async def posted(request: Request, user: User) -> Mapping[str, str]:
    """The POSTed form, after checking its origin and CSRF token."""
    same_origin(request)
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not valid_token(user.csrf, fields.get("csrf")):
        raise ConsolePage(403, "Refused: the form's security token is missing or stale",
                          ["Reload the page and send the form again."])
    return fields


def page(request: Request, name: str, context: dict[str, Any], *, status: int = 200, user: User | None = None) -> Response:
    return templates.TemplateResponse(request, name, {"base": base(request), "user": user, **context},
                                      status_code=status)


def _error_page(request: Request, status: int, title: str, messages: list[str]) -> Response:
    if request.url.path.endswith(".json"):
        return JSONResponse({"detail": title, "messages": messages}, status_code=status)
    return page(request, "error.html", {"status": status, "title": title, "messages": messages}, status=status)


def _input_page(request: Request, status: int, messages: list[str]) -> Response:
    title = {404: "Not found", 409: "Conflict", 403: "Forbidden"}.get(status, "Invalid input")
    return _error_page(request, status, title, messages)


def _signed_out(request: Request, exc: SignIn) -> Response:
    if request.url.path.endswith(".json"):
        response: Response = JSONResponse({"detail": "signed out"}, status_code=401)
    elif request.method == "GET":
        response = RedirectResponse(f"{base(request)}/login{'?ended=1' if exc.reason else ''}", status_code=303)
    else:
        response = _error_page(request, 401, "Signed out", [exc.reason or "Sign in to the console first."])
    if exc.reason:
        response.delete_cookie(COOKIE, path=base(request), secure=secure_cookies(request), httponly=True,
                               samesite="strict")
    return response


def _validation_messages(exc: RequestValidationError) -> list[str]:
    return [f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'request'}: {e.get('msg', 'invalid')}"
            for e in exc.errors()[:20]]


class ConsoleRoute(APIRoute):
    """Console routes answer pages: errors become 4xx pages (never the API's JSON, never a 500 for a known error)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                response = await handler(request)
            except SignIn as exc:
                response = _signed_out(request, exc)
            except ConsolePage as exc:
                response = _error_page(request, exc.status, exc.title, exc.messages)
            except DomainError as exc:  # a service's refusal: the status the API answers it with
                response = _input_page(request, http_status(exc), exc.messages)
            except InputError as exc:
                response = _input_page(request, exc.status_code, exc.messages)
            except RequestValidationError as exc:
                response = _error_page(request, 422, "Invalid input", _validation_messages(exc))
            except RateLimited as exc:
                response = _error_page(request, 429, "Too many requests", [str(exc)])
                response.headers["Retry-After"] = str(exc.retry_after_s)
            except HTTPException as exc:
                response = _error_page(request, exc.status_code, str(exc.detail), [])
            response.headers.update(HEADERS)
            return response

        return run


def storable(text: str) -> bool:
    """No stored key holds a NUL or a lone surrogate (JSON can spell both), and PostgreSQL refuses them as a
    parameter (a 500): an id or cursor with one names nothing here."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return "\x00" not in text
