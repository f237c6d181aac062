"""Dependencies, each declared once as an ``Annotated`` alias and used as a type (all async: none waits
for a threadpool slot).

Every route but ``/healthz`` and ``/metrics`` depends on :data:`PrincipalDep` (any valid key) or
:data:`AdminDep` (an admin key): a missing or bad key is 401 with ``WWW-Authenticate:
Bearer``, a client key on an admin route 403, a tenant over its request rate 429. ``/metrics`` takes no API key (its counts span every
tenant, so no tenant's key may read them): it is public, or needs ``FEDCD_METRICS_TOKEN``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
from typing import Annotated, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.dependencies.utils import get_flat_dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import sessionmaker

from app.auth import KeyStore, Principal
from app.errors import InputError
from app.federation import Federation
from app.gateway import Gateway
from app.metrics import count_rate_limited
from app.ratelimit import RateLimited
from app.services.budgets import BudgetService
from app.services.calibration import CalibrationService
from app.services.cohort import CohortService
from app.services.training import TrainingService
from app.services.diagnosis import DiagnosisService
from app.services.qmatrices import QMatrixService
from app.jobs import JobQueries
from app.services.next_items import NextItemsService
from app.services.students import StudentDataService
from app.settings import Settings
from app.storage import UsageStore
from app.storage.generations import read_generations
from app.storage.retention import RetentionStore
from privacy import PrivacyLedger

__all__ = [
    "app_gateway",
    "gateway_of",
    "reject_unknown_query",
    "AdminDep",
    "BudgetServiceDep",
    "CalibrationServiceDep",
    "CohortServiceDep",
    "TrainingServiceDep",
    "DiagnosisServiceDep",
    "FederationDep",
    "GatewayDep",
    "JobQueriesDep",
    "KeyStoreDep",
    "LedgerDep",
    "MetricsAccessDep",
    "PrincipalDep",
    "NextItemsServiceDep",
    "QMatrixServiceDep",
    "RetentionStoreDep",
    "SessionsDep",
    "SettingsDep",
    "StudentDataDep",
    "UsageStoreDep",
]

T = TypeVar("T")
AUTH_DISABLED = Principal(tenant="dev", role="admin", key_id="auth-disabled")
_bearer = HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer fcd_...`")


def app_gateway(app: FastAPI) -> Gateway:
    """The app's gateway: the one thing ``app.main`` keeps on ``app.state``; every dependency reads through it."""
    return app.state.gateway


def gateway_of(request: Request) -> Gateway:
    return app_gateway(request.app)


def _started(service: T | None) -> T:
    """A service the gateway builds on start-up (its lifespan runs before any request)."""
    assert service is not None, "the gateway has not started"
    return service


async def _gateway(request: Request) -> Gateway:
    return gateway_of(request)


async def _settings(request: Request) -> Settings:
    return gateway_of(request).settings


async def _federation(request: Request) -> Federation:
    return _started(gateway_of(request).federation)


async def _keys(request: Request) -> KeyStore:
    return gateway_of(request).keys


async def _usage(request: Request) -> UsageStore:
    return gateway_of(request).usage


async def _ledger(request: Request) -> PrivacyLedger | None:
    return gateway_of(request).ledger


async def _diagnosis(request: Request) -> DiagnosisService:
    return _started(gateway_of(request).diagnosis)


async def _calibration_service(request: Request) -> CalibrationService:
    return _started(gateway_of(request).calibration)


async def _training_service(request: Request) -> TrainingService:
    return _started(gateway_of(request).training)


async def _cohort(request: Request) -> CohortService:
    return _started(gateway_of(request).cohort)


async def _budgets(request: Request) -> BudgetService:
    return gateway_of(request).budgets


async def _qmatrix_service(request: Request) -> QMatrixService:
    return _started(gateway_of(request).qmatrix_service)


async def _job_queries(request: Request) -> JobQueries:
    return gateway_of(request).job_queries


async def _next_items(request: Request) -> NextItemsService:
    return _started(gateway_of(request).next_items)


async def _students(request: Request) -> StudentDataService:
    return gateway_of(request).students


async def _retention(request: Request) -> RetentionStore:
    return gateway_of(request).retention


async def _sessions(request: Request) -> sessionmaker:
    return gateway_of(request).database.sessions


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": "Bearer"})


