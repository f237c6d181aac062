"""What a diagnosis answers: the response built from a pipeline result, its budget block, and the request
fingerprint the ledger's repeat rule compares (equal fingerprints get the same stored answer inside the window)."""

from __future__ import annotations

import hashlib
import json

from app.schemas import (
    BudgetBlock,
    DiagnoseOptions,
    DiagnoseResponse,
    EntityReport,
    FederationBlock,
    FederationStage,
    IntervalSpread,
    PrivacyBlock,
    PrivacyPolicy,
    SkippedEntity,
)
from app.services.basis import diagnosis_basis
from app.services.planning import ResolvedQMatrix, StudentPlan
from app.storage import entity_usage, usage_total
from diagnosis import DiagnosisResult, EntityOutcome
from privacy import Charge, iso_utc

__all__ = ["budget_block", "diagnosis_response", "request_fingerprint"]


def diagnosis_response(result: DiagnosisResult, planned: StudentPlan, options: DiagnoseOptions) -> DiagnoseResponse:
    """The response to one student's diagnosis (``budget`` is set once the charge is settled)."""
    plan = planned.diagnosis
    request = plan.request
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
        left_out_entities=[SkippedEntity(name=name, reason=reason) for name, reason in planned.left_out.items()],
        privacy=PrivacyBlock(**result.privacy, sensitivity_mode=plan.request.sensitivity),  # type: ignore[arg-type]
        mastery_interval=result.intervals or None,
        interval_level=result.interval_level,
        interval_spread=IntervalSpread.of(result.interval_error),
        aggregation=result.aggregation,
        basis=diagnosis_basis(result.entities, plan.aggregator.calibration, result.aggregation),
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


def budget_block(charge: Charge, policy: PrivacyPolicy, *, charged: float, repeat: bool) -> BudgetBlock:
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


def request_fingerprint(planned: StudentPlan, options: DiagnoseOptions, resolved: ResolvedQMatrix) -> str:
    """The canonical content of a request: equal fingerprints get the same answer within the repeat window.

    The Q-matrix enters as its (tenant, id, version) — or the hash of inline rows — so the work
    does not grow with the size of the Q-matrix.
    """
    request = planned.diagnosis.request
    content = {
        "qmatrix": resolved.key,
        "responses": [r.model_dump(mode="json") for r in request.responses],
        "epsilon": request.epsilon,
        "delta": request.delta,
        "mechanism": request.mechanism,  # resolved (server default applied)
        "sensitivity": request.sensitivity,
        "entities": sorted(request.entities) if request.entities is not None else None,
        "calibration_id": planned.diagnosis.aggregator.calibration_id,
        "include_entities": options.include_entities,
        "aggregation": options.aggregation,
        "estimate": options.estimate,
        "federation": [request.federation.name, request.federation.threshold],  # resolved (server default applied)
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
