"""One student's diagnosis and a batch of them (``/v1/diagnose``, ``/v1/diagnose/batch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, FailFast, Field, model_validator

from app.schemas.common import Delta, Epsilon, Identifier, Name
from app.schemas.qmatrices import QMatrixCreate
from app.schemas.usage import EntityUsage, Usage
from privacy import DELTA_MAX, DELTA_MIN, EPSILON_MAX, EPSILON_MIN, PAPER_MECHANISM, MechanismName
from qmatrix import Response

if TYPE_CHECKING:
    from diagnosis import MeasuredError

__all__ = [
    "BatchDiagnoseRequest",
    "BatchDiagnoseResponse",
    "BatchError",
    "BudgetBlock",
    "DiagnoseOptions",
    "DiagnoseRequest",
    "DiagnoseResponse",
    "DiagnosisBasis",
    "EntityReport",
    "FederationBlock",
    "FederationStage",
    "ForecastBasis",
    "IntervalSpread",
    "ItemForecast",
    "PrivacyBlock",
    "SkippedEntity",
    "StudentIn",
]


MAX_FORECAST_ITEMS = 20_000  # as many as a Q-matrix may hold (FEDCD_MAX_QMATRIX_ITEMS' default)


# What _one_qmatrix checks, stated in the schema: a stored Q-matrix by id, or one inline, never both.
_ONE_QMATRIX: dict[str, Any] = {"oneOf": [
    {"required": ["qmatrix_id"], "properties": {"qmatrix_id": {"type": "string"}, "qmatrix": {"type": "null"}}},
    {"required": ["qmatrix"], "properties": {"qmatrix": {"type": "object"}, "qmatrix_id": {"type": "null"}}},
]}


class DiagnoseOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_ONE_QMATRIX)  # a request: no coercion

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
    mechanism: MechanismName | None = Field(
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
    calibration_id: Identifier | None = Field(
        default=None, description="a calibration record of the tenant (or a shared one); omitted: the newest for the "
        "Q-matrix's current rows"
    )
    include_entities: bool = False
    forecast_items: Annotated[list[Identifier], Field(min_length=1, max_length=MAX_FORECAST_ITEMS)] | Literal[
        "all"] | None = Field(
        default=None,
        description="items of the Q-matrix to forecast: for each, the probability that this student answers it "
        "correctly, from the diagnosis through the serving model's item parameters (see forecasts); \"all\": every "
        "item of the Q-matrix; omitted: none. Post-processing of the released diagnosis: no privacy cost",
    )
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
    model_config = ConfigDict(json_schema_extra={**_ONE_QMATRIX, "examples": [
        {"student_id": "demo-student", "qmatrix_id": "example-prealgebra", "responses": _EXAMPLE_RESPONSES},
        {"student_id": "demo-student", "qmatrix_id": "example-prealgebra", "responses": _EXAMPLE_RESPONSES,
         "epsilon": 8.0, "mechanism": PAPER_MECHANISM, "sensitivity": "assessed", "include_entities": True},
    ]})

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(min_length=1)


class StudentIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(min_length=1)


class BatchDiagnoseRequest(DiagnoseOptions):
    model_config = ConfigDict(json_schema_extra={**_ONE_QMATRIX, "examples": [{
        "qmatrix_id": "example-prealgebra",
        "students": [{"student_id": "s1", "responses": _EXAMPLE_RESPONSES}, {"student_id": "s2", "responses": _EXAMPLE_RESPONSES[:1]}],
    }]})

    students: Annotated[list[StudentIn], FailFast()] = Field(min_length=1)


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
    """The student's privacy budget after this request (see the docs, privacy.md)."""

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
    """Which tiers a diagnosis asked and why (docs: cost.md, "Selective federation")."""

    mode: Literal["all", "calibrated", "selective"]
    threshold: float | None = Field(description="selective: the credible-interval width that stops escalation")
    tiers: list[FederationStage]
    escalated: bool = Field(description="more than one tier was asked")


class ItemForecast(BaseModel):
    """The probability that the student answers one item correctly, as the diagnosis and the model see it."""

    item_id: str
    p_correct: float = Field(ge=0.0, le=1.0, description="posterior-predictive probability of a correct answer")
    interval: tuple[float, float] | None = Field(
        description="equal-tailed interval at interval_level (null when the diagnosis has no interval: an "
        "uncalibrated mean); under a stacking calibration it is the spread of its measured error, and p_correct is "
        "read at the point"
    )
    basis: Literal["trained", "q-row", "untrained"] = Field(
        description="trained: the item's own parameters, learned in training; q-row: a trained model's parameters "
        "predicted from the item's Q-row (the item was not in its training data); untrained: the untrained evidence "
        "model's (discrimination 1, intercept 0) — no trained model serves this Q-matrix, or the item requires a "
        "concept the trained model does not know"
    )
    from_prior: list[str] = Field(
        default_factory=list, description="the item's concepts this diagnosis did not assess: the model's prior "
        "stood in for them, so the forecast is only as sure as the model is of a student it knows nothing about"
    )


class ForecastBasis(BaseModel):
    """What the item forecasts rest on."""

    model: str = Field(description="the model whose item parameters were used (fedcd-cdm/<version> or "
                                   "fedcd-cdm/untrained)")
    interval_level: float = Field(description="the credible level of every forecast's interval")
    summary: str


class IntervalSpread(BaseModel):
    """What a diagnosis's intervals are, where they are a stacking calibration's measured error: the logit-scale
    spread ``sd(n)² = base + per_answer / (n + 1)`` for a concept with ``n`` of the student's answers (``evidence``),
    each interval ``σ(logit(mastery) ± z·sd(n))`` at ``interval_level``. Released calibration parameters (the same
    for every student of the calibration), not student data: reading them costs no ε."""

    kind: Literal["measured"] = Field(description="measured: the stack's error measured on held-out validation "
                                                  "students (docs/calibration.md, \"A stack's intervals\")")
    base: float = Field(ge=0.0, description="the part of the logit variance no number of answers removes: the "
                                            "intervals never get narrower than this gives, however much a student "
                                            "answers")
    per_answer: float = Field(ge=0.0, description="the part that thins out with evidence, divided by answers + 1")

    @classmethod
    def of(cls, error: MeasuredError | None) -> IntervalSpread | None:
        return None if error is None else cls(kind="measured", base=error.base, per_answer=error.per_answer)


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
        default=None, description="posterior aggregation: equal-tailed credible interval per concept; a stacking "
        "calibration that measured its error (docs/calibration.md): the interval that error gives with this "
        "student's answers on the concept; null for an uncalibrated mean"
    )
    interval_level: float | None = None
    interval_spread: IntervalSpread | None = Field(
        default=None, description="set only when mastery_interval is a stacking calibration's measured error: its "
        "spread, so the intervals can be re-read — e.g. how many more answers would narrow one, or that none would "
        "(the student report's thin-evidence guide); null for a posterior's or no interval"
    )
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
    forecasts: list[ItemForecast] | None = Field(
        default=None, description="forecast_items only: per item, P(correct) with its interval and basis"
    )
    forecast_basis: ForecastBasis | None = None


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

