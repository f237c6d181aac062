"""Student data: the secret of the keyed student ids and how long stored data is kept (``FEDCD_RETENTION_*``)."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr

__all__ = ["StudentDataSettings"]


class StudentDataSettings(BaseModel):
    """The server secret and the default retention periods (a tenant's admin may set its own)."""

    # Student data (README "Student data"): stored ids are keyed hashes under this secret (app.pseudonyms), and
    # what is kept about a student expires after these defaults (a tenant's admin may set its own: /v1/admin/retention).
    secret_key: SecretStr | None = Field(
        default=None, description="server secret of the keyed hashes that replace student ids (and of log references); "
        "unset: <state_dir>/server-secret, created once — multi-host deployments must set one shared value"
    )
    retention_diagnoses_days: float | None = Field(
        default=30.0, gt=0, description="days a released diagnosis is kept (repeats, export); at least the repeat "
        "window; null: until erased"
    )
    retention_responses_days: float | None = Field(
        default=7.0, gt=0, description="days an uploaded responses CSV may stay in <state_dir>/uploads (normally "
        "deleted when its job ends); null: until its job ends"
    )
    retention_job_inputs_days: float | None = Field(
        default=30.0, gt=0, description="days a finished job keeps its students' inputs (calibration records: "
        "responses, truth) and per-student results; null: until erased"
    )
    retention_sweep_s: float = Field(default=3600.0, gt=0, description="how often a worker purges expired data")
