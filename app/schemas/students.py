"""Request and response bodies of student data rights: retention, export, erasure (README "Student data")."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.privacy import StudentBudget
from app.schemas.usage import Usage

__all__ = [
    "ChargeRecord",
    "ErasureKept",
    "JobRecord",
    "RetentionPolicy",
    "RetentionPolicyPublic",
    "StoredDiagnosis",
    "StudentErasure",
    "StudentExport",
    "UploadRecord",
]

_DAYS = "days; null: kept until erased"


# A century: longer is "keep", which null says. Strict: JSON true is not a number of days (lax mode read it as 1).
MAX_DAYS = 36500.0


class RetentionPolicy(BaseModel):
    """How long what is stored about a tenant's students is kept; the maintenance loop purges what expired."""

    model_config = ConfigDict(extra="forbid")

    diagnoses_days: float | None = Field(
        gt=0, le=MAX_DAYS, strict=True, description=f"released diagnoses (the stored answer of the repeat rule, the request fingerprint); the "
        f"spend of each charge is kept regardless (the budget). At least the repeat window. {_DAYS}"
    )
    responses_days: float | None = Field(
        gt=0, le=MAX_DAYS, strict=True, description="an uploaded responses CSV left in the server's uploads folder (deleted when its job ends in "
        "any case); null: until its job ends"
    )
    job_inputs_days: float | None = Field(
        gt=0, le=MAX_DAYS, strict=True, description=f"a finished job's students: the calibration records (keyed student id, responses, truth) "
        f"and per-student results. {_DAYS}"
    )


class RetentionPolicyPublic(RetentionPolicy):
    tenant: str
    default: bool = Field(description="true: the server's defaults (FEDCD_RETENTION_*), never set by the tenant")
    updated_at: str | None = None
    updated_by: str | None = None


class ChargeRecord(BaseModel):
    """One charge of the student's privacy budget: the audit trail of what spent it."""

    id: str
    created_at: str = Field(description="ISO 8601 UTC")
    settled_at: str | None
    source: str | None = Field(description="diagnosis | cohort | calibration (null: made before sources were recorded "
                                           "and settled without an answer)")
    mechanism: str
    epsilon: float = Field(description="per release")
    delta: float
    releases: int = Field(description="independently noised answers (one per entity asked)")
    epsilon_total: float = Field(description="epsilon × releases (0 when refunded)")
    status: str = Field(description="charged (answer pending) | released | refunded (nothing spent)")
    release: str | None = Field(default=None, description="a group release's name (\"calibration cal-…\", "
                                                          "\"cohort-report\"); null for a diagnosis")
    diagnosis_stored: bool = Field(description="the released answer is still stored (listed under diagnoses)")


class StoredDiagnosis(BaseModel):
    charge_id: str
    created_at: str
    diagnosis: dict[str, Any] = Field(description="the released response, as it was returned")


class JobRecord(BaseModel):
    """A job whose stored input holds the student (a calibration's validation records)."""

    job_id: str
    kind: str
    status: str
    created_at: str
    records: list[dict[str, Any]] = Field(description="the student's stored input records (responses, truth)")
    results: list[dict[str, Any]] = Field(description="the job's stored per-student results for those records")
    usage: Usage = Field(description="the whole job's usage rows (shared by its students; no row names a student)")


class UploadRecord(BaseModel):
    job_id: str
    status: str
    rows: int = Field(description="responses of the student in the upload, kept until its job ends")


class StudentExport(BaseModel):
    tenant: str
    student_id: str
    student_key: str = Field(description="the keyed hash every table stores instead of the id")
    exported_at: str
    budget: StudentBudget | None = Field(description="under the tenant's policy now; null: the ledger is off")
    charges: list[ChargeRecord]
    diagnoses: list[StoredDiagnosis]
    jobs: list[JobRecord]
    uploads: list[UploadRecord]
    cache_entries: int = Field(description="cached entity answers made from the student's responses (expire on their "
                                           "own; not exported: they are the entities' answers before noise)")
    retention: RetentionPolicyPublic
    notes: list[str]


class ErasureKept(BaseModel):
    what: str
    count: int
    why: str


class StudentErasure(BaseModel):
    tenant: str
    student_id: str
    removed: dict[str, int] = Field(description="what was deleted, and how much")
    kept: list[ErasureKept] = Field(description="what is kept, and why")
