"""Student data: the secret of the keyed student ids (``FEDCD_SECRET_KEY``, ``FEDCD_SECRET_FILE``) and how long stored
data is kept (``FEDCD_RETENTION_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr, field_validator

__all__ = ["MIN_SECRET_BYTES", "StudentDataSettings", "WeakSecretError", "require_key_material"]

# HMAC-SHA-256's own key size: a shorter passphrase could be guessed offline by whoever holds a copy of the database.
MIN_SECRET_BYTES = 32
_GENERATE = 'python -c "import secrets; print(secrets.token_urlsafe(48))"'


class WeakSecretError(Exception):
    """A secret setting with too little key material. Not a ``ValueError`` on purpose: pydantic would wrap that in a
    ValidationError whose text repeats the input — the secret itself — into the start-up log."""


def require_key_material(value: SecretStr | None, variable: str, note: str = "") -> SecretStr | None:
    """``value`` unless it holds fewer than :data:`MIN_SECRET_BYTES` bytes; the error names the variable (and adds
    ``note``: what replacing it costs) and never echoes the value."""
    if value is not None and len(value.get_secret_value().encode()) < MIN_SECRET_BYTES:
        raise WeakSecretError(f"{variable} must hold at least {MIN_SECRET_BYTES} bytes of key material (it has "
                              f"{len(value.get_secret_value().encode())}); generate one with: {_GENERATE}{note}")
    return value


class StudentDataSettings(BaseModel):
    """The server secret and the default retention periods (a tenant's admin may set its own)."""

    # Student data (README "Student data"): stored ids are keyed hashes under this secret (app.pseudonyms), and
    # what is kept about a student expires after these defaults (a tenant's admin may set its own: /v1/admin/retention).
    secret_key: SecretStr | None = Field(
        default=None, description="server secret of the keyed hashes that replace student ids (and of log references); "
        "unset: the file secret_file, created once — multi-host deployments must set one shared value (32+ bytes)"
    )
    # Apart from the database: a backup holding both lets anyone re-identify students by hashing candidate ids.
    secret_file: Path | None = Field(
        default=None, description="where the server secret file lives when FEDCD_SECRET_KEY is unset; default: "
        "<state_dir>/server-secret"
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

    @field_validator("secret_key")
    @classmethod
    def _enough_key_material(cls, value: SecretStr | None) -> SecretStr | None:
        return require_key_material(value, "FEDCD_SECRET_KEY", note=" (a new secret gives every stored student a new "
                                    "keyed id: their privacy budgets start again)")
