"""Builds the FastAPI app; nothing else happens here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from app.auth import KeyStore
from app.bootstrap import ensure_dev_key, train_default_model
from app.db import Database
from app.deps import reject_unknown_query
from app.errors import install_error_handlers
from app.federation import Federation, circuit_breakers
from app.middleware import AccessLog, BodyLimit, RequestMetrics
from app.openapi import install_openapi
from app.redaction import Redactor
from app.routes import admin_keys, admin_policy, calibrate, cohort, diagnose, health, local_model, privacy, qmatrices
from app.routes import metrics as metrics_routes
from app.routes import entities as entities_routes
from app.services.calibration import CalibrationService, start_default_calibration
from app.services.diagnosis import DiagnosisService
from app.services.jobs import JobRunner
from app.settings import Settings, get_settings
from app.storage import CalibrationStore, PolicyStore, QMatrixStore, budget_rule, default_policy
from app.version import VERSION
from privacy import PrivacyLedger
from providers import Entity
from qmatrix import example_qmatrix

__all__ = ["create_app"]

log = logging.getLogger("fedcd")


def create_app(
    settings: Settings | None = None,
    *,
    entities: Mapping[str, Entity] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> FastAPI:
    """The gateway. ``entities`` replaces the configured federation (tests pass fakes here);
    ``on_ready`` runs once the federation is up (the CLI prints a curl example)."""
    settings = settings or get_settings()
    database = Database(settings.db_url, upgrade=settings.db_upgrade_on_start)
    qmatrix_store = QMatrixStore(database.sessions)
    qmatrix_store.register_builtin(example_qmatrix())
    calibrations = CalibrationStore(database.sessions)
    keys = KeyStore(database.sessions)
    policies = PolicyStore(database.sessions, settings)
    ledger = (
        PrivacyLedger(
            database.sessions,
            rule=budget_rule(default_policy(settings)),
            accountant=settings.privacy_accountant,
            repeat_window_s=settings.privacy_repeat_window_s,
        )
        if settings.privacy_cap_epsilon is not None
        else None
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.auth == "disabled":
            log.warning("AUTHENTICATION IS DISABLED (FEDCD_AUTH=disabled): every caller acts as admin of tenant 'dev'; "
                        "allowed only on a loopback bind, for tests and local demos")
        else:
            await asyncio.to_thread(ensure_dev_key, keys, settings.state_dir)
        if ledger is not None:
            settled = await asyncio.to_thread(ledger.settle_orphans, live_owners={ledger.owner})
            if settled:
                log.warning("refunded %d privacy charges left pending by a process that stopped before answering",
                            settled)
        if entities is None and settings.local_fed and settings.train_default_model:
            await train_default_model(settings)
        federation = Federation(
            settings.entity_specs, entities=entities, seed=settings.noise_seed, circuits=circuit_breakers(settings)
        )
        app.state.federation = federation
        log.info("federation: %s", ", ".join(federation.names) or "(no entities)")
        jobs = JobRunner(database.sessions)
        app.state.jobs = jobs
        app.state.calibration_service = CalibrationService(
            federation=federation, qmatrices=qmatrix_store, calibrations=calibrations, jobs=jobs, policies=policies,
            settings=settings, ledger=ledger,
        )
        app.state.diagnosis = DiagnosisService(
            federation=federation, qmatrices=qmatrix_store, calibrations=calibrations, policies=policies,
            settings=settings, ledger=ledger, redactor=Redactor.for_state_dir(settings.state_dir),
        )
        if settings.preload_models:
            await federation.preload()
        for job_id in jobs.resume_incomplete():
            log.info("resumed job %s left unfinished by the previous run", job_id)
        if settings.default_calibration:
            start_default_calibration(jobs, calibrations, settings, federation)
        if on_ready is not None:
            on_ready()
        yield
        await jobs.aclose()
        await federation.aclose()
        if ledger is not None:
            ledger.close()
        database.close()

    app = FastAPI(
        title="fedcd",
        version=VERSION,
        summary="Privacy-preserving multi-LLM federated cognitive diagnosis",
        lifespan=lifespan,
        dependencies=[Depends(reject_unknown_query)],
    )
    app.state.settings = settings
    app.state.database = database
    app.state.qmatrices = qmatrix_store
    app.state.calibrations = calibrations
    app.state.keys = keys
    app.state.policies = policies
    app.state.ledger = ledger
    install_error_handlers(app)
    install_openapi(app, settings)

    def body_limit(method: str, path: str) -> int:
        upload = (method == "POST" and path.rstrip("/") == "/v1/qmatrices") or (
            method == "PUT" and path.startswith("/v1/qmatrices/")
        )
        return settings.max_qmatrix_body_bytes if upload else settings.max_body_bytes

    app.add_middleware(BodyLimit, limit_for=body_limit)
    app.add_middleware(AccessLog)
    app.add_middleware(RequestMetrics)
    for router in (health.router, qmatrices.router, qmatrices.extractions, diagnose.router, calibrate.router, cohort.router, privacy.router,
                   local_model.router, entities_routes.router, admin_keys.router, admin_policy.router,
                   metrics_routes.router):
        app.include_router(router)
    return app
