"""Every request and response body of the HTTP API, in one place."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, FailFast, Field, create_model, model_validator

from app.pagination import Paginated
from privacy import (
    DELTA_MAX,
    DELTA_MIN,
    EPSILON_MAX,
    EPSILON_MIN,
    BudgetPeriod,
    CalendarDay,
    CalendarWeek,
    Lifetime,
    Rolling,
    Terms,
)
from qmatrix import Identifier, Response

__all__ = [
    "BatchDiagnoseRequest",
    "BatchDiagnoseResponse",
    "BatchError",
    "DiagnoseOptions",
    "KeyCreate",
    "KeyCreated",
    "KeyList",
    "KeyPublic",
    "PeriodIn",
    "PrivacyPolicy",
    "PrivacyPolicyHistory",
    "PrivacyPolicyPublic",
    "StudentLookup",
    "DiagnoseRequest",
    "DiagnoseResponse",
    "EntityInfo",
    "EntityList",
    "EntityReport",
    "EntityUsage",
    "FederationBlock",
    "FederationStage",
    "Health",
    "PrivacyBlock",
    "QMatrixCreate",
    "qmatrix_create_model",
    "QMatrixItem",
    "QMatrixList",
    "QMatrixPublic",
    "QMatrixSummary",
    "SkippedEntity",
    "StudentIn",
    "Usage",
    "UsageReport",
]


# A concept or entity name in a request: non-empty, bounded.
Name = Annotated[str, Field(min_length=1, max_length=256)]
# The lists of a Q-matrix stop at their first invalid element: a 16 MiB body of 4 million empty names otherwise made
# 4 million errors (2 GB inside pydantic, 6.7 GB and 33 s to list them) for a 422 that shows only the first 20 anyway.
# Problems of a schema-valid Q-matrix (duplicates, unknown concepts…) are still listed together (qmatrix.model).
QMatrixNames = Annotated[list[Name], FailFast()]


class QMatrixItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    id: Identifier
    text: str | None = Field(default=None, max_length=20000)
    concepts: QMatrixNames = Field(max_length=500)


class QMatrixCreate(BaseModel):
    """The JSON form of a Q-matrix."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{  # a request: no coercion
        "id": "fractions", "concepts": ["add", "subtract"],
        "items": [{"id": "i1", "text": "1/2 + 1/3", "concepts": ["add"]}, {"id": "i2", "text": "3/4 - 1/2", "concepts": ["subtract"]}],
    }]})

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    concepts: QMatrixNames = Field(min_length=1)
    items: Annotated[list[QMatrixItem], FailFast()] = Field(min_length=1)


@lru_cache(maxsize=8)
def qmatrix_create_model(max_items: int, max_concepts: int) -> type[QMatrixCreate]:
    """:class:`QMatrixCreate` with a server's size limits on ``items`` and ``concepts`` (settings, so not in the
    static schema): a list past its limit is one error naming the field, and no model is built per element nor
    a Q-matrix from them (the JSON text itself is parsed whole: its memory is bounded by the body limit)."""
    return create_model(  # type: ignore[call-overload,no-any-return]
        "QMatrixCreate", __base__=QMatrixCreate,
        concepts=(QMatrixNames, Field(min_length=1, max_length=max_concepts)),
        items=(Annotated[list[QMatrixItem], FailFast()], Field(min_length=1, max_length=max_items)),
    )


class QMatrixPublic(QMatrixCreate):
    version: int = Field(description="1 at registration; each PUT adds one")
    n_items: int
    n_concepts: int
    builtin: bool = Field(default=False, description="shared read-only with every tenant")


class QMatrixSummary(BaseModel):
    """What a registration or replacement answers: the new version, without echoing every item back."""

    id: str
    version: int
    concepts: list[str]
    n_items: int
    n_concepts: int
    builtin: bool = False


class QMatrixList(Paginated[str]):
    """Q-matrix ids: the built-in ones first, then the tenant's by id."""


# ε of one release, within the range every mechanism and accountant is total over (privacy/ranges.py).
EpsilonValue = Annotated[float, Field(ge=EPSILON_MIN, le=EPSILON_MAX, allow_inf_nan=False)]
Epsilon = EpsilonValue | Literal["none"]
Delta = Annotated[float, Field(ge=DELTA_MIN, le=DELTA_MAX, allow_inf_nan=False)]


class DiagnoseOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    qmatrix_id: str | None = None
    qmatrix: QMatrixCreate | None = Field(default=None, description="an inline Q-matrix instead of qmatrix_id")
    epsilon: Epsilon | None = Field(
        default=None,
        description=f"ε of each entity's released answer, in [{EPSILON_MIN:g}, {EPSILON_MAX:g}]; omitted: the server "
        "default; \"none\": no noise",
    )
    sensitivity: Literal["paper", "assessed"] | None = Field(
        default=None, description="Δ = all K concepts (paper) or the concepts assessed by this request"
    )
    mechanism: Literal["laplace", "secure_laplace", "gaussian", "duchi", "piecewise", "hybrid"] | None = Field(
        default=None, description="local DP mechanism on each entity's answer (laplace is the paper's); omitted: the server default"
    )
    delta: Delta = Field(default=1e-5, description=f"δ in [{DELTA_MIN:g}, {DELTA_MAX:g}], for the gaussian mechanism only")
    aggregation: Literal["auto", "mean", "posterior"] = Field(
        default="auto",
        description="auto: as the calibration record says (posterior when there is none); mean: (residual/stacking) "
        "mean; posterior: Bayes post-processing of the privatized answers (free of privacy cost), with mastery_interval",
    )
    estimate: Literal["mean", "median"] = Field(default="mean", description="posterior mean or median")
    entities: list[Name] | None = Field(default=None, min_length=1, description="entity names; omitted: all")
    calibration_id: str | None = None
    include_entities: bool = False
    federation: Literal["all", "calibrated", "selective"] | None = Field(
        default=None,
        description="all: ask every selected entity at once; calibrated: the same, leaving out the entities the "
        "calibration gives no weight for the request's concepts (neither asked nor charged; listed in "
        "left_out_entities); selective: tier by tier among those, cheapest first, until every assessed concept's "
        "credible interval is narrower than the server's selective_threshold; omitted: the server default "
        "(FEDCD_FEDERATION_DEFAULT)",
    )

    @model_validator(mode="after")
    def _one_qmatrix(self) -> DiagnoseOptions:
        if (self.qmatrix_id is None) == (self.qmatrix is None):
            raise ValueError("give exactly one of 'qmatrix_id' or 'qmatrix'")
        return self


_EXAMPLE_RESPONSES = [{"item_id": "q01", "correct": True}, {"item_id": "q03", "correct": False},
                      {"item_id": "q10", "correct": 0.5}]


class DiagnoseRequest(DiagnoseOptions):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"student_id": "demo-student", "qmatrix_id": "example-prealgebra", "responses": _EXAMPLE_RESPONSES},
        {"student_id": "demo-student", "qmatrix_id": "example-prealgebra", "responses": _EXAMPLE_RESPONSES,
         "epsilon": 8.0, "mechanism": "laplace", "sensitivity": "assessed", "include_entities": True},
    ]})

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(min_length=1)


class StudentIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(min_length=1)


class BatchDiagnoseRequest(DiagnoseOptions):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "qmatrix_id": "example-prealgebra",
        "students": [{"student_id": "s1", "responses": _EXAMPLE_RESPONSES}, {"student_id": "s2", "responses": _EXAMPLE_RESPONSES[:1]}],
    }]})

    students: Annotated[list[StudentIn], FailFast()] = Field(min_length=1)


