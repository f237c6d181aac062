"""Where the gateway listens, what it stores where, and who may call it (``FEDCD_HOST``, ``FEDCD_STATE_DIR`` …)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, computed_field, field_validator, model_validator

from app.settings.students import require_key_material

__all__ = ["ServerSettings", "is_loopback"]


class ServerSettings(BaseModel):
    """The bind, authentication, the state database and folders, and start-up behaviour."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    auth: Literal["enabled", "disabled"] = Field(
        default="enabled",
        description="API keys on every route but /healthz; 'disabled' only with a loopback bind (tests, local demos)",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the state database (postgresql+psycopg://… in production); "
        "default: SQLite <state_dir>/fedcd.db",
    )
    db_upgrade_on_start: bool = Field(
        default=True, description="migrate the schema at start (else refuse to start on an old one: fedcd db upgrade)"
    )
    preload_models: bool = Field(default=True, description="load embedded models at start-up, not on first request")
    state_dir: Path = Path(".fedcd")
    data_dir: Path | None = None
    # Shared by every worker (circuit breakers, response cache, rate limits): a storage backend like database_url.
    redis_url: SecretStr | None = Field(
        default=None, description="redis:// URL of the state shared by workers (circuit breakers, response cache); none: in-process"
    )
    log_level: str = "INFO"
    # The console's sign-in (README "Console"): its own secret, so ending sessions never re-keys a student.
    console_secret_key: SecretStr | None = Field(
        default=None, description="signs console sessions (at least 32 bytes; several hosts: one shared value); "
        "unset: <state_dir>/console-secret, created once. Changing it ends every console session, nothing else"
    )
    console_secure_cookie: bool | Literal["auto"] = Field(
        default="auto", description="mark console cookies Secure: auto = when the request is HTTPS; true behind a "
        "TLS-terminating proxy that does not forward the scheme"
    )

    @field_validator("console_secret_key")
    @classmethod
    def _console_key_material(cls, value: SecretStr | None) -> SecretStr | None:
        return require_key_material(value, "FEDCD_CONSOLE_SECRET_KEY")

    @model_validator(mode="after")
    def _auth_needs_loopback(self) -> ServerSettings:
        if self.auth == "disabled" and not is_loopback(self.host):
            raise ValueError(
                f"FEDCD_AUTH=disabled is allowed only with a loopback bind (127.0.0.1, ::1, localhost), not {self.host!r}"
            )
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.state_dir / 'fedcd.db'}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
