"""Diagnoses for authenticated tenants: resolve the Q-matrix and calibration the tenant may use,
charge the student's privacy budget, run the pipeline, store the released answer.

Charging rules (README, Privacy model):

* the ledger is charged *before* any answer is released, one release per entity asked;
* after the pipeline ran, the charge is cut to the entities that actually released at least
  one concept — an entity that failed, was skipped, or answered no concept costs nothing;
* if anything goes wrong after the charge (every entity failed, a bug, a cancelled request),
  the charge is refunded: nothing was released, so nothing is spent.

Usage (tokens, dollars, cache hits; README "Cost"): every diagnosis's entity outcomes are recorded for
``GET /v1/usage`` (one insert) and counted in the metrics as soon as the pipeline returns, answered or not.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

from app.auth import Principal
from app.errors import InputError, TryLater, budget_retry_after
from app.federation import Federation, federation_mode
from app.limits import check_responses, qmatrix_from_json_checked
from app.metrics import count_diagnosis, count_refusal
from app.pseudonyms import Pseudonyms, cache_tag
from app.services.basis import diagnosis_basis
from app.services.usage import account_usage
from app.redaction import Redactor
from app.schemas import (
    BatchDiagnoseRequest,
    BatchDiagnoseResponse,
    BatchError,
    BudgetBlock,
    DiagnoseRequest,
    DiagnoseResponse,
    DiagnoseOptions,
    EntityReport,
    FederationBlock,
    FederationStage,
    PrivacyBlock,
    PrivacyPolicy,
    PrivacyPolicyPublic,
    SkippedEntity,
    StudentIn,
    Usage,
)
from app.settings import Settings
from app.storage import (
    CalibrationStore,
    PolicyStore,
    QMatrixStore,
    TenantConfig,
    TenantConfigCache,
    UsageSource,
    UsageStore,
    budget_rule,
    entity_usage,
    usage_total,
)
from calibration import CalibrationRecord, aggregator_for
from diagnosis import (
    Aggregator,
    AllEntitiesFailed,
    DiagnosisPipeline,
    DiagnosisRequest,
    DiagnosisResult,
    EntityOutcome,
    UnknownEntities,
)
from diagnosis.posterior import DegeneratePosteriorError
from privacy import BudgetExceeded, Charge, PrivacyLedger, charge_parameters, iso_utc
from providers.cache import tagged_as
from qmatrix import QMatrix, Response, qmatrix_to_json

__all__ = ["DiagnosisService", "RequestConfig", "ResolvedQMatrix"]

log = logging.getLogger("fedcd.diagnosis")


@dataclass(frozen=True)
class ResolvedQMatrix:
    """The Q-matrix a request uses; ``version`` is None for an inline one (never calibrated)."""

    qmatrix: QMatrix
    version: int | None
    key: str  # what identifies these exact rows in a request fingerprint


@dataclass(frozen=True)
class RequestConfig:
    """What a request uses of its tenant's configuration."""

    resolved: ResolvedQMatrix
    calibration: CalibrationRecord | None
    policy: PrivacyPolicyPublic


