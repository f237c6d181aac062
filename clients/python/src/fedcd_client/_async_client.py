"""The client, :class:`AsyncFedcdClient`, written once: ``_sync_client.py`` is generated from this file by
``python clients/python/scripts/unasync.py`` (edit here, then run it).

Layers, as in httpx: ``_send`` owns retries (the :class:`RetryPolicy` decides, an injected ``sleep`` waits), and
only it touches the HTTP client; ``_call`` turns an error status into a typed error and a body into a model; the
resource classes (``qmatrices``, ``jobs``, ``students``, ``privacy``, ``calibrations``) only build requests.
"""

from __future__ import annotations

import time
from asyncio import sleep as _default_sleep
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, Self, TypeVar

import httpx
from pydantic import BaseModel

from fedcd_client import models as m
from fedcd_client._errors import (
    FedcdConnectionError,
    FedcdTimeoutError,
    JobFailedError,
    WaitTimeoutError,
    error_from_response,
)
from fedcd_client._retry import RetryPolicy
from fedcd_client._shared import (
    DEFAULT_TIMEOUT_S,
    FAILED_STATES,
    FINISHED_STATES,
    USER_AGENT,
    AsyncFetch,
    AsyncSleep,
    PageLike,
    body_of,
    resolve_settings,
    segment,
)

