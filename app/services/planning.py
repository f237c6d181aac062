"""What a request is diagnosed with, decided once: the tenant's Q-matrix, calibration and privacy policy
(:class:`RequestConfig`), the aggregator (kept with its calibration: :class:`AggregatorCache`), and each student's
plan (:class:`StudentPlan`: the pipeline's :class:`~diagnosis.DiagnosisPlan` and what the gateway needs besides).

Diagnoses (``app.services.diagnosis``) and cohort reports (``app.services.cohort``) both plan through
:class:`Planner`; the pipeline then runs a plan without deriving any of it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from app.auth import Principal
from app.domain_errors import InvalidInput, NotFound
from app.federation import Federation, federation_mode
from app.limits import check_responses, qmatrix_from_json_checked
from app.pseudonyms import Pseudonyms
from app.schemas import DiagnoseOptions, DiagnoseRequest, PrivacyPolicyPublic, QMatrixCreate, StudentIn
from app.settings import Settings
from app.storage import TenantConfig, TenantConfigCache
from app.storage.tenant_config import NotInMemory
from calibration import CalibrationRecord, aggregator_for
from diagnosis import Aggregator, DiagnosisPipeline, DiagnosisPlan, DiagnosisRequest, UnknownEntities
from privacy import StudentKey
from qmatrix import QMatrix, Response, qmatrix_to_json

__all__ = ["AggregatorCache", "Planner", "RequestConfig", "ResolvedQMatrix", "StudentPlan", "read_configuration"]

T = TypeVar("T")


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


@dataclass(frozen=True)
class StudentPlan:
    """One student's diagnosis as the gateway serves it: the pipeline's plan, the entities the calibration left out
    (neither asked nor charged; listed in the response), and the tenant and the student's keyed hash — what the
    ledger and the cache tags hold instead of the id (``app.pseudonyms``)."""

    diagnosis: DiagnosisPlan
    left_out: dict[str, str]
    tenant: str
    key: StudentKey


async def read_configuration(
    cache: TenantConfigCache, principal: Principal, read: Callable[[TenantConfig], T], *, on_loop: bool = True
) -> T:
    """``read`` of the tenant's configuration as of the generations the request's API key lookup read
    (``Principal.generations``): on the event loop when all it reads is in memory (and ``on_loop``), else in one
    worker-thread hop. Without them (authentication disabled), the hop reads them too."""
    tenant, generations = principal.tenant, principal.generations
    if generations is None:
        return await asyncio.to_thread(lambda: read(cache.current(tenant)))
    config = cache.current(tenant, generations)  # no I/O: the generations are given
    if on_loop:
        try:
            return read(config.from_memory())
        except NotInMemory:
            pass
    return await asyncio.to_thread(read, config)


class AggregatorCache:
    """The aggregator of each (calibration record, aggregation, estimate), built once and reused by every request
    that uses that record: a stored record never changes (a refit is a new record with a new id), so neither does
    its aggregator. At most ``max_entries`` are kept, least recently used out first."""

    def __init__(self, *, alpha: float, max_entries: int = 512) -> None:
        self.alpha, self._max = alpha, max_entries
        self._built: OrderedDict[tuple[object, ...], Aggregator] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, record: CalibrationRecord | None, *, aggregation: str, estimate: str) -> Aggregator:
        key = (None if record is None else (record.id, record.version), aggregation, estimate)
        with self._lock:
            found = self._built.get(key)
            if found is not None:
                self._built.move_to_end(key)
                return found
        built = aggregator_for(record, alpha=self.alpha, aggregation=aggregation, estimate=estimate)  # type: ignore[arg-type]
        with self._lock:
            self._built[key] = built
            while len(self._built) > self._max:
                self._built.popitem(last=False)
        return built


class Planner:
    """Decides each request once, for the federation's pipeline (:attr:`pipeline` runs what it plans)."""

    def __init__(
        self, *, federation: Federation, config: TenantConfigCache, settings: Settings, pseudonyms: Pseudonyms
    ) -> None:
        self.federation, self.config, self.settings, self.pseudonyms = federation, config, settings, pseudonyms
        self.aggregators = AggregatorCache(alpha=settings.alpha)

    @property
    def pipeline(self) -> DiagnosisPipeline:
        return self.federation.pipeline

    # -- the tenant's configuration --------------------------------------------------------------
    async def configuration(
        self, principal: Principal, *, qmatrix_id: str | None, inline: QMatrixCreate | None = None,
        calibration_id: str | None = None,
    ) -> RequestConfig:
        """The Q-matrix (``qmatrix_id``, or the ``inline`` rows), calibration (``calibration_id``, else the newest
        fitted on those rows) and privacy policy a request of ``principal``'s tenant uses, in one worker-thread hop
        (cached per tenant until its configuration changes: ``app.storage.tenant_config``). The tenant's
        configuration generations are the ones the request's API key lookup read (``Principal.generations``); when
        all the request needs is then in memory, no hop at all."""
        def read(config: TenantConfig) -> RequestConfig:
            resolved = self._resolve_qmatrix(qmatrix_id, inline, config)
            return RequestConfig(resolved, self._calibration(calibration_id, resolved, config), config.policy())

        # Inline rows are parsed and hashed off the event loop, remembered or not.
        return await read_configuration(self.config, principal, read, on_loop=inline is None)

    def _resolve_qmatrix(
        self, qmatrix_id: str | None, inline: QMatrixCreate | None, config: TenantConfig
    ) -> ResolvedQMatrix:
        if inline is not None:
            # Sizes checked while it is read, before any item is built (app.limits).
            q = qmatrix_from_json_checked(inline.model_dump(), self.settings, ("qmatrix",))
            digest = hashlib.sha256(json.dumps(qmatrix_to_json(q), sort_keys=True).encode()).hexdigest()
            return ResolvedQMatrix(q, None, f"inline:{digest}")
        assert qmatrix_id is not None
        stored = config.qmatrix(qmatrix_id)
        if stored is None:
            raise NotFound(("qmatrix_id",), [f"unknown Q-matrix id '{qmatrix_id}'"])
        return ResolvedQMatrix(stored.qmatrix, stored.version, f"{stored.tenant}:{stored.id}:v{stored.version}")

    def _calibration(
        self, calibration_id: str | None, resolved: ResolvedQMatrix, config: TenantConfig
    ) -> CalibrationRecord | None:
        """The record a request names, else the tenant's newest for these exact Q-matrix rows (or a shared one)."""
        if calibration_id is not None:
            stored = config.calibration(calibration_id)
            if stored is None:
                raise NotFound(("calibration_id",), [f"unknown calibration id '{calibration_id}'"])
            if stored.record.qmatrix_id != resolved.qmatrix.id or stored.qmatrix_version != resolved.version:
                raise InvalidInput(
                    ("calibration_id",),
                    [f"calibration '{stored.record.id}' was fitted on Q-matrix '{stored.record.qmatrix_id}' version "
                     f"{stored.qmatrix_version}, not on the rows this request uses"],
                )
            return stored.record
        if resolved.version is None:
            return None  # inline rows: no calibration can have been fitted on them
        latest = config.latest_calibration(resolved.qmatrix.id, resolved.version)
        return latest.record if latest is not None else None

    # -- checks ------------------------------------------------------------------------------------
    def check_responses(self, q: QMatrix, responses: Sequence[Response], loc: tuple[str | int, ...]) -> None:
        check_responses(q, responses, self.settings, loc)

    @staticmethod
    def check_unnoised(options: DiagnoseOptions, policy: PrivacyPolicyPublic) -> None:
        if options.epsilon == "none" and not policy.allow_unnoised:
            raise InvalidInput(
                ("epsilon",),
                ['"none" would release raw answers with unbounded privacy cost; the tenant\'s privacy policy '
                 "refuses it (allow_unnoised)"],
            )

    # -- plans ---------------------------------------------------------------------------------------
    def aggregator(self, options: DiagnoseOptions, record: CalibrationRecord | None) -> Aggregator:
        return self.aggregators.get(record, aggregation=options.aggregation, estimate=options.estimate)

    def plan(
        self, options: DiagnoseOptions, config: RequestConfig, student: StudentIn | DiagnoseRequest,
        aggregator: Aggregator, tenant: str,
    ) -> StudentPlan:
        """One student's diagnosis, decided: who is asked (the calibration may leave some out), at what noise, with
        which deadline. ``InvalidInput`` for unknown entities or unnoised answers the policy refuses."""
        q, policy = config.resolved.qmatrix, config.policy
        left_out = self._left_out(options, config.calibration, q, student.responses)
        entities = [n for n in self.federation.names if n not in left_out] if left_out else options.entities
        epsilon = None if options.epsilon == "none" else (
            float(options.epsilon) if options.epsilon is not None else policy.default_epsilon
        )
        request = DiagnosisRequest(
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
        plan = self._planned(request, aggregator)
        self.check_unnoised(options, policy)
        return StudentPlan(plan, left_out, tenant, self.pseudonyms.key(tenant, student.student_id))

    def cohort_plan(
        self, tenant: str, q: QMatrix, student: StudentIn, entities: Sequence[str] | None, aggregator: Aggregator
    ) -> StudentPlan:
        """One cohort member's diagnosis: made inside the gateway without per-entity noise (nothing per student is
        released), every named entity asked at once, no deadline."""
        request = DiagnosisRequest(
            student_id=student.student_id, qmatrix=q, responses=student.responses, epsilon=None, entities=entities,
            cache_scope=tenant,
        )
        return StudentPlan(self._planned(request, aggregator), {}, tenant, self.pseudonyms.key(tenant, student.student_id))

    def _planned(self, request: DiagnosisRequest, aggregator: Aggregator) -> DiagnosisPlan:
        try:
            return self.pipeline.plan(request, aggregator)
        except UnknownEntities as exc:
            raise InvalidInput(("entities",), [str(exc)]) from exc

    def _left_out(
        self, options: DiagnoseOptions, record: CalibrationRecord | None, q: QMatrix, responses: Sequence[Response]
    ) -> dict[str, str]:
        """Entities not worth asking (nor charging) for these responses: the calibration gives them no weight for the
        concepts assessed. Only when the request names no entities and its federation is not ``all``."""
        mode = options.federation or self.settings.federation_default
        if record is None or mode == "all" or options.entities is not None:
            return {}
        unhelpful = record.params.unhelpful(q.concepts_for(r.item_id for r in responses))
        names = self.federation.names
        left_out = {name: reason for name, reason in unhelpful.items() if name in names}
        # Never everyone: a calibration leaves out at most some of its entities, but the federation may have changed.
        return left_out if len(left_out) < len(names) else {}