class DiagnosisService:
    """One object holding what a diagnosis needs; routes and the cohort service call it."""

    def __init__(
        self,
        *,
        federation: Federation,
        qmatrices: QMatrixStore,
        calibrations: CalibrationStore,
        policies: PolicyStore,
        settings: Settings,
        ledger: PrivacyLedger | None,
        redactor: Redactor,
        usage: UsageStore,
        pseudonyms: Pseudonyms,
    ) -> None:
        self.federation, self.qmatrices, self.calibrations = federation, qmatrices, calibrations
        self.policies, self.settings, self.ledger, self.redactor = policies, settings, ledger, redactor
        self.config = TenantConfigCache(qmatrices=qmatrices, calibrations=calibrations, policies=policies)
        self.usage = usage
        self.pseudonyms = pseudonyms  # the ledger and the cache tags see a keyed hash, never the student id

    @property
    def pipeline(self) -> DiagnosisPipeline:
        return self.federation.pipeline

    # -- resolution ---------------------------------------------------------------------------
    async def configuration(self, options: DiagnoseOptions, tenant: str) -> RequestConfig:
        """The Q-matrix, calibration and privacy policy a request uses, in one worker-thread hop (cached per
        tenant until its configuration changes: ``app.storage.tenant_config``)."""
        return await asyncio.to_thread(self._configuration, options, tenant)

    def _configuration(self, options: DiagnoseOptions, tenant: str) -> RequestConfig:
        config = self.config.current(tenant)
        resolved = self._resolve_qmatrix(options, config)
        return RequestConfig(resolved, self._calibration(options, resolved, config), config.policy())

    def _resolve_qmatrix(self, options: DiagnoseOptions, config: TenantConfig) -> ResolvedQMatrix:
        if options.qmatrix is not None:
            # Sizes checked while it is read, before any item is built (app.limits).
            q = qmatrix_from_json_checked(options.qmatrix.model_dump(), self.settings, ("body", "qmatrix"))
            digest = hashlib.sha256(json.dumps(qmatrix_to_json(q), sort_keys=True).encode()).hexdigest()
            return ResolvedQMatrix(q, None, f"inline:{digest}")
        assert options.qmatrix_id is not None
        stored = config.qmatrix(options.qmatrix_id)
        if stored is None:
            raise InputError(("body", "qmatrix_id"), [f"unknown Q-matrix id '{options.qmatrix_id}'"], status_code=404)
        return ResolvedQMatrix(stored.qmatrix, stored.version, f"{stored.tenant}:{stored.id}:v{stored.version}")

    def check_responses(self, q: QMatrix, responses: Sequence[Response], loc: tuple[str | int, ...]) -> None:
        check_responses(q, responses, self.settings, loc)

    def _calibration(
        self, options: DiagnoseOptions, resolved: ResolvedQMatrix, config: TenantConfig
    ) -> CalibrationRecord | None:
        """The record a request names, else the tenant's newest for these exact Q-matrix rows (or a shared one)."""
        if options.calibration_id is not None:
            stored = self.calibrations.get(config.tenant, options.calibration_id)
            if stored is None:
                raise InputError(
                    ("body", "calibration_id"), [f"unknown calibration id '{options.calibration_id}'"], status_code=404
                )
            if stored.record.qmatrix_id != resolved.qmatrix.id or stored.qmatrix_version != resolved.version:
                raise InputError(
                    ("body", "calibration_id"),
                    [f"calibration '{stored.record.id}' was fitted on Q-matrix '{stored.record.qmatrix_id}' version "
                     f"{stored.qmatrix_version}, not on the rows this request uses"],
                )
            return stored.record
        if resolved.version is None:
            return None  # inline rows: no calibration can have been fitted on them
        latest = config.latest_calibration(resolved.qmatrix.id, resolved.version)
        return latest.record if latest is not None else None

    def aggregator(self, options: DiagnoseOptions, record: CalibrationRecord | None) -> Aggregator:
        return aggregator_for(record, alpha=self.settings.alpha, aggregation=options.aggregation, estimate=options.estimate)

    def select(self, names: Sequence[str] | None) -> dict[str, object]:
        try:
            return dict(self.pipeline.select(names))
        except UnknownEntities as exc:
            raise InputError(("body", "entities"), [str(exc)]) from exc

    # -- requests ---------------------------------------------------------------------------
    async def policy(self, tenant: str) -> PrivacyPolicyPublic:
        """The tenant's privacy policy in force (a change applies to the next request)."""
        return await asyncio.to_thread(lambda: self.config.current(tenant).policy())

    async def diagnose(self, body: DiagnoseRequest, principal: Principal) -> DiagnoseResponse:
        config = await self.configuration(body, principal.tenant)
        self.check_responses(config.resolved.qmatrix, body.responses, ("body",))
        aggregator = self.aggregator(body, config.calibration)
        return await _counted(principal.tenant, self._run(body, config, body, aggregator, principal.tenant))

    async def diagnose_batch(self, body: BatchDiagnoseRequest, principal: Principal) -> BatchDiagnoseResponse:
        if len(body.students) > self.settings.max_batch_size:
            raise InputError(("body", "students"), [f"at most {self.settings.max_batch_size} students per batch"])
        config = await self.configuration(body, principal.tenant)
        resolved, policy = config.resolved, config.policy
        for n, student in enumerate(body.students):
            self.check_responses(resolved.qmatrix, student.responses, ("body", "students", n))
        self.select(body.entities)
        self._check_unnoised(body, policy)
        aggregator = self.aggregator(body, config.calibration)
        gate = asyncio.Semaphore(self.settings.batch_concurrency)

        async def one(student: StudentIn) -> DiagnoseResponse | BatchError:
            async with gate:
                try:
                    return await _counted(
                        principal.tenant, self._run(body, config, student, aggregator, principal.tenant)
                    )
                except AllEntitiesFailed as exc:
                    detail = {"message": str(exc),
                              "entities": [{"name": o.name, "reason": o.reason, "error": o.error} for o in exc.outcomes]}
                    return BatchError(student_id=student.student_id, status_code=503, detail=detail)
                except BudgetExceeded as exc:
                    return BatchError(student_id=student.student_id, status_code=429, detail=str(exc),
                                      retry_after_s=budget_retry_after(exc))

        outcomes = await asyncio.gather(*(one(s) for s in body.students))
        results = [o for o in outcomes if isinstance(o, DiagnoseResponse)]
        errors = [o for o in outcomes if isinstance(o, BatchError)]
        usage = sum((r.usage for r in results), Usage())
        return BatchDiagnoseResponse(results=results, errors=errors, count=len(results), usage=usage)

    # -- internals --------------------------------------------------------------------------
    @staticmethod
    def _check_unnoised(options: DiagnoseOptions, policy: PrivacyPolicy) -> None:
        if options.epsilon == "none" and not policy.allow_unnoised:
            raise InputError(
                ("body", "epsilon"),
                ['"none" would release raw answers with unbounded privacy cost; the tenant\'s privacy policy '
                 "refuses it (allow_unnoised)"],
            )

    def _left_out(
        self, options: DiagnoseOptions, record: CalibrationRecord | None, q: QMatrix, responses: Sequence[Response]
    ) -> dict[str, str]:
        """Entities not worth asking (nor charging) for these responses: the calibration gives them no weight for the
        concepts assessed. Only when the request names no entities and its federation is not ``all``."""
        mode = options.federation or self.settings.federation_default
        if record is None or mode == "all" or options.entities is not None:
            return {}
        unhelpful = record.params.unhelpful(q.concepts_for(r.item_id for r in responses))
        left_out = {name: reason for name, reason in unhelpful.items() if name in self.federation.names}
        # Never everyone: a calibration leaves out at most some of its entities, but the federation may have changed.
        return left_out if len(left_out) < len(self.federation.names) else {}

    def _request(
        self, options: DiagnoseOptions, student: StudentIn | DiagnoseRequest, q: QMatrix, policy: PrivacyPolicy,
        tenant: str, entities: list[str] | None,
    ) -> DiagnosisRequest:
        epsilon = None if options.epsilon == "none" else (
            float(options.epsilon) if options.epsilon is not None else policy.default_epsilon
        )
        return DiagnosisRequest(
            student_id=student.student_id,
            qmatrix=q,
            responses=student.responses,
            epsilon=epsilon,
            sensitivity=options.sensitivity or policy.sensitivity,
            mechanism=options.mechanism or policy.default_mechanism,
            delta=options.delta,
            entities=entities,
            include_answers=self.settings.send_answer_text,
            federation=federation_mode(options.federation, self.settings),
            deadline_s=self.settings.request_deadline_s or self.federation.deadline_s(entities),
            cache_scope=tenant,
        )

    async def _run(
        self,
        options: DiagnoseOptions,
        config: RequestConfig,
        student: StudentIn | DiagnoseRequest,
        aggregator: Aggregator,
        tenant: str,
    ) -> DiagnoseResponse:
        resolved, policy = config.resolved, config.policy
        left_out = self._left_out(options, config.calibration, resolved.qmatrix, student.responses)
        entities = [n for n in self.federation.names if n not in left_out] if left_out else options.entities
        request = self._request(options, student, resolved.qmatrix, policy, tenant, entities)
        selected = self.select(entities)
        self._check_unnoised(options, policy)
        key = self.pseudonyms.key(tenant, request.student_id)  # what is stored instead of the id (app.pseudonyms)
        if request.epsilon is None or self.ledger is None:
            result = await self._diagnose(request, aggregator, tenant, key)
            return self._response(result, request, options, aggregator, left_out)
        ledger, rule = self.ledger, budget_rule(policy)
        cost = charge_parameters(self.pipeline.mechanism_for(request))
        fingerprint = _fingerprint(request, options, resolved, aggregator.calibration_id)
        for _ in range(2):  # a second pass only when an identical in-flight request was refunded
            charge = await ledger.acharge(
                tenant=tenant, student_id=key, epsilon=cost["epsilon"], delta=cost["delta"],
                mechanism=cost["mechanism"], request_fingerprint=fingerprint, releases=len(selected),
                sigma_over_sensitivity=cost["sigma_over_sensitivity"], rule=rule, source="diagnosis",
            )
            if not charge.repeat:
                break
            try:
                stored = charge.answer_json if not charge.pending else await ledger.await_answer(charge.id)
            except TimeoutError as exc:
                raise TryLater("an identical request for this student is still being answered; retry shortly") from exc
            if stored is not None:
                earlier = DiagnoseResponse.model_validate_json(stored)
                return earlier.model_copy(update={  # stored under the key: the caller gets its own id back
                    "student_id": request.student_id, "budget": _budget(charge, policy, charged=0.0, repeat=True),
                    "usage": Usage(),
                })
        try:
            result = await self._diagnose(request, aggregator, tenant, key)
            response = self._response(result, request, options, aggregator, left_out)
            released = sum(1 for o in result.entities if o.mastery)  # entities that released ≥ 1 concept
            if released == 0:
                await ledger.arefund(charge.id)
                return response
            stored_answer = response.model_copy(update={"student_id": key}).model_dump_json()  # no raw id stored
            if released == charge.releases:  # every entity charged for released: one statement, nothing to recount
                settled = await ledger.arelease(charge, stored_answer)
            else:
                settled = await ledger.astore_answer(charge.id, stored_answer, releases=released, rule=rule)
        except BaseException:
            # Nothing was released (or the answer never left): give the student's budget back.
            await asyncio.shield(self._refund_quietly(charge, tenant))
            raise
        response.budget = _budget(settled, policy, charged=settled.epsilon * settled.releases, repeat=False)
        return response

    async def _refund_quietly(self, charge: Charge, tenant: str) -> None:
        try:
            await self.ledger.arefund(charge.id)  # type: ignore[union-attr]
        except Exception:  # the original error matters more; the refund failure is logged without the student id
            log.exception("refund of charge %s for %s failed", charge.id, self.redactor.student(tenant, charge.student_id))

    async def _diagnose(
        self, request: DiagnosisRequest, aggregator: Aggregator, tenant: str, key: str
    ) -> DiagnosisResult:
        try:
            with tagged_as(cache_tag(tenant, key)):  # cached answers made from these responses: erasable by student
                result = await self.pipeline.diagnose(request, aggregator)
        except AllEntitiesFailed as exc:
            await self.account(tenant, "diagnosis", exc.outcomes)
            raise
        except DegeneratePosteriorError as exc:
            raise InputError(("body", "aggregation"), [f"posterior aggregation impossible: {exc}"]) from exc
        await self.account(tenant, "diagnosis", result.entities)
        return result

    async def account(self, tenant: str, source: UsageSource, outcomes: Sequence[EntityOutcome]) -> None:
        """Record and count what the entities of one diagnosis used (README "Cost")."""
        await account_usage(self.usage, tenant, source, outcomes)

    @staticmethod
    def _response(
        result: DiagnosisResult, request: DiagnosisRequest, options: DiagnoseOptions, aggregator: Aggregator,
        left_out: dict[str, str],
    ) -> DiagnoseResponse:
        evidence: dict[str, int] = {}
        for response in request.responses:  # how much each concept's estimate rests on (the teacher's report shows it)
            for concept in request.qmatrix.item(response.item_id).concepts:
                evidence[concept] = evidence.get(concept, 0) + 1
        return DiagnoseResponse(
            student_id=result.student_id,
            qmatrix_id=request.qmatrix.id,
            mastery=result.mastery,
            evidence=evidence,
            missing_concepts=result.missing_concepts,
            entities=[_report(o) for o in result.entities] if options.include_entities else None,
            failed_entities=[o.name for o in result.entities if o.status == "failed"],
            failure_reasons={o.name: o.reason or "error" for o in result.entities if o.status == "failed"},
            skipped_entities=[SkippedEntity(name=o.name, reason=o.error or "")
                              for o in result.entities if o.status == "skipped"],
            left_out_entities=[SkippedEntity(name=name, reason=reason) for name, reason in left_out.items()],
            privacy=PrivacyBlock(**result.privacy, sensitivity_mode=request.sensitivity),  # type: ignore[arg-type]
            mastery_interval=result.intervals or None,
            interval_level=result.interval_level,
            aggregation=result.aggregation,
            basis=diagnosis_basis(result.entities, aggregator.calibration, result.aggregation),
            calibration_id=result.calibration_id,
            calibration_mismatch=result.calibration_mismatch,
            request_id=result.request_id,
            latency_ms=result.latency_ms,
            federation=FederationBlock(
                mode=result.federation.mode,  # type: ignore[arg-type]
                threshold=result.federation.threshold,
                tiers=[FederationStage(**vars(s)) for s in result.federation.stages],  # type: ignore[arg-type]
                escalated=result.federation.escalated,
            ),
            usage=usage_total(result.entities),
        )


