"""Everything the operator console shows or changes, gathered from the gateway's services (the ones the API's routes
use, reached through ``app.deps``) in this one module. Every method takes the signed-in tenant and reads that
tenant's data only (plus the shared, read-only data every tenant sees: the built-in Q-matrix and the first-start
calibration). Blocking methods are plain functions (the routes run them in worker threads); the async ones await
the services' own async calls."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from app.auth import KeyInfo, NewKey, Principal, Role
from app.console.views import CalibrationView, EntityView, FailureEvent, JobView, Overview, QMatrixView
from app.deps import AUTH_DISABLED
from app.gateway import Gateway
from app.jobs import JobSummary
from app.routes.admin_keys import lifetime_within
from app.routes.entities import public_base_url
from app.schemas import CalibrateRequest, DatasetRef, PrivacyPolicy, PrivacyPolicyPublic
from app.schemas.students import StudentErasure, StudentExport
from app.services.activity import failed_calls
from providers.circuit import CircuitStoreUnavailable

__all__ = ["ConsoleData"]

log = logging.getLogger("fedcd.console")
_SCAN_ANSWERS = 2000  # stored diagnoses read for failure reasons (newest first)
_ITEMS_SHOWN = 500
_RELIABILITY_STUDENTS = 2000  # validation students a reliability diagram is drawn from (at most)


def _day_start(now: float) -> float:
    return now - now % 86400


class ConsoleData:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    # -- sign-in ----------------------------------------------------------------------------------
    @property
    def auth_disabled(self) -> bool:
        return self.gateway.settings.auth == "disabled"

    def authenticate(self, api_key: str) -> Principal | None:
        return AUTH_DISABLED if self.auth_disabled else self.gateway.keys.authenticate(api_key)

    def key_active(self, tenant: str, key_id: str) -> bool:
        """Whether the admin key a session was opened with is still valid (checked on every console request)."""
        if key_id == AUTH_DISABLED.key_id:
            return self.auth_disabled and tenant == AUTH_DISABLED.tenant
        now = time.time()
        return any(k.key_id == key_id and k.role == "admin" and k.active(now) for k in self.gateway.keys.list(tenant))

    async def rate_check(self, tenant: str) -> None:
        await self.gateway.rate_limiter.check(tenant)  # raises RateLimited

    # -- overview ---------------------------------------------------------------------------------
    async def circuits(self) -> dict[str, str] | None:
        """Each breaker-guarded entity's circuit state; None when the breakers' store (Redis) did not answer."""
        federation = self.gateway.federation
        try:
            return dict(await federation.circuit_states()) if federation is not None else {}
        except CircuitStoreUnavailable:
            return None

    async def overview(self, tenant: str) -> Overview:
        view, active = await asyncio.gather(asyncio.to_thread(self._overview, tenant),
                                            self.gateway.job_queries.active_count(tenant))
        view.active_jobs = active
        return view

    def _overview(self, tenant: str) -> Overview:
        now = time.time()
        since = _day_start(now)
        usage = self.gateway.usage.report(tenant, datetime.fromtimestamp(since, UTC))  # writes its buffer first
        first_hour = now - now % 3600 - 23 * 3600
        counts = self.gateway.activity.counts(tenant, since=since, stamps_since=min(since, first_hour))
        calls = self.gateway.activity.entity_calls(tenant, since=since)
        stamps = counts.diagnosis_stamps
        hours = Counter(int((at - first_hour) // 3600) for at in stamps if at >= first_hour)
        reasons: dict[str, Counter[str]] = {}
        for event in self.failures(tenant, since):
            reasons.setdefault(event.entity, Counter())[event.reason] += 1
        return Overview(
            since=since, diagnoses=sum(1 for at in stamps if at >= since),
            per_hour=[(first_hour + h * 3600, hours.get(h, 0)) for h in range(24)], usage=usage,
            failed_calls=failed_calls(calls), reasons=reasons, circuits={},
            refusals=self.refusals(tenant), epsilon_today=counts.epsilon_spent, active_jobs=0,
        )

    def failures(self, tenant: str, since: float) -> list[FailureEvent]:
        """Entity failures named by the tenant's stored diagnoses since ``since``, newest first."""
        return self.gateway.activity.failures(tenant, since=since, limit=_SCAN_ANSWERS)

    def refusals(self, tenant: str) -> dict[str, int]:
        """Budget 429s of the tenant by source, from the metrics (since this server — or, with several workers, the
        metrics folder — started)."""
        folder = self.gateway.settings.prometheus_multiproc_dir
        registry = REGISTRY
        if folder is not None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(folder))
        name = "fedcd_privacy_budget_refusals_total"
        return {source: int(registry.get_sample_value(name, {"tenant": tenant, "source": source}) or 0)
                for source in ("diagnosis", "cohort")}

    # -- entities ---------------------------------------------------------------------------------
    def entities(self, tenant: str, circuits: dict[str, str] | None) -> tuple[list[EntityView], list[CalibrationView]]:
        federation = self.gateway.federation
        if federation is None:
            return [], []
        latest = self.latest_calibrations(tenant)
        calls = self.gateway.activity.entity_calls(tenant, since=_day_start(time.time()))
        failed = failed_calls(calls)
        last: dict[str, FailureEvent] = {}
        for event in self.failures(tenant, time.time() - 7 * 86400):
            last.setdefault(event.entity, event)
        views = []
        for name in federation.names:
            spec = federation.specs.get(name)
            view = EntityView(
                name=name, kind=spec.kind if spec else "custom",
                model=(spec.model or spec.packaged_model or "") if spec else "", status=federation.status(name),
                circuit=(circuits or {}).get(name), tier=spec.tier if spec else 0,
                input_usd_per_mtok=spec.input_usd_per_mtok if spec else 0.0,
                output_usd_per_mtok=spec.output_usd_per_mtok if spec else 0.0,
                concurrency=spec.concurrency if spec else 0, deadline_s=spec.deadline_s if spec else 0.0,
                # The console is admin-only; even so, never the credentials or tokens the operator's URL may hold.
                base_url=public_base_url(spec.base_url) if spec else None,
                weights={c.record.id: c.weight(name) for c in latest}, last_error=last.get(name),
            )
            view.calls_today = sum(c.calls for c in calls if c.entity == name)
            view.failed_today = failed.get(name, 0)
            views.append(view)
        return views, latest

    def dropped_entities(self) -> list[tuple[str, str, str]]:
        federation = self.gateway.federation
        names = federation.names if federation is not None else []
        return [(d.name, d.kind, d.reason) for d in self.gateway.settings.dropped_entities if d.name not in names]

    def latest_calibrations(self, tenant: str) -> list[CalibrationView]:
        """The calibration each of the tenant's Q-matrices is diagnosed with now (the tenant's newest for its current
        version, else the shared one), as diagnoses choose it."""
        return [view.calibrations[0] for view in self.qmatrices(tenant) if view.calibrations]

    # -- Q-matrices -------------------------------------------------------------------------------
    def qmatrices(self, tenant: str) -> list[QMatrixView]:
        """The tenant's Q-matrices (and the built-in ones), each with the calibration in use (if any)."""
        views = []
        for qid in self.gateway.qmatrices.ids(tenant):
            stored = self.gateway.qmatrices.get(tenant, qid)
            if stored is None:
                continue
            q = stored.qmatrix
            in_use = self.gateway.calibrations.latest_for(tenant, q.id, stored.version)
            views.append(QMatrixView(id=q.id, version=stored.version, builtin=stored.builtin, concepts=list(q.concepts),
                                     items=[], item_count=len(q.items),
                                     calibrations=[CalibrationView.of(in_use)] if in_use is not None else []))
        return views

    def qmatrix(self, tenant: str, qid: str) -> QMatrixView | None:
        stored = self.gateway.qmatrices.get(tenant, qid)
        if stored is None:
            return None
        q = stored.qmatrix
        items = [(i.id, i.text or "", list(i.concepts)) for i in list(q.items)[:_ITEMS_SHOWN]]
        in_use = self.gateway.calibrations.latest_for(tenant, qid, stored.version)
        listed = sorted(self.gateway.calibrations.list(tenant, qid), key=lambda c: c.record.created_at, reverse=True)
        calibrations = [CalibrationView.of(c) for c in listed]
        model, note = self.local_model(tenant, qid)
        return QMatrixView(id=q.id, version=stored.version, builtin=stored.builtin, concepts=list(q.concepts),
                           items=items, item_count=len(q.items), calibrations=calibrations, model=model, model_note=note,
                           in_use=in_use.record.id if in_use is not None else None)

    def local_model(self, tenant: str, qid: str) -> tuple[dict[str, Any] | None, str]:
        """The ``local-fed`` model serving the Q-matrix for this tenant (its own, else the operator's), or why none."""
        federation = self.gateway.federation
        if federation is None or "local-fed" not in federation.names:
            return None, "no local-fed entity is configured (FEDCD_LOCAL_FED)"
        from federated import ModelNotFound, RegistryError
        from providers.local_fed import LocalFedEntity

        adapter = federation.adapter("local-fed")
        if not isinstance(adapter, LocalFedEntity):
            return None, "local-fed here is not the federated-trained model"
        try:  # the rule GET /v1/local-model follows: the tenant's own model, else the operator's
            info = adapter.info_for(tenant, qid)
        except ModelNotFound:
            return None, "no trained model: local-fed answers with its untrained evidence model"
        except RegistryError as exc:
            return None, f"the model cannot be used: {exc}"
        return info, "the tenant's own model" if info["owner"] == "tenant" else "the operator's model"

    async def reliability(self, tenant: str, chosen: CalibrationView) -> tuple[list[tuple[float, float, int]], str]:
        """Reliability bins of the calibrated estimates on the validation students it was fitted on (in-sample), read
        from its job's stored answers while retention keeps them; ``[]`` and why when there is nothing to draw, or
        when it may not be drawn (:meth:`CalibrationView.reliability_withheld`: DP-released real students)."""
        withheld = chosen.reliability_withheld()
        if withheld is not None:
            return [], withheld
        results = await self.gateway.job_queries.calibration_results(tenant, chosen.record.id, shared=chosen.shared,
                                                                     limit=_RELIABILITY_STUDENTS)
        if not results:
            return [], ("no validation answers are stored for it any more (its job's inputs expire after "
                        "FEDCD_RETENTION_JOB_INPUTS_DAYS, or it was fitted elsewhere)")
        return await asyncio.to_thread(_reliability, chosen, results)

    async def calibrate(self, tenant: str, qid: str, method: str | None, max_students: int | None) -> str:
        """Start a calibration of the Q-matrix on SIMULATED students (README "Calibration"); the job id."""
        body = CalibrateRequest(
            qmatrix_id=qid, method=method,  # type: ignore[arg-type]
            dataset=DatasetRef(name="synthetic", part="validation", seed=0, max_students=max_students))
        assert self.gateway.calibration is not None  # set once the gateway started: before any request
        return await self.gateway.calibration.submit(body, tenant)

    # -- jobs -------------------------------------------------------------------------------------
    async def jobs(self, tenant: str, *, limit: int, before: tuple[str, str] | None
                   ) -> tuple[list[JobView], tuple[str, str] | None]:
        found, following = await self.gateway.job_queries.summaries(tenant, limit=limit, before=before)
        return [_job_view(summary) for summary in found], following

    async def job(self, tenant: str, job_id: str) -> JobView | None:
        found = await self.gateway.job_queries.summary(job_id, tenant)
        return _job_view(found) if found is not None else None

    async def cancel(self, tenant: str, job_id: str, by: str) -> None:
        """Cancel the tenant's job, as the API does (``JobQueries.cancel``: ``NotFound``, ``Conflict``)."""
        await self.gateway.job_queries.cancel(job_id, tenant, by=by)

    # -- students ---------------------------------------------------------------------------------
    async def student(self, tenant: str, student_id: str) -> StudentExport:
        return await self.gateway.students.export(tenant, student_id)

    async def erase(self, tenant: str, student_id: str) -> StudentErasure:
        return await self.gateway.students.erase(tenant, student_id)

    def student_report(self, tenant: str, export: StudentExport) -> tuple[str, str] | None:
        """(Q-matrix id, the teacher's report chart as SVG) of the student's latest stored diagnosis, drawn by the
        report of ``GET /v1/students/{id}/report`` (``app.presentation.report``); None when no diagnosis is stored."""
        if not export.diagnoses:
            return None
        from app.presentation.report import report_svg
        from app.services.next_items import with_next_items
        from app.services.report import build_report

        latest = export.diagnoses[-1]  # oldest first
        qid = str(latest.diagnosis.get("qmatrix_id") or "")
        stored = self.gateway.qmatrices.get(tenant, qid) if qid else None
        try:
            q = stored.qmatrix if stored is not None else None
            # Issue 34: the items to ask next.
            report = with_next_items(self.gateway.next_items, build_report(latest, q), q, tenant)
            return qid, report_svg(report)
        except Exception:  # the page shows the export without the chart rather than fail
            log.exception("console: the report chart of a stored diagnosis could not be drawn")
            return None

    # -- keys -------------------------------------------------------------------------------------
    def keys(self, tenant: str) -> list[KeyInfo]:
        return self.gateway.keys.list(tenant)

    def create_key(self, tenant: str, role: Role, expires_days: float | None, created_by: str) -> NewKey:
        """A new key of the tenant, never outliving the signed-in key (``InvalidInput`` naming ``expires_days``)."""
        keys = self.gateway.keys
        days = lifetime_within(keys, tenant, created_by, expires_days)
        return keys.create(tenant=tenant, role=role, expires_days=days, created_by=created_by)

    def revoke_key(self, tenant: str, key_id: str) -> bool:
        return self.gateway.keys.revoke(key_id, tenant=tenant)

    # -- privacy policy ---------------------------------------------------------------------------
    def policy(self, tenant: str) -> PrivacyPolicyPublic:
        return self.gateway.policies.current(tenant)

    def policy_history(self, tenant: str) -> list[PrivacyPolicyPublic]:
        return self.gateway.policies.history(tenant)

    def put_policy(self, tenant: str, policy: PrivacyPolicy, created_by: str) -> PrivacyPolicyPublic:
        return self.gateway.policies.put(tenant, policy, created_by=created_by)  # raises InvalidInput when refused

    @property
    def server_allows_unnoised(self) -> bool:
        return bool(self.gateway.policies.server_allows_unnoised)


