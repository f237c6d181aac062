"""The running gateway in one object: its stores, ledger, federation, jobs and services, and how one worker
process starts and stops.

Start-up work that must happen once across all workers (the dev key, settling the pending charges of
dead workers, training the default model, submitting the default calibration) runs under the
database-wide start-up lock (``app.locks``); every worker then registers, heartbeats and claims jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from app.auth import KeyStore
from app.bootstrap import ensure_dev_key, train_default_model
from app.db import Database
from app.federation import Federation, circuit_breakers, response_cache
from app.jobs import JobQueries, JobRunner, JobTiming
from app.jobs.calibration import CalibrationJobHandler
from app.jobs.training import TrainingJobHandler
from app.locks import database_lock
from app.pseudonyms import Pseudonyms
from app.services.activity import TenantActivity
from app.services.budgets import BudgetService
from app.services.calibration import CalibrationService, start_default_calibration
from app.services.cohort import CohortLimits, CohortService
from app.services.console_sessions import ConsoleSessions
from app.services.diagnosis import BatchLimits, DiagnosisService
from app.services.forecasts import ForecastService
from app.services.next_items import NextItemsService
from app.services.planning import Planner
from app.services.qmatrices import QMatrixService
from app.services.retention import RetentionPurger
from app.services.students import StudentDataService
from app.services.validation import ValidationLoader
from app.services.training import TrainingService
from app.settings import Settings
from app.storage import (
    CalibrationStore,
    PolicyStore,
    QMatrixStore,
    TenantConfigCache,
    UsageStore,
    budget_rule,
    default_policy,
)
from app.storage.retention import RetentionStore
from app.ratelimit import MemoryBuckets, RateLimiter, RedisBuckets, parse_rate
from app.webhooks import WebhookSender
from app.workers import WorkerRegistry
from privacy import AsyncLedger, PrivacyLedger
from providers import Entity
from providers.item_response import ItemResponder
from qmatrix import example_qmatrix

__all__ = ["Gateway"]

log = logging.getLogger("fedcd")


class Gateway:
    """Built when the app is created (no I/O beyond opening the database); ``start``/``stop`` in its lifespan."""

    def __init__(self, settings: Settings, *, entities: Mapping[str, Entity] | None = None) -> None:
        self.settings, self._entities = settings, entities
        # Student ids are stored as keyed hashes under the server secret (app.pseudonyms); the migration that
        # converts ids stored by an earlier version needs it too.
        self.pseudonyms = Pseudonyms.from_settings(settings)
        self.database = Database(settings.db_url, upgrade=settings.db_upgrade_on_start,
                                 server_secret=self.pseudonyms.secret)
        sessions = self.database.sessions
        self.qmatrices = QMatrixStore(sessions)
        self.qmatrices.register_builtin(example_qmatrix())
        self.calibrations = CalibrationStore(sessions)
        self.keys = KeyStore(sessions)
        self.policies = PolicyStore(sessions, settings)
        self.usage = UsageStore(sessions)
        # The worker's own heartbeat: its own connection, like the job runner's claims and heartbeats.
        self.workers = WorkerRegistry(self.database.control_sessions, stale_s=settings.worker_stale_s)
        self.ledger = (
            PrivacyLedger(
                sessions, rule=budget_rule(default_policy(settings)), accountant=settings.privacy_accountant,
                repeat_window_s=settings.privacy_repeat_window_s, owner=self.workers.id,
            )
            if settings.privacy_cap_epsilon is not None
            else None
        )
        self.async_ledger = AsyncLedger(self.ledger) if self.ledger is not None else None  # what services await
        # What a diagnosis reads of its tenant's configuration, cached per worker (app.storage.tenant_config).
        self.tenant_config = TenantConfigCache(
            qmatrices=self.qmatrices, calibrations=self.calibrations, policies=self.policies
        )
        self.budgets = BudgetService(ledger=self.async_ledger, config=self.tenant_config, pseudonyms=self.pseudonyms)
        self.webhooks = WebhookSender.from_settings(settings)
        self.jobs = JobRunner(
            sessions, worker_id=self.workers.id, live_workers=self.workers.live_ids,
            timing=JobTiming.from_settings(settings),
            control_sessions=self.database.control_sessions,
            on_finish=self.webhooks.job_finished if self.webhooks.enabled else None,
        )
        self.job_queries = JobQueries(self.jobs)
        self.activity = TenantActivity(sessions)  # what the console's overview and entity pages count
        self.console_sessions = ConsoleSessions(sessions, settings)
        self.rate_limiter = RateLimiter(
            parse_rate(settings.rate_limit),
            RedisBuckets(settings.redis_url.get_secret_value(), prefix=settings.rate_limit_key_prefix)
            if settings.redis_url is not None else MemoryBuckets(),
            tenants={tenant: parse_rate(rate) for tenant, rate in settings.rate_limit_tenants.items()},
        )
        self.retention = RetentionStore(sessions, settings)
        uploads = settings.state_dir / "uploads"  # TrainingService.uploads
        self.students = StudentDataService(
            sessions=sessions, ledger=self.ledger, pseudonyms=self.pseudonyms, policies=self.policies,
            retention=self.retention, usage=self.usage, uploads=uploads,
        )
        self.purger = RetentionPurger(sessions=sessions, ledger=self.ledger, retention=self.retention, uploads=uploads)
        self.federation: Federation | None = None
        self.diagnosis: DiagnosisService | None = None
        self.cohort: CohortService | None = None
        self.qmatrix_service: QMatrixService | None = None
        self.calibration: CalibrationService | None = None
        self.training: TrainingService | None = None
        self.next_items: NextItemsService | None = None
        self._maintenance: asyncio.Task[None] | None = None

    async def start(self) -> None:
        settings = self.settings
        if settings.auth == "disabled":
            log.warning("AUTHENTICATION IS DISABLED (FEDCD_AUTH=disabled): every caller acts as admin of tenant 'dev'; "
                        "allowed only on a loopback bind, for tests and local demos")
        await asyncio.to_thread(self.workers.register)
        async with self._startup_lock():
            if settings.auth == "enabled":
                await asyncio.to_thread(ensure_dev_key, self.keys, settings.state_dir)
            await self._settle_orphans()
            if self._entities is None and settings.train_default_model and any(
                s.kind == "local_fed" and s.model_path == str(settings.registry_dir) for s in settings.entity_specs
            ):  # local-fed serving the default registry: a declared disabled one, or one elsewhere, needs none
                await train_default_model(settings)
        self.federation = Federation(
            settings.entity_specs, entities=self._entities, seed=settings.noise_seed, circuits=circuit_breakers(settings),
            cache=response_cache(settings),
        )
        log.info("federation: %s", ", ".join(self.federation.names) or "(no entities)")
        self.students.cache = self.federation.cache.store if self.federation.cache is not None else None
        self.calibration = CalibrationService(
            federation=self.federation, qmatrices=self.qmatrices, calibrations=self.calibrations, jobs=self.jobs,
            job_queries=self.job_queries, settings=settings, usage=self.usage, pseudonyms=self.pseudonyms,
        )
        local_fed = self.federation.adapter("local-fed") if "local-fed" in self.federation.names else None
        forecasts = ForecastService(local_fed if isinstance(local_fed, ItemResponder) else None)
        self.jobs.register("calibrate", CalibrationJobHandler(
            federation=self.federation, validation=ValidationLoader(qmatrices=self.qmatrices, settings=settings),
            calibrations=self.calibrations, policies=self.policies, settings=settings, usage=self.usage,
            ledger=self.async_ledger, forecasts=forecasts,
        ).run)
        self.training = TrainingService(
            qmatrices=self.qmatrices, jobs=self.jobs, calibration=self.calibration, settings=settings,
            pseudonyms=self.pseudonyms,
        )
        training_job = TrainingJobHandler(qmatrices=self.qmatrices, calibration=self.calibration, settings=settings)
        self.jobs.register("train", training_job.run, on_abandoned=training_job.discard)
        planner = Planner(
            federation=self.federation, config=self.tenant_config, settings=settings, pseudonyms=self.pseudonyms
        )
        self.diagnosis = DiagnosisService(
            planner=planner, ledger=self.async_ledger, usage=self.usage, batch=BatchLimits.from_settings(settings),
            forecasts=forecasts,
        )
        self.cohort = CohortService(
            planner=planner, ledger=self.async_ledger, usage=self.usage, limits=CohortLimits.from_settings(settings)
        )
        # The same Q-matrix resolution and serving model as /v1/diagnose's forecasts.
        self.next_items = NextItemsService(
            planner=planner, local_fed=forecasts.local_fed if hasattr(forecasts.local_fed, "serving_model") else None,
            settings=settings,
        )
        self.qmatrix_service = QMatrixService(store=self.qmatrices, pipeline=self.federation.pipeline, usage=self.usage)
        if settings.preload_models:
            await self.federation.preload()
        if settings.default_calibration:
            async with self._startup_lock():
                await asyncio.to_thread(
                    start_default_calibration, self.jobs, self.calibrations, self.policies, settings, self.federation
                )
        self.jobs.start()
        self._maintenance = asyncio.create_task(self._maintain(), name=f"maintenance-{self.workers.id}")

    async def stop(self) -> None:
        """In order: stop maintenance; cancel running jobs (their claims released, their model calls aborted);
        write the buffered usage; only then close the entities — an embedded model is freed once its thread
        is idle (``providers.llamacpp_embedded``); freeing it under a running call crashed the server."""
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
        await self.jobs.aclose()
        await self.webhooks.aclose()  # a few seconds for deliveries in flight (app.webhooks)
        with contextlib.suppress(Exception):
            await self.rate_limiter.aclose()
        try:  # the usage rows still buffered (app.storage.usage)
            await asyncio.to_thread(self.usage.flush)
        except Exception:
            log.exception("usage records buffered at shutdown could not be written")
        if self.federation is not None:
            await self.federation.aclose()
        with contextlib.suppress(Exception):  # a clean shutdown should not fail on a lost database
            await asyncio.to_thread(self.workers.deregister)
        if self.ledger is not None:
            self.ledger.close()
        self.database.close()

    @contextlib.asynccontextmanager
    async def _startup_lock(self):  # type: ignore[no-untyped-def]
        """The database-wide lock, taken in a worker thread (it may wait for another worker's start-up)."""
        lock = database_lock(self.database.engine, "startup")
        await asyncio.to_thread(lock.__enter__)
        try:
            yield
        finally:
            await asyncio.to_thread(lock.__exit__, None, None, None)

    async def _settle_orphans(self) -> None:
        if self.ledger is None:
            return
        settled = await asyncio.to_thread(self.ledger.settle_orphans, live_owners=self.workers.live_ids())
        if settled:
            log.warning("refunded %d privacy charges left pending by a worker that stopped before answering", settled)

    async def _maintain(self) -> None:
        """Heartbeat this worker; now and then, refund what dead workers left pending and purge what the tenants'
        retention policies say has expired (app.services.retention)."""
        # Its own thread: the shared pool may be full of slow work, and a late heartbeat reads as a dead worker.
        beat = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"heartbeat-{self.workers.id}")
        beats = 0
        loop = asyncio.get_running_loop()
        next_purge = loop.time()  # the first heartbeat purges what expired while the server was down
        try:
            while True:
                await asyncio.sleep(self.settings.worker_heartbeat_s)
                try:
                    await asyncio.get_running_loop().run_in_executor(beat, self.workers.heartbeat)
                    await asyncio.to_thread(self.usage.flush)
                    beats += 1
                    if beats % 12 == 0:
                        await self._settle_orphans()
                    if loop.time() >= next_purge:
                        next_purge = loop.time() + self.settings.retention_sweep_s
                        await asyncio.to_thread(self.purger.purge)
                except Exception:
                    log.exception("worker maintenance: will retry")
        finally:
            beat.shutdown(wait=False)