def _report(outcome: EntityOutcome) -> EntityReport:
    fields = {k: v for k, v in vars(outcome).items() if k not in ("prompt_tokens", "completion_tokens", "cost_usd")}
    return EntityReport(**fields, usage=entity_usage(outcome))


async def _counted(tenant: str, diagnosis: Awaitable[DiagnoseResponse]) -> DiagnoseResponse:
    """One student's diagnosis, counted in the metrics (served, ε charged, budget warnings, 429s)."""
    try:
        response = await diagnosis
    except BudgetExceeded:
        count_refusal(tenant, "diagnosis")
        raise
    count_diagnosis(tenant, response)
    return response


def _budget(charge: Charge, policy: PrivacyPolicy, *, charged: float, repeat: bool) -> BudgetBlock:
    """The budget block of a response, with a warning once less than the policy's share of the allowance remains."""
    warning = None
    if charge.cap_epsilon > 0 and charge.remaining_epsilon < policy.warning_fraction * charge.cap_epsilon:
        renews = f"; it renews at {iso_utc(charge.renews_at)}" if charge.renews_at is not None else "; it does not renew"
        warning = (
            f"{charge.remaining_epsilon:.6g} of this student's ε allowance of {charge.cap_epsilon:.6g} per period "
            f"({charge.period}) remains{renews}"
        )
    return BudgetBlock(
        tenant=charge.tenant, charged_epsilon=charged, period=charge.period, spent_epsilon=charge.spent_epsilon,
        remaining_epsilon=charge.remaining_epsilon, cap_epsilon=charge.cap_epsilon, renews_at=iso_utc(charge.renews_at),
        lifetime_epsilon=charge.lifetime_epsilon, budget_warning=warning, repeat=repeat,
    )


def _fingerprint(
    request: DiagnosisRequest, options: DiagnoseOptions, resolved: ResolvedQMatrix, calibration_id: str | None
) -> str:
    """The canonical content of a request: equal fingerprints get the same answer within the repeat window.

    The Q-matrix enters as its (tenant, id, version) — or the hash of inline rows — so the work
    does not grow with the size of the Q-matrix.
    """
    content = {
        "qmatrix": resolved.key,
        "responses": [r.model_dump(mode="json") for r in request.responses],
        "epsilon": request.epsilon,
        "delta": request.delta,
        "mechanism": request.mechanism,  # resolved (server default applied)
        "sensitivity": request.sensitivity,
        "entities": sorted(request.entities) if request.entities is not None else None,
        "calibration_id": calibration_id,
        "include_entities": options.include_entities,
        "aggregation": options.aggregation,
        "estimate": options.estimate,
        "federation": [request.federation.name, request.federation.threshold],  # resolved (server default applied)
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
