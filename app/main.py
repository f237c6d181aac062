"""Builds the FastAPI app; nothing else happens here (the running parts: ``app.gateway``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from app.deps import reject_unknown_query
from app.errors import install_error_handlers
from app.gateway import Gateway
from app.middleware import BodyLimit, ObservedRequests
from app.console import install_console
from app.openapi import install_docs, install_openapi
from app.routes import admin_keys, admin_policy, calibrate, cohort, diagnose, health, jobs, local_model, privacy, qmatrices
from app.routes import training as training_routes
from app.routes import admin_retention, students
from app.routes import next_items as next_items_routes
from app.routes import usage as usage_routes
from app.routes import entities as entities_routes
from app.routes import metrics as metrics_routes
from app.settings import Settings, get_settings
from app.version import VERSION
from providers import Entity

__all__ = ["app_from_environment", "create_app"]

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
    gateway = Gateway(settings, entities=entities)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        if on_ready is not None:
            on_ready()
        yield
        await gateway.stop()

    app = FastAPI(
        title="fedcd",
        version=VERSION,
        summary="Privacy-preserving multi-LLM federated cognitive diagnosis",
        lifespan=lifespan,
        dependencies=[Depends(reject_unknown_query)],
        docs_url=None,  # install_docs: the same pages, with their scripts served here instead of from CDNs
        redoc_url=None,
    )
    app.state.gateway = gateway  # the one thing on app.state: app.deps reads every store and service through it
    install_error_handlers(app)
    install_openapi(app, settings)
    install_docs(app)

    def body_limit(method: str, path: str) -> int:
        upload = (method == "POST" and path.rstrip("/") == "/v1/qmatrices") or (
            method == "PUT" and path.startswith("/v1/qmatrices/")
        ) or (method == "POST" and path.startswith("/v1/qmatrices/") and path.rstrip("/").endswith("/train"))
        return settings.max_qmatrix_body_bytes if upload else settings.max_body_bytes

    app.add_middleware(BodyLimit, limit_for=body_limit)
    app.add_middleware(ObservedRequests)  # the access log and the request metrics
    for router in (health.router, qmatrices.router, qmatrices.extractions, diagnose.router, calibrate.router,
                   cohort.router, privacy.router, local_model.router, entities_routes.router, admin_keys.router,
                   admin_policy.router, usage_routes.router, metrics_routes.router, jobs.router, training_routes.router,
                   students.router, admin_retention.router, next_items_routes.router):
        app.include_router(router)
    install_console(app)  # /console: the operator console (app/console), its assets included
    return app


def app_from_environment() -> FastAPI:
    """The app for ``uvicorn --factory`` worker processes (``fedcd serve --workers N``): settings from the environment."""
    return create_app(Settings())