class EntityUsage(BaseModel):
    """What one entity's answer used: the tokens its provider reported and their price."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = Field(
        default=0.0, description="tokens × the entity's configured price (README, Cost), every attempt included; 0 for "
        "a cache hit, a free entity, and a failure the provider reported no usage for (timeout, refusal)",
    )


class Usage(BaseModel):
    """Usage summed over entity answers (a diagnosis, a batch, a job, a period)."""

    calls: int = Field(default=0, description="entity answers asked for, cache hits included (skipped entities not)")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})


class UsageReport(BaseModel):
    """``GET /v1/usage``: the caller's tenant's usage since ``since``."""

    tenant: str
    since: str = Field(description="ISO 8601 UTC; usage recorded at or after it is counted")
    total: Usage
    entities: dict[str, Usage] = Field(description="per entity")


class EntityReport(BaseModel):
    name: str
    status: Literal["ok", "partial", "failed", "skipped"]
    latency_ms: float
    mastery: dict[str, float] | None = Field(
        description="privatized: noise added before aggregation (unbiased mechanisms may leave [0, 1])"
    )
    missing: list[str] = []
    error: str | None = None
    reason: str | None = Field(
        default=None,
        description="reason class of a failed or skipped entity: unavailable, timeout, rejected, parse_error, "
        "circuit_open (its circuit breaker is open: not asked), skipped",
    )
    model: str = ""
    attempts: int = 0
    repairs: dict[str, int] = Field(default_factory=dict, description="repair rule -> times applied")
    usage: EntityUsage = Field(default_factory=EntityUsage)
    cache: Literal["hit", "miss"] | None = Field(
        default=None, description="response cache: hit (answered from the cache, privatized afresh), miss; null: "
        "no cache in front of this entity"
    )


class PrivacyBlock(BaseModel):
    """The public parameters of the mechanism (extra keys depend on the mechanism)."""

    model_config = ConfigDict(extra="allow")

    mechanism: str
    epsilon: float | None
    sensitivity: float | None
    noise_scale: float
    sensitivity_mode: Literal["paper", "assessed"]
    scope: str = "local DP: noise added to each entity's answer before aggregation"


class BudgetBlock(BaseModel):
    """The student's privacy budget after this request (see README, Privacy model)."""

    tenant: str
    charged_epsilon: float = Field(description="ε spent by this request (all entity answers together)")
    period: str = Field(description="the tenant policy's budget period, e.g. 'rolling 86400 s', 'day (UTC)'")
    spent_epsilon: float = Field(description="ε spent in the current period")
    remaining_epsilon: float = Field(description="ε still allowed in the current period")
    cap_epsilon: float = Field(description="ε allowed per period")
    renews_at: str | None = Field(description="when the allowance renews (ISO 8601 UTC); null: it never does")
    lifetime_epsilon: float = Field(description="every ε this student has spent, all periods together")
    budget_warning: str | None = Field(
        default=None, description="set when the remaining allowance is below the policy's warning threshold"
    )
    repeat: bool = Field(description="an identical earlier request's answer, returned again at no cost")


class DiagnosisBasis(BaseModel):
    """What a diagnosis rests on: whether its aggregation was calibrated (on how many students, with what truth)
    and which local model answered — so an uncalibrated cold start is never mistaken for a trained one."""

    calibration: Literal["calibrated", "uncalibrated"] = Field(
        description="uncalibrated: uniform priors and an assumed entity error (posterior), or the plain mean"
    )
    calibration_id: str | None = None
    calibration_students: int = Field(default=0, description="validation students the calibration was fitted on")
    calibration_truth: str | None = Field(
        default=None, description="where the calibration's truth came from (provided, proportion-correct, SIMULATED …)"
    )
    local_model: Literal["trained", "untrained"] | None = Field(
        default=None, description="local-fed's model: trained (see local_model_version), the untrained evidence model "
        "(no trained model for this Q-matrix yet), or null when local-fed did not answer"
    )
    local_model_version: str | None = None
    summary: str = Field(description="the same in one sentence")


class SkippedEntity(BaseModel):
    """An entity that could not serve this request at all (e.g. ``local-fed`` with no model for the
    Q-matrix): not a failure, and it released nothing."""

    name: str
    reason: str


class FederationStage(BaseModel):
    """One stage of a diagnosis: the entities asked together, and what was decided after them."""

    tier: int | None = Field(description="the tier asked; null: every tier at once (federation 'all')")
    entities: list[str]
    decision: Literal["all", "confident", "uncertain", "tier failed", "last tier", "deadline"] = Field(
        description="confident: stopped here; uncertain / tier failed: the next tier was asked; last tier: no more "
        "tiers; deadline: not asked, the request's deadline had passed; all: federation 'all'"
    )
    reason: str
    widest: float | None = Field(default=None, description="widest credible interval of the assessed concepts, when judged")


class FederationBlock(BaseModel):
    """Which tiers a diagnosis asked and why (README "Selective federation")."""

    mode: Literal["all", "calibrated", "selective"]
    threshold: float | None = Field(description="selective: the credible-interval width that stops escalation")
    tiers: list[FederationStage]
    escalated: bool = Field(description="more than one tier was asked")


