"""The console's pages: sign-in, overview, entities, Q-matrices, jobs (README "Console"); students, keys and the
privacy policy are in :mod:`app.console.admin`. GET never changes anything; every change is a CSRF-checked POST."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from app.presentation.charts import bar_chart, hbar_chart, reliability_chart
from app.console.forms import FieldErrors, number
from app.console.session import (
    COOKIE,
    LOGIN_COOKIE,
    LOGIN_S,
    SESSION_S,
    login_token,
    new_nonce,
    sign_session,
    valid_token,
)
from app.console.web import (
    ConsolePage,
    ConsoleRoute,
    UserDep,
    base,
    data_of,
    page,
    posted,
    same_origin,
    secure_cookies,
    session_secret,
    storable,
)
from app.deps import gateway_of

__all__ = ["router"]

router = APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)
_JOBS_PER_PAGE = 25
_METHODS = ("stacking", "posterior", "bias", "paper")


def _cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path=base(request), httponly=True, samesite="strict",
                        secure=secure_cookies(request))


def _forget(request: Request, response: Response, name: str) -> None:
    """Clear a cookie with the attributes it was set with (a browser keeps a Secure one a plain clear misses)."""
    response.delete_cookie(name, path=base(request), httponly=True, samesite="strict", secure=secure_cookies(request))


# -- signing in -------------------------------------------------------------------------------------
def _login_page(request: Request, *, status: int = 200, error: str | None = None, notice: str | None = None) -> Response:
    data = data_of(request)
    nonce = new_nonce()
    token = login_token(session_secret(request.app), nonce)
    response = page(request, "login.html", {"title": "Sign in", "csrf": token, "error": error, "notice": notice,
                                            "auth_disabled": data.auth_disabled}, status=status)
    _cookie(request, response, LOGIN_COOKIE, nonce, LOGIN_S)
    return response


@router.get("/login")
async def login_form(request: Request, ended: bool = False) -> Response:
    return _login_page(request, notice="Your session ended: sign in again." if ended else None)


@router.post("/login")
async def login(request: Request) -> Response:
    same_origin(request)
    data = data_of(request)
    form = await request.form()
    nonce, token = request.cookies.get(LOGIN_COOKIE), form.get("csrf")
    secret = session_secret(request.app)
    if not nonce or not valid_token(login_token(secret, nonce), token if isinstance(token, str) else None):
        return _login_page(request, status=403, error="The sign-in form expired or came from elsewhere: sign in here.")
    api_key = form.get("api_key")
    api_key = api_key.strip() if isinstance(api_key, str) else ""
    principal = await asyncio.to_thread(data.authenticate, api_key) if api_key or data.auth_disabled else None
    if principal is None:
        return _login_page(request, status=401, error="Invalid, expired or revoked API key.")
    if not principal.is_admin:
        raise ConsolePage(403, "The console needs an admin key", [(
            f"This is a client key of tenant '{principal.tenant}'. Client keys call the API (diagnoses, reports); "
            "the console is for the tenant's administrators: sign in with an admin key.")])
    generation = await asyncio.to_thread(gateway_of(request).console_sessions.generation, principal.key_id)
    session = sign_session(secret, key_id=principal.key_id, tenant=principal.tenant, generation=generation)
    response = RedirectResponse(base(request), status_code=303)
    _cookie(request, response, COOKIE, session.value, SESSION_S)
    _forget(request, response, LOGIN_COOKIE)
    return response


@router.post("/logout")
async def logout(request: Request, user: UserDep) -> Response:
    """Sign out: ends every session of the key, not only this browser's (a clear cookie alone would leave any copy
    of it valid until it expired)."""
    await posted(request, user)
    await asyncio.to_thread(gateway_of(request).console_sessions.end, user.key_id)
    response = RedirectResponse(f"{base(request)}/login", status_code=303)
    _forget(request, response, COOKIE)
    return response


# -- overview ---------------------------------------------------------------------------------------
@router.get("")
async def overview(request: Request, user: UserDep) -> Response:
    data = data_of(request)
    view, circuits = await asyncio.gather(data.overview(user.tenant), data.circuits())
    view.circuits = circuits
    hours = [(datetime.fromtimestamp(at, UTC).strftime("%H:00"), n) for at, n in view.per_hour]
    failed = sorted(view.failed_calls.items(), key=lambda pair: (-pair[1], pair[0]))
    return page(request, "overview.html", {
        "active": "overview", "title": "Overview", "view": view, "hours": hours, "failed": failed,
        "hours_chart": bar_chart(hours, title="Diagnoses per hour, last 24 hours (UTC)", label_every=3),
        "failed_chart": hbar_chart(failed, title="Failed entity calls today, by entity", tone="bad") if failed else None,
    }, user=user)


# -- entities ---------------------------------------------------------------------------------------
@router.get("/entities")
async def entities(request: Request, user: UserDep) -> Response:
    data = data_of(request)
    circuits = await data.circuits()
    views, calibrations = await asyncio.to_thread(data.entities, user.tenant, circuits)
    calls = [(v.name, float(v.calls_today)) for v in views]
    return page(request, "entities.html", {
        "active": "entities", "title": "Entities", "entities": views, "calibrations": calibrations,
        "circuits_known": circuits is not None, "dropped": data.dropped_entities(),
        "calls_chart": hbar_chart(calls, title="Entity calls today, by entity") if any(n for _, n in calls) else None,
    }, user=user)


# -- Q-matrices -------------------------------------------------------------------------------------
@router.get("/qmatrices")
async def qmatrices(request: Request, user: UserDep) -> Response:
    views = await asyncio.to_thread(data_of(request).qmatrices, user.tenant)
    return page(request, "qmatrices.html", {"active": "qmatrices", "title": "Q-matrices", "qmatrices": views}, user=user)


async def _qmatrix_page(request: Request, user: UserDep, qid: str, calibration: str | None, *, status: int = 200,
                        errors: FieldErrors | None = None) -> Response:
    data = data_of(request)
    view = await asyncio.to_thread(data.qmatrix, user.tenant, qid)
    if view is None:
        raise ConsolePage(404, "No such Q-matrix", [f"Tenant '{user.tenant}' has no Q-matrix '{qid}'."])
    wanted = calibration or view.in_use  # default: the calibration diagnoses use now, else the newest
    chosen = next((c for c in view.calibrations if c.record.id == wanted), None) or (
        None if calibration or not view.calibrations else view.calibrations[0])
    if calibration and chosen is None:
        raise ConsolePage(404, "No such calibration", [f"Q-matrix '{qid}' has no calibration '{calibration}'."])
    bins, note = await data.reliability(user.tenant, chosen) if chosen else ([], "")
    return page(request, "qmatrix.html", {
        "active": "qmatrices", "title": f"Q-matrix {qid}", "q": view, "chosen": chosen, "bins": bins,
        "reliability_note": note, "methods": _METHODS, "errors": errors or {},
        "reliability_chart": reliability_chart(bins, title=f"Reliability of calibration {chosen.record.id}")
        if chosen and bins else None,
    }, user=user, status=status)


@router.get("/qmatrices/{qid}")
async def qmatrix(request: Request, user: UserDep, qid: str, calibration: str | None = None) -> Response:
    return await _qmatrix_page(request, user, qid, calibration)


@router.post("/qmatrices/{qid}/calibrate")
async def calibrate(request: Request, user: UserDep, qid: str) -> Response:
    form = await posted(request, user)
    errors: FieldErrors = {}
    method = form.get("method") or None
    if method is not None and method not in _METHODS:
        errors["method"] = [f"one of {', '.join(_METHODS)}"]
    students = number(form, "max_students", errors, optional=True)
    if students is not None and not (students.is_integer() and 5 <= students <= 100_000):
        errors.setdefault("max_students", []).append("a whole number from 5 to 100000")
    if errors:
        return await _qmatrix_page(request, user, qid, None, status=422, errors=errors)
    job_id = await data_of(request).calibrate(user.tenant, qid, method, int(students) if students else None)
    return RedirectResponse(f"{base(request)}/jobs/{job_id}", status_code=303)


# -- jobs -------------------------------------------------------------------------------------------
def _cursor(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    try:
        created, job_id = json.loads(base64.urlsafe_b64decode(text.encode() + b"=" * (-len(text) % 4)))
    except (ValueError, TypeError):
        raise ConsolePage(422, "Invalid page cursor", ["Follow the console's own 'older jobs' link."]) from None
    if not isinstance(created, str) or not isinstance(job_id, str) or not storable(created + job_id):
        raise ConsolePage(422, "Invalid page cursor", ["Follow the console's own 'older jobs' link."])
    return created, job_id




@router.get("/jobs")
async def jobs(request: Request, user: UserDep, cursor: str | None = None) -> Response:
    data = data_of(request)
    views, last = await data.jobs(user.tenant, limit=_JOBS_PER_PAGE, before=_cursor(cursor))
    following = base64.urlsafe_b64encode(json.dumps(list(last)).encode()).decode().rstrip("=") if last else None
    return page(request, "jobs.html", {"active": "jobs", "title": "Jobs", "jobs": views, "next_cursor": following,
                                       "first_page": cursor is None}, user=user)


async def _job(request: Request, user: UserDep, job_id: str):  # type: ignore[no-untyped-def]
    view = await data_of(request).job(user.tenant, job_id) if storable(job_id) else None
    if view is None:
        raise ConsolePage(404, "No such job", [f"Tenant '{user.tenant}' has no job '{job_id}'."])
    return view


@router.get("/jobs/{job_id}/progress.json")
async def job_progress(request: Request, user: UserDep, job_id: str) -> Response:
    """What the page's script polls for live progress: the session cookie authenticates it (no API key in JS)."""
    return JSONResponse((await _job(request, user, job_id)).progress())


@router.get("/jobs/{job_id}")
async def job(request: Request, user: UserDep, job_id: str) -> Response:
    view = await _job(request, user, job_id)
    return page(request, "job.html", {"active": "jobs", "title": f"Job {job_id}", "job": view}, user=user)


@router.post("/jobs/{job_id}/cancel")
async def cancel_job(request: Request, user: UserDep, job_id: str) -> Response:
    await posted(request, user)
    if not storable(job_id):
        raise ConsolePage(404, "No such job", [f"Tenant '{user.tenant}' has no job '{job_id}'."])
    await data_of(request).cancel(user.tenant, job_id, user.key_id)  # NotFound / Conflict render as pages (web.py)
    return RedirectResponse(f"{base(request)}/jobs/{job_id}", status_code=303)
