"""The console's administrative pages: a student's budget, charges, export and erasure; API keys; the privacy
policy. A student id is only ever sent in a POSTed form, never in a URL."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from markupsafe import Markup

from app.presentation.charts import timeline_chart
from app.console.forms import FieldErrors, number, policy_from_form, student_id_from_form
from app.console.web import ConsolePage, ConsoleRoute, User, UserDep, base, data_of, page, posted, storable
from app.domain_errors import Conflict, InvalidInput
from app.schemas.students import StudentExport
from privacy import MECHANISM_NAMES

__all__ = ["router"]

router = APIRouter(prefix="/console", include_in_schema=False, route_class=ConsoleRoute)
_MECHANISMS = MECHANISM_NAMES  # the registry's names: the form offers exactly what a policy accepts
_PERIODS = ("lifetime", "rolling", "day", "week", "term")


# -- students ---------------------------------------------------------------------------------------
def _students_page(request: Request, user: User, *, status: int = 200, **context: Any) -> Response:
    return page(request, "students.html", {"active": "students", "title": "Students", "errors": {}, "export": None,
                                           "erased": None, "student_id": "", "report": None, **context}, user=user, status=status)


@router.get("/students")
async def students(request: Request, user: UserDep) -> Response:
    return _students_page(request, user)


async def _student_form(request: Request, user: User) -> tuple[Mapping[str, str], str | None, FieldErrors]:
    form = await posted(request, user)
    errors: FieldErrors = {}
    return form, student_id_from_form(form, errors), errors


def _timeline(export: StudentExport) -> list[tuple[float, float]]:
    points, total = [], 0.0
    for charge in export.charges:
        if charge.epsilon_total > 0:
            total += charge.epsilon_total
            points.append((datetime.fromisoformat(charge.created_at).replace(tzinfo=UTC).timestamp(), total))
    return points


@router.post("/students")
async def student(request: Request, user: UserDep) -> Response:
    form, student_id, errors = await _student_form(request, user)
    if student_id is None:
        return _students_page(request, user, status=422, errors=errors, student_id=form.get("student_id", ""))
    data = data_of(request)
    export = await data.student(user.tenant, student_id)
    points = _timeline(export)
    # The cap applies per period: drawn against the lifetime total only when the period is the lifetime.
    budget = export.budget
    cap = budget.cap_epsilon if budget is not None and budget.period.startswith("lifetime") else None
    chart = timeline_chart(points, title="ε spent by this student over time (lifetime total)", cap=cap) if points else None
    report = await asyncio.to_thread(data.student_report, user.tenant, export)
    return _students_page(request, user, export=export, student_id=student_id, chart=chart,
                          report=(report[0], Markup(report[1])) if report else None)


@router.post("/students/export")
async def student_export(request: Request, user: UserDep) -> Response:
    form, student_id, errors = await _student_form(request, user)
    if student_id is None:
        return _students_page(request, user, status=422, errors=errors, student_id=form.get("student_id", ""))
    export = await data_of(request).student(user.tenant, student_id)
    day = datetime.now(UTC).strftime("%Y%m%d")
    return Response(export.model_dump_json(indent=2), media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="student-export-{day}.json"'})


@router.post("/students/erase")
async def student_erase(request: Request, user: UserDep) -> Response:
    form, student_id, errors = await _student_form(request, user)
    if form.get("confirm") != "yes":
        errors.setdefault("confirm", []).append("tick the box to confirm the erasure")
    if student_id is None or errors:
        return _students_page(request, user, status=422, errors=errors, student_id=form.get("student_id", ""))
    try:
        erased = await data_of(request).erase(user.tenant, student_id)
    except Conflict as exc:
        return _students_page(request, user, status=409, errors={"erase": exc.messages}, student_id=student_id)
    return _students_page(request, user, erased=erased, student_id=student_id)


# -- keys -------------------------------------------------------------------------------------------
async def _keys_page(request: Request, user: User, *, status: int = 200, **context: Any) -> Response:
    keys = await asyncio.to_thread(data_of(request).keys, user.tenant)
    return page(request, "keys.html", {"active": "keys", "title": "API keys", "keys": keys, "errors": {},
                                       "created": None, **context}, user=user, status=status)


@router.get("/keys")
async def keys(request: Request, user: UserDep) -> Response:
    return await _keys_page(request, user)


@router.post("/keys")
async def create_key(request: Request, user: UserDep) -> Response:
    form = await posted(request, user)
    errors: FieldErrors = {}
    role = form.get("role", "client")
    if role not in ("client", "admin"):
        errors["role"] = ["client or admin"]
    days = number(form, "expires_days", errors, optional=True)
    if days is not None and not 0 < days <= 36500:
        errors.setdefault("expires_days", []).append("more than 0 and at most 36500 days, or blank for no expiry")
    if errors:
        return await _keys_page(request, user, status=422, errors=errors)
    try:
        created = await asyncio.to_thread(data_of(request).create_key, user.tenant, role, days, user.key_id)  # type: ignore[arg-type]
    except InvalidInput as exc:  # it would outlive the signed-in key (app.routes.admin_keys.lifetime_within)
        return await _keys_page(request, user, status=422, errors={"expires_days": exc.messages})
    return await _keys_page(request, user, status=201, created=created)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(request: Request, user: UserDep, key_id: str) -> Response:
    await posted(request, user)
    if not storable(key_id) or not await asyncio.to_thread(data_of(request).revoke_key, user.tenant, key_id):
        raise ConsolePage(404, "No such key", [f"Tenant '{user.tenant}' has no key '{key_id}'."])
    return RedirectResponse(f"{base(request)}/keys", status_code=303)


# -- privacy policy ---------------------------------------------------------------------------------
def _policy_values(policy: Any) -> dict[str, str]:
    """The policy as the form's fields."""
    period = policy.period
    return {
        "period.kind": period.kind, "period.window_s": f"{getattr(period, 'window_s', 86400.0):g}",
        "period.timezone": getattr(period, "timezone", "UTC"),
        "period.terms": "\n".join(f"{t.start} {t.end}" for t in getattr(period, "terms", [])),
        "cap_epsilon": f"{policy.cap_epsilon:g}", "cap_delta": f"{policy.cap_delta:g}",
        "default_mechanism": policy.default_mechanism, "default_epsilon": f"{policy.default_epsilon:g}",
        "sensitivity": policy.sensitivity, "allow_unnoised": "on" if policy.allow_unnoised else "",
        "warning_fraction": f"{policy.warning_fraction:g}",
    }


