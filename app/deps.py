"""Dependencies, each declared once as an ``Annotated`` alias and used as a type."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.federation import Federation
from app.settings import Settings
from app.services.jobs import JobRunner
from app.storage import CalibrationStore, QMatrixStore

__all__ = ["CalibrationStoreDep", "FederationDep", "JobRunnerDep", "QMatrixStoreDep", "SettingsDep"]


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _federation(request: Request) -> Federation:
    return request.app.state.federation


def _qmatrices(request: Request) -> QMatrixStore:
    return request.app.state.qmatrices


def _calibrations(request: Request) -> CalibrationStore:
    return request.app.state.calibrations


def _jobs(request: Request) -> JobRunner:
    return request.app.state.jobs


SettingsDep = Annotated[Settings, Depends(_settings)]
FederationDep = Annotated[Federation, Depends(_federation)]
QMatrixStoreDep = Annotated[QMatrixStore, Depends(_qmatrices)]
CalibrationStoreDep = Annotated[CalibrationStore, Depends(_calibrations)]
JobRunnerDep = Annotated[JobRunner, Depends(_jobs)]
