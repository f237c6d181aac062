"""Metrics (``FEDCD_METRICS_TOKEN``, ``PROMETHEUS_MULTIPROC_DIR``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, BaseModel, Field, SecretStr

__all__ = ["ObservabilitySettings"]


class ObservabilitySettings(BaseModel):
    """Who may read /metrics, and where several workers' metrics meet."""

    # Metrics (README "Metrics").
    metrics_token: SecretStr | None = Field(
        default=None, description="when set, GET /metrics needs 'Authorization: Bearer <token>'; unset: /metrics answers only "
        "loopback clients (403 otherwise)"
    )
    prometheus_multiproc_dir: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"),
        description="prometheus-client's multiprocess folder (several workers); read from PROMETHEUS_MULTIPROC_DIR, "
        "the variable the library itself reads",
    )