async def _policy_page(request: Request, user: User, *, status: int = 200, values: Mapping[str, str] | None = None,
                       errors: FieldErrors | None = None, saved: bool = False) -> Response:
    data = data_of(request)
    current, history = await asyncio.gather(asyncio.to_thread(data.policy, user.tenant),
                                            asyncio.to_thread(data.policy_history, user.tenant))
    return page(request, "policy.html", {
        "active": "policy", "title": "Privacy policy", "policy": current, "history": list(reversed(history)),
        "values": values or _policy_values(current), "errors": errors or {}, "saved": saved,
        "mechanisms": _MECHANISMS, "periods": _PERIODS, "server_allows_unnoised": data.server_allows_unnoised,
    }, user=user, status=status)


@router.get("/policy")
async def policy(request: Request, user: UserDep) -> Response:
    return await _policy_page(request, user)


@router.post("/policy")
async def update_policy(request: Request, user: UserDep) -> Response:
    form = await posted(request, user)
    parsed, errors = policy_from_form(form)
    if parsed is not None:
        try:
            await asyncio.to_thread(data_of(request).put_policy, user.tenant, parsed, user.key_id)
        except InvalidInput as exc:  # refused by the server's settings (allow_unnoised)
            errors = {str(exc.field[-1]) if exc.field else "form": exc.messages}
        else:
            return await _policy_page(request, user, saved=True)
    return await _policy_page(request, user, status=422, values=form, errors=errors)


# -- anything else under /console ---------------------------------------------------------------------
@router.get("/{rest:path}")
async def not_found(request: Request, rest: str) -> Response:
    if not rest:  # /console/
        return RedirectResponse(base(request), status_code=307)
    raise ConsolePage(404, "No such console page", [f"/console/{rest} does not exist."])
