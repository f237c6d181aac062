"""``GET /metrics``: Prometheus' text format. With ``FEDCD_METRICS_TOKEN`` it needs that bearer token; without it
only loopback clients are answered, 403 otherwise (README "Metrics"). It carries counts by tenant and entity, never
request content — but tenant names are not for everyone to read."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.deps import FederationDep, MetricsAccessDep, SessionsDep, SettingsDep
from app.metrics import CONTENT_TYPE, render_metrics

router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False, dependencies=[MetricsAccessDep])
async def read_metrics(settings: SettingsDep, federation: FederationDep, sessions: SessionsDep) -> Response:
    body = await render_metrics(settings, federation, sessions)
    return Response(body, media_type=CONTENT_TYPE)
