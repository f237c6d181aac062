"""Builds the FastAPI app; nothing else happens here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.db import make_sessionmaker
from app.errors import install_error_handlers
from app.federation import Federation
from app.services.calibration import CalibrationService, start_default_calibration
from app.services.jobs import JobRunner
from app.routes import calibrate, cohort, diagnose, health, local_model, privacy, qmatrices
from app.routes import entities as entities_routes
from app.settings import Settings, get_settings
from app.storage import CalibrationStore, QMatrixStore
from app.version import VERSION
from privacy import PrivacyLedger
from providers import Entity
from qmatrix import example_qmatrix

__all__ = ["create_app", "train_default_model"]

log = logging.getLogger("fedcd")


async def train_default_model(settings: Settings) -> None:
    """First start: train the small default local-fed model on SIMULATED students if none is published."""
    import time

    from federated import default_model_if_missing

    start = time.perf_counter()
    log.info("checking the federated-trained model registry at %s", settings.registry_dir)
    version = await asyncio.to_thread(default_model_if_missing, settings.registry_dir, key_path=settings.model_signing_key)
    if version is not None:
        log.info("first start: trained and published the default local-fed model %s on SIMULATED students in %.1f s",
                 version, time.perf_counter() - start)


def create_app(
    settings: Settings | None = None,
    *,
    entities: Mapping[str, Entity] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> FastAPI:
    """The gateway. ``entities`` replaces the configured federation (tests pass fakes here);
    ``on_ready`` runs once the federation is up (the CLI prints a curl example)."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if entities is None and settings.local_fed and settings.train_default_model:
            await train_default_model(settings)
        federation = Federation(settings.entity_specs, entities=entities, seed=settings.noise_seed)
        app.state.federation = federation
        log.info("federation: %s", ", ".join(federation.names) or "(no entities)")
        jobs = JobRunner(app.state.sessions)
        app.state.jobs = jobs
        service = CalibrationService(
            federation=federation, qmatrices=app.state.qmatrices, calibrations=app.state.calibrations, settings=settings,
            ledger=app.state.ledger,
        )
        jobs.register("calibrate", service.run)
        if settings.preload_models:
            await federation.preload()
        for job_id in jobs.resume_incomplete():
            log.info("resumed job %s left unfinished by the previous run", job_id)
        if settings.default_calibration:
            start_default_calibration(jobs, app.state.calibrations, settings, federation)
        if on_ready is not None:
            on_ready()
        yield
        await jobs.aclose()
        await federation.aclose()
        if app.state.ledger is not None:
            app.state.ledger.close()

    app = FastAPI(
        title="fedcd",
        version=VERSION,
        summary="Privacy-preserving multi-LLM federated cognitive diagnosis",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.qmatrices = QMatrixStore(settings.state_dir)
    app.state.qmatrices.register_builtin(example_qmatrix())
    app.state.sessions = make_sessionmaker(settings.state_dir)
    app.state.calibrations = CalibrationStore(app.state.sessions)
    app.state.ledger = (
        PrivacyLedger(
            app.state.sessions,
            cap_epsilon=settings.privacy_cap_epsilon,
            cap_delta=settings.privacy_cap_delta,
            accountant=settings.privacy_accountant,
            repeat_window_s=settings.privacy_repeat_window_s,
        )
        if settings.privacy_cap_epsilon is not None
        else None
    )
    install_error_handlers(app)
    for router in (health.router, qmatrices.router, diagnose.router, calibrate.router, cohort.router, privacy.router, local_model.router,
                   entities_routes.router):
        app.include_router(router)
    return app