class DiagnoseResponse(BaseModel):
    student_id: str
    qmatrix_id: str | None = Field(default=None, description="the Q-matrix the diagnosis was made on")
    mastery: dict[str, float] = Field(description="assessed concepts only")
    evidence: dict[str, int] = Field(
        default_factory=dict, description="assessed concept -> how many of the student's responses assess it"
    )
    missing_concepts: list[str] = Field(default_factory=list, description="assessed concepts no entity answered")
    entities: list[EntityReport] | None = None
    failed_entities: list[str] = Field(default_factory=list)
    failure_reasons: dict[str, str] = Field(
        default_factory=dict,
        description="failed entity -> reason class: unavailable, timeout, rejected, parse_error, or circuit_open "
        "(not asked: its circuit breaker is open after consecutive failed calls)",
    )
    skipped_entities: list[SkippedEntity] = Field(
        default_factory=list, description="entities that could not serve this request, with the reason"
    )
    left_out_entities: list[SkippedEntity] = Field(
        default_factory=list, description="entities not asked (nor charged) because the calibration gives them no "
        "weight for this request's concepts, with the reason (federation calibrated or selective)"
    )
    privacy: PrivacyBlock
    mastery_interval: dict[str, tuple[float, float]] | None = Field(
        default=None, description="posterior aggregation: equal-tailed credible interval per concept"
    )
    interval_level: float | None = None
    aggregation: str = Field(default="mean", description="how the entities' answers were combined")
    basis: DiagnosisBasis | None = Field(default=None, description="what this diagnosis rests on")
    calibration_id: str | None
    calibration_mismatch: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="set when this diagnosis's noise (mechanism, epsilon, sensitivity) differs from the one its "
        "calibration was fitted at: field -> {calibrated, served}",
    )
    request_id: str
    latency_ms: float
    budget: BudgetBlock | None = Field(default=None, description="null when no noise was added or the ledger is off")
    federation: FederationBlock | None = Field(default=None, description="which tiers were asked and why")
    usage: Usage = Field(
        default_factory=Usage,
        description="what this request spent, every entity together; zero for a repeat (the stored answer: no entity "
        "was asked)",
    )


class BatchError(BaseModel):
    student_id: str
    status_code: int
    detail: object
    retry_after_s: int | None = Field(
        default=None, description="429 only: seconds until this student's budget renews (what Retry-After would say)"
    )


class BatchDiagnoseResponse(BaseModel):
    results: list[DiagnoseResponse]
    errors: list[BatchError]
    count: int
    usage: Usage = Field(default_factory=Usage, description="the sum over the batch's results")


class EntityInfo(BaseModel):
    name: str
    kind: str
    model: str
    status: str = Field(description="ready | loading | not_loaded | configured | error: ...")
    circuit: Literal["closed", "open", "half_open"] | None = Field(
        default=None, description="its circuit breaker's state (README 'Circuit breakers'); null: no breaker"
    )
    temperature: float | None = Field(description="sent to the backend; null: not sent")
    max_tokens: int
    structured_output: str
    concurrency: int
    deadline_s: float
    input_usd_per_mtok: float = Field(default=0.0, description="price per million prompt tokens (README, Cost)")
    output_usd_per_mtok: float = Field(default=0.0, description="price per million completion tokens")
    tier: int = Field(default=0, description="selective federation asks lower tiers first (README, Selective federation)")
    base_url: str | None = None


class EntityList(Paginated[EntityInfo]):
    """The federation's members, in the federation's order."""


class Health(BaseModel):
    status: Literal["ok"]
    entities: int
    version: str


class CalibrationRecordIn(BaseModel):
    """One validation student: responses, and the truth when it is known."""

    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(min_length=1)
    truth: dict[str, float] | None = Field(
        default=None, description="concept -> mastery in [0, 1]; absent: the paper's proportion-correct rule"
    )

    @model_validator(mode="after")
    def _truth_in_range(self) -> CalibrationRecordIn:
        for concept, value in (self.truth or {}).items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"truth['{concept}'] must be in [0, 1], got {value}")
        return self


