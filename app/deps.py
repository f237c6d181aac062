"""Dependencies, each declared once as an ``Annotated`` alias and used as a type."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from app.federation import Federation
from privacy import PrivacyLedger
from app.settings import Settings
from app.services.jobs import JobRunner
from app.storage import CalibrationStore, QMatrixStore

__all__ = [
    "CalibrationStoreDep",
    "FederationDep",
    "JobRunnerDep",
    "LedgerDep",
    "QMatrixStoreDep",
    "SettingsDep",
    "TenantDep",
]


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


def _ledger(request: Request) -> PrivacyLedger | None:
    return request.app.state.ledger


def _tenant(x_tenant_id: Annotated[str, Header(max_length=128, description="the calling platform")] = "default") -> str:
    return x_tenant_id.strip() or "default"


SettingsDep = Annotated[Settings, Depends(_settings)]
FederationDep = Annotated[Federation, Depends(_federation)]
QMatrixStoreDep = Annotated[QMatrixStore, Depends(_qmatrices)]
CalibrationStoreDep = Annotated[CalibrationStore, Depends(_calibrations)]
JobRunnerDep = Annotated[JobRunner, Depends(_jobs)]
LedgerDep = Annotated[PrivacyLedger | None, Depends(_ledger)]
TenantDep = Annotated[str, Depends(_tenant)]
