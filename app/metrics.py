"""Prometheus metrics of the gateway: what the HTTP layer and the diagnosis service count, and the
``/metrics`` page that adds what is read at scrape time (jobs by state from the database, each
entity's circuit state from the breakers' store). Entity calls are counted in
``providers.observed``, response cache lookups in ``providers.cache``.

Labels are route *templates* (never raw paths), methods, status codes, tenants and entity names:
a bounded set. No student id is ever a label.

**Several workers.** prometheus-client keeps each process's values in memory, so a scrape would see
one worker only. With ``PROMETHEUS_MULTIPROC_DIR`` set (to an empty folder, before the workers
start: the library reads it when it is imported) every worker writes its values to files there and
``/metrics`` sums them over all workers, those that died or were restarted included (every series
here is a counter or histogram, which stay right summed over dead workers; the gauges are read at
scrape time from the shared database and store, so they are right whichever worker answers). The
server that starts the workers empties the folder first (:func:`reset_multiprocess_dir`): files
left by an earlier run would be summed too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import sessionmaker

from app.db import JobRow
from app.federation import Federation
from app.schemas import DiagnoseResponse
from app.settings import Settings
from diagnosis import EntityOutcome
from providers.circuit import CircuitStoreUnavailable

__all__ = [
    "CONTENT_TYPE",
    "HTTP_REQUESTS",
    "count_charge",
    "count_diagnosis",
    "count_rate_limit_fail_open",
    "count_rate_limited",
    "count_refusal",
    "count_usage",
    "render_metrics",
    "reset_multiprocess_dir",
]

log = logging.getLogger("fedcd.metrics")

# The text format every Prometheus version reads (fedcd's metric names need nothing newer).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_JOB_STATES = ("queued", "running", "succeeded", "failed")
_CIRCUIT_STATES = ("closed", "open", "half_open")

HTTP_REQUESTS = Histogram(
    "fedcd_http_request_duration_seconds",
    "HTTP requests by method, route template and status code",
    ["method", "route", "status"],
    buckets=_HTTP_BUCKETS,
)
DIAGNOSES = Counter(
    "fedcd_diagnoses_total",
    "Diagnoses served (single and batch), by tenant; repeat=true: an identical request's stored answer, free",
    ["tenant", "repeat"],
)
EPSILON_CHARGED = Counter(
    "fedcd_privacy_epsilon_charged_total",
    "ε charged to students' privacy budgets, by tenant and source (diagnosis, cohort, calibration)",
    ["tenant", "source"],
)
BUDGET_REFUSALS = Counter(
    "fedcd_privacy_budget_refusals_total",
    "Requests refused (429) because a student's privacy budget for the period was spent, by tenant and source",
    ["tenant", "source"],
)
RATE_LIMITED = Counter(
    "fedcd_rate_limited_total",
    "Requests refused (429) because the tenant was over its request rate (README 'Rate limits'), by tenant",
    ["tenant"],
)
RATE_LIMIT_FAIL_OPEN = Counter(
    "fedcd_rate_limit_fail_open_total",
    "Requests let through unchecked because the rate limits' Redis could not be reached (fail-open), by tenant",
    ["tenant"],
)
BUDGET_WARNINGS = Counter(
    "fedcd_privacy_budget_warnings_total",
    "Diagnoses whose response carried budget_warning (the student is near the cap), by tenant",
    ["tenant"],
)
CALIBRATION_MISMATCHES = Counter(
    "fedcd_calibration_mismatch_total",
    "Diagnoses served at a noise level other than the one their calibration was fitted at, by tenant",
    ["tenant"],
)
ENTITY_TOKENS = Counter(
    "fedcd_entity_tokens_total",
    "Tokens entities' providers reported (simulated entities: an estimate), by tenant, entity and kind "
    "(prompt, completion)",
    ["tenant", "entity", "kind"],
)
ENTITY_COST = Counter(
    "fedcd_entity_cost_usd_total", "US dollars of entity answers at the configured prices, by tenant and entity",
    ["tenant", "entity"],
)


ChargeSource = Literal["diagnosis", "cohort", "calibration"]


def count_charge(tenant: str, source: ChargeSource, epsilon: float) -> None:
    """ε settled on students' ledgers (after the release: a refunded charge is never counted)."""
    if epsilon > 0:
        EPSILON_CHARGED.labels(tenant, source).inc(epsilon)


def count_refusal(tenant: str, source: ChargeSource) -> None:
    """A request refused with 429: a student's budget was spent."""
    BUDGET_REFUSALS.labels(tenant, source).inc()


def count_rate_limited(tenant: str) -> None:
    """A request refused with 429: the tenant was over its request rate (not a privacy budget)."""
    RATE_LIMITED.labels(tenant).inc()


def count_rate_limit_fail_open(tenant: str) -> None:
    """A request let through without a rate check: the shared bucket's Redis did not answer."""
    RATE_LIMIT_FAIL_OPEN.labels(tenant).inc()