class DatasetRef(BaseModel):
    """A validation split of a dataset, drawn with the evaluation harness's seeded split."""

    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    # Named datasets only: a request never names a path on the server's disk (the CLI may).
    name: Literal["frcsub", "assist0910", "uci", "synthetic"] = Field(
        description="frcsub | assist0910 | uci | synthetic: SIMULATED DINA students with known mastery, on the "
        "request's qmatrix_id (any Q-matrix of the tenant; the example when omitted)"
    )
    part: Literal["train", "validation", "test"] = "validation"
    seed: int = Field(default=0, ge=0, le=2**32 - 1, description="the split's seed (NumPy's range)")
    max_students: int | None = Field(default=None, ge=1, description="subsample the dataset first")


class CalibrateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [  # a request: no coercion
        {"dataset": {"name": "synthetic", "max_students": 20}, "method": "bias"},
    ]})

    qmatrix_id: str | None = Field(default=None, description="required with inline records")
    records: list[CalibrationRecordIn] | None = Field(default=None, min_length=1)
    dataset: DatasetRef | None = None
    epsilon: Epsilon | None = Field(
        default=None, description="ε the validation answers are privatized at; omitted: the server default (what diagnoses use)"
    )
    mechanism: Literal["laplace", "secure_laplace", "gaussian", "duchi", "piecewise", "hybrid"] | None = Field(
        default=None, description="mechanism the validation answers are privatized with; omitted: the server default"
    )
    sensitivity: Literal["paper", "assessed"] | None = None
    delta: Delta = Field(default=1e-5, description="δ, for the gaussian mechanism only")
    entities: list[Name] | None = Field(default=None, min_length=1)
    method: Literal["paper", "bias", "stacking", "posterior"] | None = Field(
        default=None, description="omitted: the server default (FEDCD_DEFAULT_CALIBRATION_METHOD)"
    )
    isotonic: bool = Field(default=False, description="stacking only: map each entity through an isotonic curve first")
    release_epsilon: Epsilon | None = Field(
        default=None,
        description="ε with which the fitted parameters are released (charged to each validation student); "
        "omitted: the server default; \"none\": released without noise (the record says so)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> CalibrateRequest:
        if (self.records is None) == (self.dataset is None):
            raise ValueError("give exactly one of 'records' or 'dataset'")
        if self.records is not None and self.qmatrix_id is None:
            raise ValueError("'qmatrix_id' is required with 'records'")
        if self.isotonic and self.method not in (None, "stacking"):
            raise ValueError("isotonic applies to method 'stacking' only")
        return self


class JobAccepted(BaseModel):
    job_id: str


class JobProgress(BaseModel):
    done: int
    total: int
    failed_entities: dict[str, int] = Field(description="entity -> students for whom it failed")


class JobEvent(BaseModel):
    at: str
    status: str = Field(description="queued | running | released | cancelling | cancelled | succeeded | failed")
    worker: str | None = Field(description="the worker process (host:pid:id) that made the change")
    message: str


class JobPublic(BaseModel):
    """Any background job of the tenant (``GET /v1/jobs``): a calibration or an upload-and-train run."""

    job_id: str
    kind: str = Field(description="calibrate | train")
    status: Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
    progress: JobProgress
    calibration_id: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict, description="what the job measured and produced")
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    resumed: int = 0
    history: list[JobEvent] = Field(default_factory=list, description="every status change, oldest first")
    created_at: str
    updated_at: str


class JobList(Paginated[JobPublic]):
    """The tenant's jobs, newest first."""


class CalibrateJob(BaseModel):
    job_id: str
    status: Literal["queued", "running", "cancelling", "cancelled", "succeeded", "failed"]
    progress: JobProgress
    calibration_id: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    resumed: int = Field(default=0, description="times this job was resumed (after a restart or a dead worker)")
    history: list[JobEvent] = Field(default_factory=list, description="every status change, oldest first")
    usage: Usage = Field(default_factory=Usage, description="entity usage of the job's finished students so far")
    created_at: str
    updated_at: str


