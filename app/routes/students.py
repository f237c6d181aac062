"""A student's data rights (admin keys, README "Student data"): ``GET /v1/students/{student_id}/export`` — everything
stored about the student, each privacy charge included — and ``DELETE /v1/students/{student_id}`` — erase it, all
but the spend the budget cap is enforced on; and the teacher's report of the latest stored diagnosis (any key of the
tenant, README "Student report"): ``GET /v1/students/{student_id}/report``. Another tenant's student is never seen: everything is looked up under
the caller's tenant (an unknown student exports empty and erases nothing)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.routing import APIRoute

from app.deps import AdminDep, GatewayDep, PrincipalDep, QMatrixServiceDep, StudentDataDep
from app.domain_errors import NotFound
from app.errors import InputError
from app.routes.responses import ADMIN_ERRORS
from app.schemas.students import StudentErasure, StudentExport
from app.presentation.report import REPORT_HEADERS, report_html, report_png, report_svg
from app.services.report import build_report
from app.services.next_items import with_next_items
from app.schemas.common import Identifier

router = APIRouter(prefix="/v1/students", tags=["students"])


@router.get("/{student_id}/export", response_model=StudentExport, responses=ADMIN_ERRORS)
async def read_student_export(student_id: Identifier, service: StudentDataDep, principal: AdminDep) -> StudentExport:
    """Everything stored about the student (JSON): each privacy charge (when, source, ε, status), the released
    diagnoses still kept, the jobs whose inputs hold the student, the budget now and the retention in force."""
    return await service.export(principal.tenant, student_id)


@router.delete("/{student_id}", response_model=StudentErasure, responses={
    **ADMIN_ERRORS, 409: {"description": "a diagnosis of the student is in flight, or a queued or running job holds "
                                         "the student: erase again once it has finished"}})
async def delete_student(student_id: Identifier, service: StudentDataDep, principal: AdminDep) -> StudentErasure:
    """Erase every stored trace of the student's data: released diagnoses, the request fingerprints of the repeat
    rule, cached entity answers made from their responses, job inputs and results. The privacy ledger keeps each
    charge's spend under the keyed hash, so erasure never resets the budget; the response says what was removed
    and what is kept, and why."""
    return await service.erase(principal.tenant, student_id)


_REPORT_TYPES = {"image/svg+xml": "image/svg+xml", "image/png": "image/png"}


class _ReportRoute(APIRoute):
    """The report route adds :data:`REPORT_HEADERS` to every answer, its errors too (401, 403, 404, 422, 429…):
    an error is rendered here by the app's own handler for it (same status, body and headers), then secured.
    Unexpected errors are left to the app's last-resort handler, which logs them."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                response = await handler(request)
            except Exception as exc:
                render = _known_handler(request, exc)
                if render is None:
                    raise
                response = render(request, exc)
                if inspect.isawaitable(response):
                    response = await response
            response.headers.update(REPORT_HEADERS)
            return response

        return run


def _known_handler(request: Request, exc: Exception) -> Callable[..., Any] | None:
    """The app's handler for ``exc``'s class or its nearest base, short of the catch-all ``Exception`` one."""
    mro = type(exc).__mro__
    handlers = request.app.exception_handlers
    return next((handlers[c] for c in mro[:mro.index(Exception)] if c in handlers), None)


async def read_student_report(
    student_id: Identifier, request: Request, service: StudentDataDep, qmatrices: QMatrixServiceDep,
    gateway: GatewayDep, principal: PrincipalDep,
    qmatrix_id: Annotated[Identifier, Query(description="the Q-matrix of the diagnosis to report")],
) -> Response:
    """A report a teacher can read, from the student's latest stored diagnosis on the Q-matrix: mastery per concept
    with its credible interval, the evidence behind each, what the diagnosis rests on and what the interval means.
    Printable on one page; the chart is also given as a table. Re-reads a released answer: no ε is charged."""
    stored = [d for d in await service.diagnoses(principal.tenant, student_id)
              if d.diagnosis.get("qmatrix_id") == qmatrix_id]
    if not stored:
        raise InputError(("query", "qmatrix_id"), [
            f"no stored diagnosis of this student on Q-matrix '{qmatrix_id}' (none made, or removed by retention or "
            "erasure)"], status_code=404)
    try:
        found = (await qmatrices.get(principal.tenant, qmatrix_id)).qmatrix
    except NotFound:  # deleted since: the report still reads, in the diagnosis's own concept order
        found = None
    report = await asyncio.to_thread(with_next_items, gateway.next_items, build_report(stored[-1], found), found,
                                     principal.tenant)  # issue 34: items to ask next for thin-evidence concepts
    accept = request.headers.get("accept", "")
    wanted = next((t for t in _REPORT_TYPES if t in accept), None)
    if wanted == "image/svg+xml":
        return Response(report_svg(report), media_type="image/svg+xml")
    if wanted == "image/png":
        return Response(await asyncio.to_thread(report_png, report), media_type="image/png")
    return Response(report_html(report), media_type="text/html; charset=utf-8")


# Added here, not with @router.get: only add_api_route takes a route class for one route (the others of this router
# keep theirs).
router.add_api_route(
    "/{student_id}/report", read_student_report, methods=["GET"], response_class=Response,
    route_class_override=_ReportRoute, responses={
        **ADMIN_ERRORS,
        200: {"description": "the report page (text/html), or its chart alone (Accept: image/svg+xml or image/png)",
              "content": {"text/html": {}, "image/svg+xml": {}, "image/png": {}}},
        404: {"description": "no stored diagnosis of the student on that Q-matrix (never made, or removed by "
                             "retention or erasure)"},
    })
