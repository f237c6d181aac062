"""``GET /metrics``: Prometheus' text format. Public like ``/healthz`` unless ``FEDCD_METRICS_TOKEN``
is set (README "Metrics"); it carries counts by tenant and entity, never request content."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.deps import FederationDep, MetricsAccessDep, SessionsDep, SettingsDep
from app.metrics import CONTENT_TYPE, render_metrics

router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False, dependencies=[MetricsAccessDep])
async def read_metrics(settings: SettingsDep, federation: FederationDep, sessions: SessionsDep) -> Response:
    body = await render_metrics(settings, federation, sessions)
    return Response(body, media_type=CONTENT_TYPE)