__all__ = ["AsyncFedcdClient"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
JobKind = Literal["calibrate", "train"]
JobStatus = Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
ReportFormat = Literal["html", "svg", "png"]
_REPORT_ACCEPT = {"html": "text/html", "svg": "image/svg+xml", "png": "image/png"}


class AsyncFedcdClient:
    """A client of one fedcd gateway. ``base_url`` and ``api_key`` default to ``FEDCD_BASE_URL`` and
    ``FEDCD_API_KEY`` (else ``http://127.0.0.1:8000``). ``http_client``: bring your own (proxies, TLS, a
    ``MockTransport`` in tests; it is not closed by this client); ``sleep``/``clock``: injected for tests."""

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None, http_client: httpx.AsyncClient | None = None,
        sleep: AsyncSleep | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url, api_key = resolve_settings(base_url, api_key)
        self.retry = retry or RetryPolicy()
        self._headers = {"user-agent": USER_AGENT, **({"authorization": f"Bearer {api_key}"} if api_key else {})}
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout_s)
        self._sleep: AsyncSleep = sleep or _default_sleep
        self._clock = clock
        self.qmatrices = AsyncQMatrices(self)
        self.jobs = AsyncJobs(self)
        self.calibrations = AsyncCalibrations(self)
        self.students = AsyncStudents(self)
        self.privacy = AsyncPrivacy(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    # -- transport: retries, then typed errors and models ----------------------------------------------------
    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request with the retry policy applied; an error status is returned, not raised."""
        headers = {**self._headers, **kwargs.pop("headers", {})}
        retry = 0
        while True:
            try:
                response = await self._http.request(method, self.base_url + path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                wait = self.retry.after_error(retry, method, exc)
                if wait is None:
                    raise _connection_error(exc) from exc
            else:
                wait = self.retry.after_response(retry, method, response) if response.status_code >= 400 else None
                if wait is None:
                    return response
            await self._sleep(wait)
            retry += 1

    async def _call(self, method: str, path: str, model: type[M], **kwargs: Any) -> M:
        response = await self._send(method, path, **kwargs)
        if response.status_code >= 400:
            raise error_from_response(response)
        return model.model_validate_json(response.content)

    async def _pages(self, fetch: AsyncFetch[PageLike[T]]) -> AsyncIterator[T]:
        """Every item of a cursor-paginated list, following ``next_cursor`` until the last page."""
        cursor: str | None = None
        while True:
            page = await fetch(cursor)
            for item in page.data:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- the gateway's top-level operations -----------------------------------------------------------------
    async def health(self) -> m.Health:
        """``GET /healthz`` (no key needed)."""
        return await self._call("GET", "/healthz", m.Health)

    async def diagnose(self, request: m.DiagnoseRequest | Mapping[str, Any]) -> m.DiagnoseResponse:
        """Diagnose one student (``POST /v1/diagnose``). Spends ε from the student's budget; a spent budget is
        :class:`PrivacyBudgetExceeded`. ``forecast_items`` (a list of item ids, or ``"all"``) adds ``forecasts``."""
        return await self._call("POST", "/v1/diagnose", m.DiagnoseResponse, json=body_of(m.DiagnoseRequest, request))

    async def diagnose_batch(self, request: m.BatchDiagnoseRequest | Mapping[str, Any]) -> m.BatchDiagnoseResponse:
        """Diagnose many students on one Q-matrix (``POST /v1/diagnose/batch``); per-student failures are listed in
        the response, not raised."""
        return await self._call("POST", "/v1/diagnose/batch", m.BatchDiagnoseResponse,
                                json=body_of(m.BatchDiagnoseRequest, request))

    async def calibrate(self, request: m.CalibrateRequest | Mapping[str, Any]) -> m.JobAccepted:
        """Start a calibration job (``POST /v1/calibrate``, admin key); wait for it with ``jobs.wait(job_id)``."""
        return await self._call("POST", "/v1/calibrate", m.JobAccepted, json=body_of(m.CalibrateRequest, request))

    async def calibration_job(self, job_id: str) -> m.CalibrateJob:
        """A calibration job with its calibration-specific fields (``GET /v1/calibrate/{job_id}``)."""
        return await self._call("GET", f"/v1/calibrate/{segment(job_id)}", m.CalibrateJob)

    async def usage(self, *, since: str | None = None) -> m.UsageReport:
        """What the tenant's diagnoses used since ``since`` (ISO 8601; default: 30 days ago)."""
        return await self._call("GET", "/v1/usage", m.UsageReport, params=_query(since=since))


class _AsyncResource:
    def __init__(self, client: AsyncFedcdClient) -> None:
        self._c = client


class AsyncQMatrices(_AsyncResource):
    """``/v1/qmatrices``: the tenant's Q-matrices (writing needs an admin key) and the shared built-in ones."""

    async def create(self, qmatrix: m.QMatrixCreate | Mapping[str, Any]) -> m.QMatrixSummary:
        """Register a Q-matrix (version 1); an id in use is :class:`ConflictError` (replace it with ``replace``)."""
        return await self._c._call("POST", "/v1/qmatrices", m.QMatrixSummary, json=body_of(m.QMatrixCreate, qmatrix))

    async def create_csv(self, qmatrix_id: str, csv: str | bytes) -> m.QMatrixSummary:
        """Register a Q-matrix from CSV (``item_id,text,<concept>...``, one row per item)."""
        return await self._c._call("POST", "/v1/qmatrices", m.QMatrixSummary, params={"id": qmatrix_id},
                                   content=csv, headers={"content-type": "text/csv"})

    async def replace(self, qmatrix_id: str, qmatrix: m.QMatrixCreate | Mapping[str, Any]) -> m.QMatrixSummary:
        """A new version of the tenant's Q-matrix (``PUT``)."""
        return await self._c._call("PUT", f"/v1/qmatrices/{segment(qmatrix_id)}", m.QMatrixSummary,
                                   json=body_of(m.QMatrixCreate, qmatrix))

    async def get(self, qmatrix_id: str, *, version: int | None = None) -> m.QMatrixPublic:
        return await self._c._call("GET", f"/v1/qmatrices/{segment(qmatrix_id)}", m.QMatrixPublic,
                                   params=_query(version=version))

    async def delete(self, qmatrix_id: str) -> None:
        response = await self._c._send("DELETE", f"/v1/qmatrices/{segment(qmatrix_id)}")
        if response.status_code >= 400:
            raise error_from_response(response)

    async def list(self, *, limit: int | None = None, cursor: str | None = None) -> m.QMatrixList:
        """One page of Q-matrix ids (built-in first); ``iter()`` follows the pages."""
        return await self._c._call("GET", "/v1/qmatrices", m.QMatrixList, params=_query(limit=limit, cursor=cursor))

    def iter(self, *, page_size: int | None = None) -> AsyncIterator[str]:
        """Every Q-matrix id, page by page."""
        return self._c._pages(lambda cursor: self.list(limit=page_size, cursor=cursor))


class AsyncJobs(_AsyncResource):
    """``/v1/jobs`` (admin keys): calibrations and upload-and-train runs."""

    async def list(self, *, limit: int | None = None, cursor: str | None = None, kind: Sequence[JobKind] = (),
                   status: Sequence[JobStatus] = ()) -> m.JobList:
        """One page of jobs, newest first; ``iter()`` follows the pages."""
        params = [*_query(limit=limit, cursor=cursor).items(), *(("kind", k) for k in kind),
                  *(("state", s) for s in status)]
        return await self._c._call("GET", "/v1/jobs", m.JobList, params=params)

    def iter(self, *, page_size: int | None = None, kind: Sequence[JobKind] = (),
             status: Sequence[JobStatus] = ()) -> AsyncIterator[m.JobPublic]:
        return self._c._pages(lambda cursor: self.list(limit=page_size, cursor=cursor, kind=kind, status=status))

    async def get(self, job_id: str) -> m.JobPublic:
        return await self._c._call("GET", f"/v1/jobs/{segment(job_id)}", m.JobPublic)

    async def cancel(self, job_id: str) -> m.JobPublic:
        """Cancel a job (``cancelling`` until its worker stops it); a finished one is :class:`ConflictError`."""
        return await self._c._call("POST", f"/v1/jobs/{segment(job_id)}/cancel", m.JobPublic)

    async def wait(
        self, job_id: str, *, poll_s: float = 1.0, timeout_s: float | None = None,
        on_progress: Callable[[m.JobPublic], None] | None = None, raise_on_failure: bool = True,
    ) -> m.JobPublic:
        """Poll until the job finishes and return its last state. ``on_progress`` is called with the job whenever its
        status or progress changes (first read included). A job that ends ``failed`` or ``cancelled`` raises
        :class:`JobFailedError` (unless ``raise_on_failure=False``); past ``timeout_s``, :class:`WaitTimeoutError`
        (the job keeps running)."""
        started = self._c._clock()
        seen: tuple[object, ...] | None = None
        while True:
            job = await self.get(job_id)
            state = (job.status, job.progress.done, job.progress.total)
            if on_progress is not None and state != seen:
                on_progress(job)
            seen = state
            if job.status in FINISHED_STATES:
                if raise_on_failure and job.status in FAILED_STATES:
                    raise JobFailedError(job)
                return job
            if timeout_s is not None and self._c._clock() - started + poll_s > timeout_s:
                raise WaitTimeoutError(job, timeout_s)
            await self._c._sleep(poll_s)


class AsyncCalibrations(_AsyncResource):
    """``/v1/calibrations``: the calibration records jobs produce (the tenant's and the shared ones)."""

    async def list(self, *, qmatrix_id: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> m.CalibrationList:
        return await self._c._call("GET", "/v1/calibrations", m.CalibrationList,
                                   params=_query(qmatrix_id=qmatrix_id, limit=limit, cursor=cursor))

    def iter(self, *, qmatrix_id: str | None = None, page_size: int | None = None) -> AsyncIterator[m.CalibrationPublic]:
        return self._c._pages(lambda cursor: self.list(qmatrix_id=qmatrix_id, limit=page_size, cursor=cursor))

    async def get(self, calibration_id: str) -> m.CalibrationPublic:
        return await self._c._call("GET", f"/v1/calibrations/{segment(calibration_id)}", m.CalibrationPublic)


class AsyncStudents(_AsyncResource):
    """A student's data rights (export, erase: admin keys) and the teacher's report (any key)."""

    async def export(self, student_id: str) -> m.StudentExport:
        """Everything stored about the student, each privacy charge included."""
        return await self._c._call("GET", f"/v1/students/{segment(student_id)}/export", m.StudentExport)

    async def erase(self, student_id: str) -> m.StudentErasure:
        """Erase the student's stored data (the budget's spend is kept: erasure never resets a budget)."""
        return await self._c._call("DELETE", f"/v1/students/{segment(student_id)}", m.StudentErasure)

    async def report(self, student_id: str, *, qmatrix_id: str, format: ReportFormat = "html") -> bytes:
        """The report of the student's latest stored diagnosis on ``qmatrix_id``: an HTML page, or its chart as SVG
        or PNG. Re-reads a released diagnosis: no ε is charged."""
        response = await self._c._send("GET", f"/v1/students/{segment(student_id)}/report",
                                       params={"qmatrix_id": qmatrix_id}, headers={"accept": _REPORT_ACCEPT[format]})
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.content


class AsyncPrivacy(_AsyncResource):
    """The tenant's privacy ledger (read-only) and policy."""

    async def budget(self, student_id: str) -> m.StudentBudget:
        """The student's budget: spent and remaining in the period, when it renews (the id travels in the body,
        never in a URL or access log)."""
        return await self._c._call("POST", "/v1/privacy/lookup", m.StudentBudget,
                                   json=body_of(m.StudentLookup, {"student_id": student_id}))

    async def policy(self) -> m.PrivacyPolicyPublic:
        """The tenant's privacy policy in force (admin key)."""
        return await self._c._call("GET", "/v1/admin/privacy-policy", m.PrivacyPolicyPublic)


def _query(**values: object) -> dict[str, str]:
    """Query parameters, leaving out the ones not given."""
    return {k: str(v) for k, v in values.items() if v is not None}


def _connection_error(exc: httpx.TransportError) -> FedcdConnectionError:
    cls = FedcdTimeoutError if isinstance(exc, httpx.TimeoutException) else FedcdConnectionError
    return cls(f"{type(exc).__name__}: {exc}")