class CalibrationPublic(BaseModel):
    id: str
    qmatrix_id: str
    qmatrix_version: int = Field(description="the Q-matrix version the calibration was fitted on")
    shared: bool = Field(default=False, description="the server's shared calibration (read-only, every tenant)")
    version: int
    method: str
    params: dict[str, Any] = Field(
        description="what the method fitted: paper/bias {alpha, residuals}; stacking {weights, intercepts, isotonic, "
        "pooled_weights, pooled_intercept}; posterior {priors: concept -> Beta(a, b), entity_error_sd: entity -> τ}; "
        "every method: excluded {entity: {answers, students}}, the entities left out for too few successful "
        "validation answers (FEDCD_CALIBRATION_MIN_ANSWERS): no weight, their answers are not aggregated"
    )
    entities: list[str]
    epsilon: float | None = Field(description="the noise level diagnoses are expected to use (null: no noise)")
    sensitivity: str
    mechanism: str
    delta: float
    truth_source: str
    n_students: int
    metrics: dict[str, float] = Field(
        description="validation_mae is k-fold cross-validated over the validation students; validation_mae_in_sample "
        "scores the released parameters on the students they were fitted on"
    )
    notes: list[str]
    created_at: str


class CalibrationList(Paginated[CalibrationPublic]):
    """Calibration records by Q-matrix id and version."""


class ExtractItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)


class ExtractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    items: list[ExtractItem] = Field(min_length=1, max_length=500)
    concepts: list[Name] | None = Field(default=None, min_length=1, description="default: fedcd's GSM8K concept set")
    method: Literal["keyword", "llm", "both"] = "keyword"
    entities: list[Name] | None = Field(default=None, min_length=1, description="LLM taggers; default: all configured")
    save: bool = Field(default=False, description="also register the extracted Q-matrix under 'id'")


class AgreementPublic(BaseModel):
    percent: float | None = Field(description="null when no item was tagged by both methods")
    kappa: float | None
    per_concept: dict[str, dict[str, float | None]]


class ExtractResponse(BaseModel):
    qmatrix: QMatrixCreate | None
    method: str
    tags: dict[str, list[str]]
    untagged_items: list[str] = Field(description="items no concept was tagged for: left out of the Q-matrix")
    unused_concepts: list[str] = Field(description="concepts no item was tagged with: left out of the Q-matrix")
    agreement: AgreementPublic | None = Field(default=None, description="keyword vs LLM tagging (method 'both')")
    failures: dict[str, list[str]] = Field(default_factory=dict, description="entity -> items it failed to tag")
    registered: bool = False


class StudentLookup(BaseModel):
    """The student id in the body, so it never appears in a URL (and so in no access log)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    student_id: Identifier


class StudentBudget(BaseModel):
    tenant: str
    student_id: str
    accountant: str
    period: str = Field(description="the budget period of the tenant's policy")
    spent_epsilon: float = Field(description="in the current period")
    spent_delta: float = Field(description="in the current period")
    cap_epsilon: float = Field(description="per period")
    cap_delta: float = Field(description="per period")
    remaining_epsilon: float = Field(description="still allowed in the current period")
    remaining_delta: float
    renews_at: str | None = Field(description="when the allowance renews (ISO 8601 UTC); null: it never does")
    lifetime_epsilon: float = Field(description="all periods together (basic composition unless configured)")
    lifetime_delta: float
    queries: int = Field(description="answered queries, lifetime")


class CohortReportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    qmatrix_id: str
    students: Annotated[list[StudentIn], FailFast()] = Field(min_length=1, max_length=5000)
    epsilon: EpsilonValue = Field(description="central-DP ε for the whole report, charged to every student in it")
    bins: int = Field(default=5, ge=1, le=20, description="histogram bins over [0, 1]")
    entities: list[Name] | None = Field(default=None, min_length=1)


class CohortConcept(BaseModel):
    mean: float | None = Field(description="noisy sum / noisy count; null when the noisy count is below 1")
    noisy_count: float
    histogram: dict[str, list[float]] = Field(description='{"bin_edges": [...], "counts": [...]} (noisy counts)')


class CohortReport(BaseModel):
    cohort_size: int
    concepts: dict[str, CohortConcept]
    epsilon: float
    epsilon_per_statistic: float
    mechanism: str = "central Laplace on bounded contributions (sum and histogram per concept)"
    min_cohort_size: int
    charged_epsilon_per_student: float
    calibration_id: str | None
    notes: list[str]
    usage: Usage = Field(default_factory=Usage, description="entity usage of diagnosing the cohort")


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    tenant: str | None = Field(default=None, description="must be the admin's own tenant (the default)")
    role: Literal["client", "admin"] = "client"
    expires_days: float | None = Field(default=None, gt=0, le=36500)


class KeyPublic(BaseModel):
    """A key as listed: never the key itself."""

    key_id: str
    tenant: str
    role: Literal["client", "admin"]
    created_at: float
    expires_at: float | None
    revoked: bool
    last_used_at: float | None
    created_by: str


class KeyCreated(BaseModel):
    tenant: str
    role: Literal["client", "admin"]
    key_id: str
    api_key: str = Field(description="shown once; only its hash is stored")
    expires_at: float | None


class KeyList(Paginated[KeyPublic]):
    """The tenant's keys, oldest first."""