async def _principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    gateway = gateway_of(request)
    if gateway.settings.auth == "disabled":
        principal = AUTH_DISABLED
    else:
        if credentials is None:
            raise _unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        # One worker-thread hop reads the key and its tenant's configuration generations: every service that reads
        # the tenant's configuration reads it as of these (app.services.planning.read_configuration), with no hop
        # of its own when it is in memory.
        found = await asyncio.to_thread(
            gateway.keys.authenticate, credentials.credentials, generations=read_generations
        )
        if found is None:
            raise _unauthorized("invalid, expired or revoked API key")
        principal = found
    request.state.principal = principal  # for the access log
    # After authentication (no tenant is known before: an unauthenticated request is a 401, never a 429), and
    # before any work: a tenant over its rate costs the others nothing but this check (README "Rate limits").
    try:
        await gateway.rate_limiter.check(principal.tenant)
    except RateLimited:
        count_rate_limited(principal.tenant)
        raise
    return principal


async def _admin(principal: Annotated[Principal, Depends(_principal)]) -> Principal:
    if not principal.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="this needs an admin key of the tenant")
    return principal


async def _metrics_access(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    token = gateway_of(request).settings.metrics_token
    if token is None:
        # Secure by default: the series name tenants and entities, so without a token only this machine may read
        # them (a local Prometheus or a curl on the host).
        if not _from_loopback(request):
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail=(
                "/metrics answers only loopback clients while FEDCD_METRICS_TOKEN is unset: set it and scrape with "
                "'Authorization: Bearer <FEDCD_METRICS_TOKEN>'"))
        return
    given = credentials.credentials if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), token.get_secret_value().encode()):
        raise _unauthorized("/metrics needs 'Authorization: Bearer <FEDCD_METRICS_TOKEN>'")


# Any header a proxy or load balancer adds to what it forwards. A proxy that adds none (nginx's bare proxy_pass, a
# TCP-mode HAProxy) cannot be told from a local client: docs/operations.md says to set FEDCD_METRICS_TOKEN there.
_PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip", "via")


def _from_loopback(request: Request) -> bool:
    """Whether the request came from this machine itself. A request a proxy forwarded (a header naming its first
    client) is not, even when the proxy connects from 127.0.0.1: the one it forwards for may be anyone."""
    host = request.client.host if request.client is not None else ""
    if any(name in request.headers for name in _PROXY_HEADERS):
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # no address (a Unix socket, a test client's name): not known to be this machine
        return False
    # a dual-stack listener sees a local IPv4 client as ::ffff:127.0.0.1, which is_loopback does not count
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


_QUERY_NAMES: dict[int, frozenset[str]] = {}


async def reject_unknown_query(request: Request) -> None:
    """422 for a query parameter the route does not declare (a typo must not be silently ignored)."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        names = _QUERY_NAMES[id(route)] = frozenset(p.alias for p in get_flat_dependant(route.dependant).query_params)
    unknown = sorted(k for k in request.query_params if k not in names)
    if unknown:
        raise InputError(("query", unknown[0]), [f"unknown query parameter(s): {', '.join(unknown)}"])


GatewayDep = Annotated[Gateway, Depends(_gateway)]
SettingsDep = Annotated[Settings, Depends(_settings)]
FederationDep = Annotated[Federation, Depends(_federation)]
JobQueriesDep = Annotated[JobQueries, Depends(_job_queries)]
KeyStoreDep = Annotated[KeyStore, Depends(_keys)]
LedgerDep = Annotated[PrivacyLedger | None, Depends(_ledger)]
UsageStoreDep = Annotated[UsageStore, Depends(_usage)]
DiagnosisServiceDep = Annotated[DiagnosisService, Depends(_diagnosis)]
CohortServiceDep = Annotated[CohortService, Depends(_cohort)]
BudgetServiceDep = Annotated[BudgetService, Depends(_budgets)]
QMatrixServiceDep = Annotated[QMatrixService, Depends(_qmatrix_service)]
NextItemsServiceDep = Annotated[NextItemsService, Depends(_next_items)]
StudentDataDep = Annotated[StudentDataService, Depends(_students)]
RetentionStoreDep = Annotated[RetentionStore, Depends(_retention)]
SessionsDep = Annotated[sessionmaker, Depends(_sessions)]  # the database's sessions (/metrics counts jobs with them)
CalibrationServiceDep = Annotated[CalibrationService, Depends(_calibration_service)]
TrainingServiceDep = Annotated[TrainingService, Depends(_training_service)]
PrincipalDep = Annotated[Principal, Depends(_principal)]
AdminDep = Annotated[Principal, Depends(_admin)]
MetricsAccessDep = Depends(_metrics_access)
