"""All gateway settings in one pydantic-settings object.

Sources, highest priority first: constructor arguments (tests), environment variables
(``FEDCD_*``; nested with ``__``, e.g. ``FEDCD_DEFAULT_EPSILON=2``), a YAML config file
named by ``FEDCD_CONFIG``, then defaults. Entities are declared under ``entities``; when
none are declared, the default federation is used: the embedded ``smollm2`` and ``gemma3``,
each hosted provider whose API key (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``GROQ_API_KEY``) is set, and ``local-fed`` when ``local_fed`` is on.

Declared entities keep ``local-fed`` too, unless ``local_fed`` is off or one of them is of kind
``local_fed`` (that declaration is then used instead, ``enabled: false`` dropping it). A declared
entity whose key variable (``api_key_env``) is unset or empty, with no ``api_key``, is dropped: it
counts nowhere, and a warning names it once per process. :attr:`Settings.entity_specs` is the one
place that decides; :attr:`Settings.dropped_entities` names what it left out and why.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, computed_field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from privacy import EPSILON_MAX, EPSILON_MIN
from app.ratelimit import parse_rate
from app.webhooks import WebhookTarget
from providers import EntityKind, EntitySpec, default_entity_specs

__all__ = ["LOCAL_FED_NAME", "DroppedEntity", "Settings", "get_settings", "is_loopback"]

log = logging.getLogger("fedcd.settings")

LOCAL_FED_NAME = "local-fed"

# (entity, variable) pairs already warned about in this process: the warning is logged once, however often the
# settings are read (the gateway, the CLI, each Settings object).
_WARNED_MISSING_KEYS: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class DroppedEntity:
    """A declared entity left out of the federation, and why (``missing_env``: the unset key variable)."""

    name: str
    kind: str
    reason: str
    missing_env: str | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FEDCD_", env_nested_delimiter="__", extra="forbid", env_parse_none_str="null"
    )

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
    worker_heartbeat_s: float = Field(default=5.0, gt=0, description="how often a worker shows it is alive")
    worker_stale_s: float = Field(
        default=30.0, gt=0, description="a worker silent this long is dead: its jobs and pending charges are taken over"
    )
    db_upgrade_on_start: bool = Field(
        default=True, description="migrate the schema at start (else refuse to start on an old one: fedcd db upgrade)"
    )
    # Declared entities; None means the default federation (see module docstring).
    entities: list[EntitySpec] | None = None
    # Defaults chosen from the privacy frontier (docs/results/frontier): below ε ≈ 8–32 per entity answer, with
    # Δ = K, every mechanism's posterior returns the population prior; piecewise is the best from ε = 8 up.
    default_epsilon: float = Field(
        default=32.0, ge=EPSILON_MIN, le=EPSILON_MAX, description="ε per entity answer when a request gives none"
    )
    default_mechanism: Literal["laplace", "secure_laplace", "gaussian", "duchi", "piecewise", "hybrid"] = "piecewise"
    sensitivity: Literal["paper", "assessed"] = Field(
        default="assessed", description="default Δ: the concepts a request assesses (assessed) or all K (paper)"
    )
    alpha: float = Field(default=0.3, ge=0.0, le=1.0)
    send_answer_text: bool = Field(
        default=False, description="send students' free-text answers to entities (off: only item text and correctness)"
    )
    # The default privacy policy (a tenant's admin may set its own: /v1/admin/privacy-policy). Why these
    # numbers, and what they mean per diagnosis, day and year: docs/privacy.md, "The default policy".
    privacy_period: Literal["lifetime", "rolling", "day", "week"] = Field(
        default="rolling", description="budget period of the default policy"
    )
    privacy_window_s: float = Field(default=86400.0, ge=60.0, description="rolling period length in seconds")
    privacy_timezone: str = Field(default="UTC", description="time zone of calendar periods (day, week)")
    privacy_cap_epsilon: float | None = Field(
        default=480.0, gt=0, description="ε per (tenant, student) per period; None switches the ledger off"
    )
    privacy_warning_fraction: float = Field(
        default=0.2, ge=0.0, le=1.0, description="responses carry budget_warning when less than this share remains"
    )
    privacy_cap_delta: float = Field(default=1e-4, ge=0, lt=1, description="δ per student per period (Gaussian queries)")
    privacy_accountant: Literal["basic", "rdp", "zcdp"] = "basic"
    privacy_repeat_window_s: float = Field(
        default=3600.0, ge=0, description="an identical request within this window gets the same answer, free"
    )
    allow_unnoised: bool = Field(
        default=False, description="allow epsilon \"none\" (raw answers: unbounded privacy cost, never charged)"
    )
    # Selective federation (README "Selective federation"): ask tier 0 first, the paid tiers only when it is unsure.
    # Not the default: on FrcSub the bench cannot resolve an AUC change of 0.005 (its 95 % interval is ±0.02).
    # `calibrated` by default: an entity the calibration gives no weight moves no diagnosis, so asking it only costs
    # the student ε and the server time (issue 21: the embedded LLMs, weight 0 on real data, doubled ε per diagnosis).
    federation_default: Literal["all", "calibrated", "selective"] = Field(
        default="calibrated", description="federation mode of a request that names none: all asks every entity; "
        "calibrated leaves out those the calibration gives no weight; selective also asks tier by tier"
    )
    # 0.8: the largest measured threshold within 0.005 held-out AUC of `all` on both FrcSub and ASSIST0910 at the
    # default noise (docs/results/cost/, `fedcd bench cost`); the width depends on the noise, so re-measure if it changes.
    selective_threshold: float = Field(
        default=0.8, gt=0, le=1,
        description="selective federation stops once every assessed concept's credible interval is narrower than "
        "this (docs/results/cost/: fedcd bench cost)",
    )
    request_deadline_s: float | None = Field(
        default=None, gt=0,
        description="one deadline for a whole diagnosis, every tier included; null: the longest deadline_s of the "
        "entities it selects (so selective never waits longer than asking all at once)",
    )
    min_cohort_size: int = Field(default=10, ge=2, description="smallest cohort /v1/cohort-report will describe")
    batch_concurrency: int = Field(default=4, ge=1, description="students diagnosed at once in a batch")
    # Request limits (README "Limits"): bigger requests are refused with 413 (body) or 422 (counts).
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="request body limit, except Q-matrix uploads")
    max_qmatrix_body_bytes: int = Field(default=16 << 20, ge=1024, description="body limit of POST/PUT /v1/qmatrices")
    max_batch_size: int = Field(default=200, ge=1, description="students per batch diagnosis")
    max_responses_per_student: int = Field(default=2000, ge=1, description="responses per student in one request")
    max_qmatrix_items: int = Field(default=20000, ge=1, description="items per Q-matrix")
    max_qmatrix_concepts: int = Field(default=500, ge=1, description="concepts per Q-matrix")
    max_calibration_records: int = Field(default=5000, ge=1, description="validation students per /v1/calibrate")
    preload_models: bool = Field(default=True, description="load embedded models at start-up, not on first request")
    calibration_release_epsilon: float | None = Field(
        default=4.0, gt=0, description="ε for releasing calibration parameters; None: released without noise"
    )
    default_calibration: bool = Field(
        default=True,
        description="at first start, fit a calibration for the example Q-matrix on SIMULATED validation students",
    )
    default_calibration_students: int = Field(default=120, ge=10, description="simulated students; a fifth validate")
    default_calibration_method: Literal["paper", "bias", "stacking", "posterior"] = Field(
        default="stacking",
        description="method of /v1/calibrate when a request names none, and of the first-start calibration: stacking "
        "weights every entity per concept at the served noise, so a strong member is not dragged down by weak ones",
    )
    # 20 (calibration.DEFAULT_MIN_ANSWERS): a weight or residual fitted on fewer students is noise. Measured: the
    # first-start calibration weighted two embedded LLMs that had answered only 5 and 3 of its 24 students.
    calibration_min_answers: int = Field(
        default=20, ge=1,
        description="a calibration gives no weight to an entity with fewer successful validation answers (or, when "
        "fewer validation students were asked, to one that missed any); the record lists who was left out",
    )
    local_fed: bool = Field(
        default=True, description="serve the federated-trained models (one per Q-matrix) as entity 'local-fed'"
    )
    train_default_model: bool = Field(
        default=True, description="at first start, train a small local-fed model on SIMULATED data if none exists"
    )
    model_registry_dir: Path | None = Field(default=None, description="signed model versions; default <state_dir>/models")
    model_signing_key: Path | None = Field(default=None, description="Ed25519 private key; default in the registry")
    # Upload and train (POST /v1/qmatrices/{id}/train, app.services.training).
    train_min_students: int = Field(default=30, ge=5, description="students an upload needs to train on")
    train_rounds: int = Field(default=10, ge=1, le=200, description="training rounds of an upload's model")
    train_calibration_fraction: float = Field(
        default=0.2, ge=0.0, lt=1.0, description="share of an upload's students kept for its calibration"
    )
    train_calibration_students: int = Field(
        default=50, ge=0, description="at most this many calibration students (each asks every entity); 0: none"
    )
    train_seed: int = Field(default=0, ge=0, description="seed of an upload's split and training")
    state_dir: Path = Path(".fedcd")
    data_dir: Path | None = None
    noise_seed: int | None = Field(default=None, description="tests only: fixed seed for the privacy noise")
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
    # Circuit breakers (README "Circuit breakers"): shared by every worker through Redis when redis_url is set.
    redis_url: SecretStr | None = Field(
        default=None, description="redis:// URL of the state shared by workers (circuit breakers, response cache); none: in-process"
    )
    circuit_failure_threshold: int | None = Field(
        default=5, ge=1, description="consecutive failed calls that open an entity's circuit; null: no breakers"
    )
    circuit_reset_timeout_s: float = Field(
        default=30.0, gt=0, description="seconds an open circuit waits before one probe call"
    )
    circuit_key_prefix: str = Field(default="fedcd:circuit:", min_length=1, description="Redis key prefix")
    # Response cache (README "Response cache"): entity answers before privatization, shared through Redis
    # when redis_url is set. Hits are privatized afresh and charged like calls: they save money, not ε.
    cache_enabled: bool = Field(default=True, description="cache entity answers (in-process, or in Redis with redis_url)")
    cache_ttl_s: float = Field(default=3600.0, gt=0, description="seconds a cached answer is served")
    cache_max_entries: int = Field(
        default=10000, ge=1, description="cached answers kept (per process in memory; per key prefix in Redis)"
    )
    cache_key_prefix: str = Field(default="fedcd:cache:", min_length=1, description="Redis key prefix of the cache")
    cache_kinds: list[EntityKind] = Field(
        default=["openai", "anthropic", "groq", "openai_compatible", "llamacpp", "simulated"],
        description="entity kinds whose answers are cached; local_fed is not by default (its models are replaced "
        "while the server runs, and it is free and fast)",
    )
    # Metrics (README "Metrics").
    metrics_token: SecretStr | None = Field(
        default=None, description="when set, GET /metrics needs 'Authorization: Bearer <token>'; none: public"
    )
    prometheus_multiproc_dir: Path | None = Field(
        default=None,
        validation_alias=AliasChoices("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"),
        description="prometheus-client's multiprocess folder (several workers); read from PROMETHEUS_MULTIPROC_DIR, "
        "the variable the library itself reads",
    )
    # Rate limits (README "Rate limits"): a token bucket per tenant, shared through Redis when redis_url is set.
    rate_limit: str = Field(
        default="100/second burst 1000",
        description="each tenant's request rate: <count>/<second|minute|hour|day> [burst <n>] (burst default: count), "
        "or off; over it: 429 with Retry-After. /healthz and /metrics are never limited",
    )
    rate_limit_tenants: dict[str, str] = Field(
        default_factory=dict, description="tenant -> its own rate (same syntax, off allowed), e.g. {\"big\": \"500/second\"}"
    )
    rate_limit_key_prefix: str = Field(default="fedcd:ratelimit:", min_length=1, description="Redis key prefix")
    # Webhooks (README "Webhooks"): set by the operator only, never through the API (the gateway posts where told).
    webhooks: dict[str, WebhookTarget] = Field(
        default_factory=dict, description="tenant (or * for every tenant without its own) -> {url, secret}: a signed "
        "POST when one of its jobs finishes",
    )
    webhook_attempts: int = Field(default=5, ge=1, le=20, description="tries of one webhook event, the first included")
    webhook_backoff_s: float = Field(
        default=1.0, gt=0, description="seconds before the first retry of a failed webhook; doubled each time (max 300)"
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, description="seconds one webhook POST may take")
    log_level: str = "INFO"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config = os.environ.get("FEDCD_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config:
            if not Path(config).is_file():
                raise FileNotFoundError(f"FEDCD_CONFIG points to {config}, which does not exist")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config))
        return tuple(sources)

    @field_validator("rate_limit")
    @classmethod
    def _rate_is_readable(cls, value: str) -> str:
        parse_rate(value)  # a typo fails at start-up, not at the first request
        return value

    @field_validator("rate_limit_tenants")
    @classmethod
    def _tenant_rates_are_readable(cls, value: dict[str, str]) -> dict[str, str]:
        for rate in value.values():
            parse_rate(rate)
        return value

    @model_validator(mode="after")
    def _auth_needs_loopback(self) -> Settings:
        if self.auth == "disabled" and not is_loopback(self.host):
            raise ValueError(
                f"FEDCD_AUTH=disabled is allowed only with a loopback bind (127.0.0.1, ::1, localhost), not {self.host!r}"
            )
        return self

    @model_validator(mode="after")
    def _diagnoses_outlive_the_repeat_window(self) -> Settings:
        # The repeat rule answers from the stored diagnosis: purging it sooner would make a repeat a fresh, paid query.
        days = self.retention_diagnoses_days
        if days is not None and days * 86400 < self.privacy_repeat_window_s:
            raise ValueError(f"retention_diagnoses_days ({days:g} days) is shorter than privacy_repeat_window_s "
                             f"({self.privacy_repeat_window_s:g} s): a repeat must find its stored diagnosis")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.state_dir / 'fedcd.db'}"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def registry_dir(self) -> Path:
        return self.model_registry_dir or (self.state_dir / "models")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def entity_specs(self) -> list[EntitySpec]:
        """The federation's members: what the gateway builds, ``/v1/entities`` lists, the privacy budget counts and
        each diagnosis reserves ε for. Declared entities (``enabled`` ones whose key is there), or the default
        federation: the embedded LLMs and hosted ones with keys; either way ``local-fed`` whenever ``local_fed`` is
        on, unless an entity of kind ``local_fed`` is declared (then the declaration decides). ``local-fed`` holds
        one model per Q-matrix and reads the registry on every request, so a model published while the gateway
        runs is served at once (``providers.local_fed``). Declared entities left out: :attr:`dropped_entities`."""
        return self._entity_plan()[0]

    @property
    def dropped_entities(self) -> list[DroppedEntity]:
        """Declared entities left out of :attr:`entity_specs`, with why: disabled (``enabled: false``), or their
        key variable (``api_key_env``) unset or empty with no ``api_key`` (warned about once per process)."""
        return self._entity_plan()[1]

    def _entity_plan(self) -> tuple[list[EntitySpec], list[DroppedEntity]]:
        if self.entities is None:
            specs = default_entity_specs()  # hosted defaults join only with their key: nothing to drop or warn
            if self.local_fed:
                specs.append(self._default_local_fed())
            return specs, []
        declared = list(self.entities)
        if self.local_fed and not any(s.kind == "local_fed" for s in declared):
            declared.append(self._default_local_fed())
        usable: list[EntitySpec] = []
        dropped: list[DroppedEntity] = []
        for spec in declared:
            if not spec.enabled:
                dropped.append(DroppedEntity(spec.name, spec.kind, "disabled in its declaration (enabled: false)"))
            elif (missing := _missing_key_env(spec)) is not None:
                dropped.append(DroppedEntity(
                    spec.name, spec.kind, f"its API key variable {missing} is not set", missing_env=missing,
                ))
                if (spec.name, missing) not in _WARNED_MISSING_KEYS:
                    _WARNED_MISSING_KEYS.add((spec.name, missing))
                    log.warning("entity %r dropped: its API key variable %s is not set (api_key_env); it is not "
                                "asked, listed or counted in any privacy budget", spec.name, missing)
            else:
                usable.append(spec)
        return usable, dropped

    def _default_local_fed(self) -> EntitySpec:
        return EntitySpec(
            name=LOCAL_FED_NAME, kind="local_fed", model="federated-cdm", model_path=str(self.registry_dir),
            concurrency=64, temperature=None, structured_output="none",
        )

    @model_validator(mode="after")
    def _local_fed_name_is_free(self) -> Settings:
        declared = self.entities or []
        if (self.local_fed and not any(s.kind == "local_fed" for s in declared)
                and any(s.name == LOCAL_FED_NAME for s in declared)):
            raise ValueError(
                f"entity name {LOCAL_FED_NAME!r} is the federated-trained model's, kept with declared entities: "
                "declare it with kind local_fed, rename the entity, or set FEDCD_LOCAL_FED=false"
            )
        return self


def _missing_key_env(spec: EntitySpec) -> str | None:
    """The key variable ``spec`` names (``api_key_env``) when it is unset or empty and no ``api_key`` is given."""
    if spec.api_key_env and spec.resolved_api_key() is None:
        return spec.api_key_env
    return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@lru_cache
def get_settings() -> Settings:
    return Settings()