def _reliability(chosen: CalibrationView, results: list[str]) -> tuple[list[tuple[float, float, int]], str]:
    """The reliability bins of the calibration's estimates on its stored validation answers (CPU: a worker thread)."""
    from calibration.fitting import ValidationAnswer
    from calibration.reliability import reliability_bins

    record = chosen.record
    aggregator = record.aggregator()
    predicted, observed = [], []
    for raw in results:
        try:
            answer = ValidationAnswer.from_json(json.loads(raw))
            estimate = aggregator.aggregate(answer.answers, list(answer.truth), mechanism=answer.mechanism)
        except Exception as exc:  # noqa: BLE001 - an answer stored in another form is skipped, never a broken page
            log.debug("console: a validation answer of %s could not be read: %s", record.id, exc)
            continue
        for concept, value in estimate.mastery.items():
            if concept in answer.truth:
                predicted.append(value)
                observed.append(float(answer.truth[concept]))
    if not predicted:
        return [], "its stored validation answers could not be read"
    return reliability_bins(predicted, observed, n_bins=10), (
        f"{len(predicted)} concept estimates of {len(results)} validation students, aggregated as diagnoses under "
        "this calibration are (in-sample: the students it was fitted on)")


def _job_view(found: JobSummary) -> JobView:
    job = found.job
    return JobView(
        id=job.job_id, kind=job.kind, status=job.status, done=job.progress.done, total=job.progress.total,
        summary=found.summary, created_at=job.created_at, updated_at=job.updated_at, error=job.error,
        calibration_id=job.calibration_id, resumed=job.resumed, failed_entities=job.progress.failed_entities,
        metrics=job.metrics, notes=job.notes, history=job.history,
    )
