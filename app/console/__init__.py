"""The operator console at ``/console`` (README "Console"): server-rendered pages over the gateway's own data,
signed in with an admin API key, with its stylesheet and script served by the gateway (no CDN)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

__all__ = ["install_console"]


def install_console(app: FastAPI) -> None:
    """Mount the console's assets and pages on ``app`` (the assets first: the pages end with a catch-all 404)."""
    from app.console import admin, routes

    app.mount("/console/static", StaticFiles(directory=Path(__file__).parent / "static"), name="console-static")
    app.include_router(routes.router)
    app.include_router(admin.router)