def count_diagnosis(tenant: str, response: DiagnoseResponse) -> None:
    """Everything one served diagnosis counts for (called by the diagnosis service)."""
    budget = response.budget
    DIAGNOSES.labels(tenant, "true" if budget is not None and budget.repeat else "false").inc()
    if budget is not None:
        count_charge(tenant, "diagnosis", budget.charged_epsilon)
        if budget.budget_warning is not None:
            BUDGET_WARNINGS.labels(tenant).inc()
    if response.calibration_mismatch:
        CALIBRATION_MISMATCHES.labels(tenant).inc()


def count_usage(tenant: str, outcomes: Sequence[EntityOutcome]) -> None:
    """Tokens and dollars of one diagnosis's entity answers (cache hits and failures count 0)."""
    for outcome in outcomes:
        if outcome.prompt_tokens:
            ENTITY_TOKENS.labels(tenant, outcome.name, "prompt").inc(outcome.prompt_tokens)
        if outcome.completion_tokens:
            ENTITY_TOKENS.labels(tenant, outcome.name, "completion").inc(outcome.completion_tokens)
        if outcome.cost_usd:
            ENTITY_COST.labels(tenant, outcome.name).inc(outcome.cost_usd)


class _Snapshot(Collector):
    """Metric families read just before this scrape."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _job_counts(sessions: sessionmaker) -> dict[tuple[str, str], int]:
    with sessions() as session:
        rows = session.execute(select(JobRow.kind, JobRow.status, func.count()).group_by(JobRow.kind, JobRow.status))
        return {(kind, status): count for kind, status, count in rows}


def _job_ages(sessions: sessionmaker, now: float) -> list[GaugeMetricFamily]:
    """What a stuck job looks like from outside: the oldest queued job's wait (no worker claims it) and the running
    jobs' heartbeat age (their worker stopped and nobody took them over), by kind — the alert rules read these."""
    waiting = GaugeMetricFamily("fedcd_job_oldest_queued_seconds",
                                "Seconds the oldest queued job of each kind has waited to be claimed", labels=["kind"])
    silent = GaugeMetricFamily("fedcd_job_heartbeat_age_seconds",
                               "Seconds since the least recent heartbeat of a running job, by kind", labels=["kind"])
    with sessions() as session:
        queued = session.execute(select(JobRow.kind, func.min(JobRow.created_at))
                                 .where(JobRow.status == "queued").group_by(JobRow.kind))
        running = session.execute(select(JobRow.kind, func.min(JobRow.heartbeat_at))
                                  .where(JobRow.status == "running").group_by(JobRow.kind))
        for kind, created in queued:
            waiting.add_metric([kind], max(0.0, now - _epoch(created)))
        for kind, beat in running:
            if beat is not None:
                silent.add_metric([kind], max(0.0, now - float(beat)))
    return [waiting, silent]


def _epoch(iso: str) -> float:
    stamp = datetime.fromisoformat(iso)
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def _jobs_family(counts: dict[tuple[str, str], int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily("fedcd_jobs", "Jobs by kind and state, read from the database", labels=["kind", "state"])
    for kind in sorted({kind for kind, _ in counts}):
        for state in sorted(set(_JOB_STATES) | {s for k, s in counts if k == kind}):
            family.add_metric([kind, state], counts.get((kind, state), 0))
    return family


async def _circuit_families(federation: Federation) -> list[GaugeMetricFamily]:
    up = GaugeMetricFamily("fedcd_circuit_store_up", "1 when the circuit breakers' store answered this scrape")
    state = GaugeMetricFamily(
        "fedcd_entity_circuit_state", "1 for each entity's current circuit state (closed, open, half_open)",
        labels=["entity", "state"],
    )
    try:
        states = await federation.circuit_states()
    except CircuitStoreUnavailable as exc:
        log.warning("metrics: circuit states unavailable: %s", exc)
        up.add_metric([], 0)
        return [up]
    for entity, current in states.items():
        for name in _CIRCUIT_STATES:
            state.add_metric([entity, name], 1 if name == current else 0)
    up.add_metric([], 1)
    return [up, state]


def _counted(multiproc_dir: Path | None) -> CollectorRegistry:
    """This process's registry, or — with several workers — one summing every worker's files."""
    if multiproc_dir is None:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(multiproc_dir))
    return registry


async def render_metrics(settings: Settings, federation: Federation, sessions: sessionmaker) -> bytes:
    """The text exposition format of every fedcd metric."""
    counts, ages, circuits = await asyncio.gather(
        asyncio.to_thread(_job_counts, sessions), asyncio.to_thread(_job_ages, sessions, time.time()),
        _circuit_families(federation))
    snapshot = CollectorRegistry(auto_describe=False)
    snapshot.register(_Snapshot([_jobs_family(counts), *ages, *circuits]))
    counted = await asyncio.to_thread(generate_latest, _counted(settings.prometheus_multiproc_dir))
    return counted + generate_latest(snapshot)


def reset_multiprocess_dir(directory: Path) -> Path:
    """Create ``directory`` or empty it of an earlier run's metric files; call before starting workers."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    return directory