# -- privacy policies (admin) --------------------------------------------------------------------------------


class _PeriodBase(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LifetimePeriod(_PeriodBase):
    """Every charge counts, forever: the allowance never renews."""

    kind: Literal["lifetime"] = "lifetime"

    def to_period(self) -> BudgetPeriod:
        return Lifetime()


class RollingPeriod(_PeriodBase):
    """Charges of the last ``window_s`` seconds count."""

    kind: Literal["rolling"] = "rolling"
    window_s: float = Field(default=86400.0, ge=60.0, le=3.2e8, description="window length in seconds (≥ 1 minute)")

    def to_period(self) -> BudgetPeriod:
        return Rolling(window_s=self.window_s)


class _CalendarPeriodBase(_PeriodBase):
    timezone: str = Field(default="UTC", max_length=64, description="IANA time zone of the platform's students")

    @model_validator(mode="after")
    def _known_zone(self) -> _CalendarPeriodBase:
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: e.g. a zone file that cannot be read
            raise ValueError(f"unknown time zone {self.timezone!r}") from exc
        return self


class DayPeriod(_CalendarPeriodBase):
    """Charges since local midnight count; the allowance renews at the next."""

    kind: Literal["day"] = "day"

    def to_period(self) -> BudgetPeriod:
        return CalendarDay(timezone=self.timezone)


class WeekPeriod(_CalendarPeriodBase):
    """Charges since Monday 00:00 local time count."""

    kind: Literal["week"] = "week"

    def to_period(self) -> BudgetPeriod:
        return CalendarWeek(timezone=self.timezone)


class TermDates(_PeriodBase):
    start: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="first day, YYYY-MM-DD")
    end: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="last day, YYYY-MM-DD")


class TermPeriod(_CalendarPeriodBase):
    """Charges since the start of the current (or most recent) term count; renews when the next term starts."""

    kind: Literal["term"] = "term"
    terms: list[TermDates] = Field(min_length=1, max_length=50)

    @model_validator(mode="after")
    def _valid_terms(self) -> TermPeriod:
        self.to_period()  # dates, order and overlap are checked there
        return self

    def to_period(self) -> BudgetPeriod:
        return Terms.from_dates([(t.start, t.end) for t in self.terms], timezone=self.timezone)


PeriodIn = Annotated[LifetimePeriod | RollingPeriod | DayPeriod | WeekPeriod | TermPeriod, Field(discriminator="kind")]


class PrivacyPolicy(BaseModel):
    """A tenant's privacy policy: the budget per period and the defaults of its diagnoses."""

    model_config = ConfigDict(extra="forbid", strict=True)

    period: PeriodIn
    cap_epsilon: float = Field(ge=EPSILON_MIN, le=1e7, allow_inf_nan=False, description="ε allowed per period per student")
    cap_delta: float = Field(default=1e-4, ge=0.0, lt=1.0, description="δ allowed per period per student")
    default_mechanism: Literal["laplace", "secure_laplace", "gaussian", "duchi", "piecewise", "hybrid"]
    default_epsilon: EpsilonValue = Field(description="ε per entity answer when a request gives none")
    sensitivity: Literal["paper", "assessed"] = Field(description="default Δ when a request gives none")
    allow_unnoised: bool = Field(description='whether "epsilon": "none" (raw answers, no privacy) is allowed')
    warning_fraction: float = Field(
        default=0.2, ge=0.0, le=1.0, description="responses carry budget_warning when less than this share remains"
    )


class PrivacyPolicyPublic(PrivacyPolicy):
    tenant: str
    version: int = Field(description="0: the server default, never changed for this tenant")
    created_at: str | None
    created_by: str | None = Field(description="key id of the admin who set it")


class PrivacyPolicyHistory(Paginated[PrivacyPolicyPublic]):
    """Every version of the tenant's policy, oldest first."""
