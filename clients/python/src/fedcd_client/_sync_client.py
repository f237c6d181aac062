"""The sync client, :class:`FedcdClient`: the async client (``_async_client.py``) without ``async``/``await``.

GENERATED from _async_client.py by clients/python/scripts/unasync.py: do not edit by hand.
tests/clients/test_client_drift.py fails when the two differ.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Callable, Mapping, Sequence
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
    Fetch,
    Sleep,
    PageLike,
    body_of,
    resolve_settings,
    segment,
)

__all__ = ["FedcdClient"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
JobKind = Literal["calibrate", "train"]
JobStatus = Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
ReportFormat = Literal["html", "svg", "png"]
_REPORT_ACCEPT = {"html": "text/html", "svg": "image/svg+xml", "png": "image/png"}


class FedcdClient:
    """A client of one fedcd gateway. ``base_url`` and ``api_key`` default to ``FEDCD_BASE_URL`` and
    ``FEDCD_API_KEY`` (else ``http://127.0.0.1:8000``). ``http_client``: bring your own (proxies, TLS, a
    ``MockTransport`` in tests; it is not closed by this client); ``sleep``/``clock``: injected for tests."""

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None, http_client: httpx.Client | None = None,
        sleep: Sleep | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url, api_key = resolve_settings(base_url, api_key)
        self.retry = retry or RetryPolicy()
        self._headers = {"user-agent": USER_AGENT, **({"authorization": f"Bearer {api_key}"} if api_key else {})}
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout_s)
        self._sleep: Sleep = sleep or time.sleep
        self._clock = clock
        self.qmatrices = QMatrices(self)
        self.jobs = Jobs(self)
        self.calibrations = Calibrations(self)
        self.students = Students(self)
        self.privacy = Privacy(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    # -- transport: retries, then typed errors and models ----------------------------------------------------
    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request with the retry policy applied; an error status is returned, not raised."""
        headers = {**self._headers, **kwargs.pop("headers", {})}
        retry = 0
        while True:
            try:
                response = self._http.request(method, self.base_url + path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                wait = self.retry.after_error(retry, method, exc)
                if wait is None:
                    raise _connection_error(exc) from exc
            else:
                wait = self.retry.after_response(retry, method, response) if response.status_code >= 400 else None
                if wait is None:
                    return response
            self._sleep(wait)
            retry += 1

    def _call(self, method: str, path: str, model: type[M], **kwargs: Any) -> M:
        response = self._send(method, path, **kwargs)
        if response.status_code >= 400:
            raise error_from_response(response)
        return model.model_validate_json(response.content)

    def _pages(self, fetch: Fetch[PageLike[T]]) -> Iterator[T]:
        """Every item of a cursor-paginated list, following ``next_cursor`` until the last page."""
        cursor: str | None = None
        while True:
            page = fetch(cursor)
            for item in page.data:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- the gateway's top-level operations -----------------------------------------------------------------
    def health(self) -> m.Health:
        """``GET /healthz`` (no key needed)."""
        return self._call("GET", "/healthz", m.Health)

    def diagnose(self, request: m.DiagnoseRequest | Mapping[str, Any]) -> m.DiagnoseResponse:
        """Diagnose one student (``POST /v1/diagnose``). Spends ε from the student's budget; a spent budget is
        :class:`PrivacyBudgetExceeded`. ``forecast_items`` (a list of item ids, or ``"all"``) adds ``forecasts``."""
        return self._call("POST", "/v1/diagnose", m.DiagnoseResponse, json=body_of(m.DiagnoseRequest, request))

    def diagnose_batch(self, request: m.BatchDiagnoseRequest | Mapping[str, Any]) -> m.BatchDiagnoseResponse:
        """Diagnose many students on one Q-matrix (``POST /v1/diagnose/batch``); per-student failures are listed in
        the response, not raised."""
        return self._call("POST", "/v1/diagnose/batch", m.BatchDiagnoseResponse,
                                json=body_of(m.BatchDiagnoseRequest, request))

    def calibrate(self, request: m.CalibrateRequest | Mapping[str, Any]) -> m.JobAccepted:
        """Start a calibration job (``POST /v1/calibrate``, admin key); wait for it with ``jobs.wait(job_id)``."""
        return self._call("POST", "/v1/calibrate", m.JobAccepted, json=body_of(m.CalibrateRequest, request))

    def calibration_job(self, job_id: str) -> m.CalibrateJob:
        """A calibration job with its calibration-specific fields (``GET /v1/calibrate/{job_id}``)."""
        return self._call("GET", f"/v1/calibrate/{segment(job_id)}", m.CalibrateJob)

    def usage(self, *, since: str | None = None) -> m.UsageReport:
        """What the tenant's diagnoses used since ``since`` (ISO 8601; default: 30 days ago)."""
        return self._call("GET", "/v1/usage", m.UsageReport, params=_query(since=since))


class _Resource:
    def __init__(self, client: FedcdClient) -> None:
        self._c = client


class QMatrices(_Resource):
    """``/v1/qmatrices``: the tenant's Q-matrices (writing needs an admin key) and the shared built-in ones."""

    def create(self, qmatrix: m.QMatrixCreate | Mapping[str, Any]) -> m.QMatrixSummary:
        """Register a Q-matrix (version 1); an id in use is :class:`ConflictError` (replace it with ``replace``)."""
        return self._c._call("POST", "/v1/qmatrices", m.QMatrixSummary, json=body_of(m.QMatrixCreate, qmatrix))

    def create_csv(self, qmatrix_id: str, csv: str | bytes) -> m.QMatrixSummary:
        """Register a Q-matrix from CSV (``item_id,text,<concept>...``, one row per item)."""
        return self._c._call("POST", "/v1/qmatrices", m.QMatrixSummary, params={"id": qmatrix_id},
                                   content=csv, headers={"content-type": "text/csv"})

    def replace(self, qmatrix_id: str, qmatrix: m.QMatrixCreate | Mapping[str, Any]) -> m.QMatrixSummary:
        """A new version of the tenant's Q-matrix (``PUT``)."""
        return self._c._call("PUT", f"/v1/qmatrices/{segment(qmatrix_id)}", m.QMatrixSummary,
                                   json=body_of(m.QMatrixCreate, qmatrix))

    def get(self, qmatrix_id: str, *, version: int | None = None) -> m.QMatrixPublic:
        return self._c._call("GET", f"/v1/qmatrices/{segment(qmatrix_id)}", m.QMatrixPublic,
                                   params=_query(version=version))

    def delete(self, qmatrix_id: str) -> None:
        response = self._c._send("DELETE", f"/v1/qmatrices/{segment(qmatrix_id)}")
        if response.status_code >= 400:
            raise error_from_response(response)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> m.QMatrixList:
        """One page of Q-matrix ids (built-in first); ``iter()`` follows the pages."""
        return self._c._call("GET", "/v1/qmatrices", m.QMatrixList, params=_query(limit=limit, cursor=cursor))

    def iter(self, *, page_size: int | None = None) -> Iterator[str]:
        """Every Q-matrix id, page by page."""
        return self._c._pages(lambda cursor: self.list(limit=page_size, cursor=cursor))


class Jobs(_Resource):
    """``/v1/jobs`` (admin keys): calibrations and upload-and-train runs."""

    def list(self, *, limit: int | None = None, cursor: str | None = None, kind: Sequence[JobKind] = (),
                   status: Sequence[JobStatus] = ()) -> m.JobList:
        """One page of jobs, newest first; ``iter()`` follows the pages."""
        params = [*_query(limit=limit, cursor=cursor).items(), *(("kind", k) for k in kind),
                  *(("state", s) for s in status)]
        return self._c._call("GET", "/v1/jobs", m.JobList, params=params)

    def iter(self, *, page_size: int | None = None, kind: Sequence[JobKind] = (),
             status: Sequence[JobStatus] = ()) -> Iterator[m.JobPublic]:
        return self._c._pages(lambda cursor: self.list(limit=page_size, cursor=cursor, kind=kind, status=status))

    def get(self, job_id: str) -> m.JobPublic:
        return self._c._call("GET", f"/v1/jobs/{segment(job_id)}", m.JobPublic)

    def cancel(self, job_id: str) -> m.JobPublic:
        """Cancel a job (``cancelling`` until its worker stops it); a finished one is :class:`ConflictError`."""
        return self._c._call("POST", f"/v1/jobs/{segment(job_id)}/cancel", m.JobPublic)

    def wait(
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
            job = self.get(job_id)
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
            self._c._sleep(poll_s)


class Calibrations(_Resource):
    """``/v1/calibrations``: the calibration records jobs produce (the tenant's and the shared ones)."""

    def list(self, *, qmatrix_id: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> m.CalibrationList:
        return self._c._call("GET", "/v1/calibrations", m.CalibrationList,
                                   params=_query(qmatrix_id=qmatrix_id, limit=limit, cursor=cursor))

    def iter(self, *, qmatrix_id: str | None = None, page_size: int | None = None) -> Iterator[m.CalibrationPublic]:
        return self._c._pages(lambda cursor: self.list(qmatrix_id=qmatrix_id, limit=page_size, cursor=cursor))

    def get(self, calibration_id: str) -> m.CalibrationPublic:
        return self._c._call("GET", f"/v1/calibrations/{segment(calibration_id)}", m.CalibrationPublic)


class Students(_Resource):
    """A student's data rights (export, erase: admin keys) and the teacher's report (any key)."""

    def export(self, student_id: str) -> m.StudentExport:
        """Everything stored about the student, each privacy charge included."""
        return self._c._call("GET", f"/v1/students/{segment(student_id)}/export", m.StudentExport)

    def erase(self, student_id: str) -> m.StudentErasure:
        """Erase the student's stored data (the budget's spend is kept: erasure never resets a budget)."""
        return self._c._call("DELETE", f"/v1/students/{segment(student_id)}", m.StudentErasure)

    def report(self, student_id: str, *, qmatrix_id: str, format: ReportFormat = "html") -> bytes:
        """The report of the student's latest stored diagnosis on ``qmatrix_id``: an HTML page, or its chart as SVG
        or PNG. Re-reads a released diagnosis: no ε is charged."""
        response = self._c._send("GET", f"/v1/students/{segment(student_id)}/report",
                                       params={"qmatrix_id": qmatrix_id}, headers={"accept": _REPORT_ACCEPT[format]})
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.content


class Privacy(_Resource):
    """The tenant's privacy ledger (read-only) and policy."""

    def budget(self, student_id: str) -> m.StudentBudget:
        """The student's budget: spent and remaining in the period, when it renews (the id travels in the body,
        never in a URL or access log)."""
        return self._c._call("POST", "/v1/privacy/lookup", m.StudentBudget,
                                   json=body_of(m.StudentLookup, {"student_id": student_id}))

    def policy(self) -> m.PrivacyPolicyPublic:
        """The tenant's privacy policy in force (admin key)."""
        return self._c._call("GET", "/v1/admin/privacy-policy", m.PrivacyPolicyPublic)


def _query(**values: object) -> dict[str, str]:
    """Query parameters, leaving out the ones not given."""
    return {k: str(v) for k, v in values.items() if v is not None}


def _connection_error(exc: httpx.TransportError) -> FedcdConnectionError:
    cls = FedcdTimeoutError if isinstance(exc, httpx.TimeoutException) else FedcdConnectionError
    return cls(f"{type(exc).__name__}: {exc}")

