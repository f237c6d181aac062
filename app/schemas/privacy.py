"""Privacy budgets and policies: a student's budget, a tenant's policy and its budget periods."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.pagination import Paginated
from app.schemas.common import EpsilonValue, Identifier
from privacy import EPSILON_MIN, BudgetPeriod, CalendarDay, CalendarWeek, Lifetime, MechanismName, Rolling, Terms

__all__ = [
    "DayPeriod",
    "LifetimePeriod",
    "PeriodIn",
    "PrivacyPolicy",
    "PrivacyPolicyHistory",
    "PrivacyPolicyPublic",
    "RollingPeriod",
    "StudentBudget",
    "StudentLookup",
    "TermDates",
    "TermPeriod",
    "WeekPeriod",
]


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



# -- privacy policies (admin) --------------------------------------------------------------------------------


def _kind_required(schema: dict[str, Any]) -> None:
    """``kind`` tells the periods apart (the discriminator): a period without it is a 422, so the schema requires it."""
    if "kind" in schema.get("properties", {}):  # TermDates shares the base and has no kind
        schema["required"] = ["kind", *[name for name in schema.get("required", []) if name != "kind"]]


class _PeriodBase(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_kind_required)


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
    default_mechanism: MechanismName
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
