"""The OpenAPI document, made exact about what this server's settings allow.

FastAPI derives the schema from the pydantic models; the request limits are settings (README
"Limits"), so they are written into the schema here: ``maxItems`` on the lists they bound, and a
413 on every operation that takes a body. Clients and fuzzers then see the same bounds the server
enforces.

The docs pages (``/docs``: Swagger UI, ``/redoc``: ReDoc) load their scripts, stylesheet and icon
from the gateway itself (``/docs/assets/...``), not from public CDNs, so they work on a host with no
Internet access. The files come from the ``fastapi-offline`` package, which ships the Swagger UI and
ReDoc bundles; like FastAPI's own docs routes they need no API key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse

from app.schemas.common import identifier_pattern
from app.settings import Settings

__all__ = ["DOCS_ASSETS", "SchemaPattern", "install_docs", "install_openapi"]

DOCS_URL, REDOC_URL, OAUTH2_REDIRECT_URL = "/docs", "/redoc", "/docs/oauth2-redirect"
ASSETS_URL = "/docs/assets"
_ASSET_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
# name -> media type: the only files served (nothing else of the package's folder is reachable)
DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}


def _limits(settings: Settings) -> dict[tuple[str, str], int]:
    """(schema, property) -> maxItems."""
    return {
        ("DiagnoseRequest", "responses"): settings.max_responses_per_student,
        ("StudentIn", "responses"): settings.max_responses_per_student,
        ("CalibrationRecordIn", "responses"): settings.max_responses_per_student,
        ("BatchDiagnoseRequest", "students"): settings.max_batch_size,
        ("CalibrateRequest", "records"): settings.max_calibration_records,
        ("QMatrixCreate", "items"): settings.max_qmatrix_items,
        ("QMatrixCreate", "concepts"): settings.max_qmatrix_concepts,
    }


def _bound(schema: dict[str, Any], limit: int) -> None:
    """maxItems on an array schema, or on the array branch of an ``anyOf`` (optional lists)."""
    for branch in [schema, *schema.get("anyOf", [])]:
        if branch.get("type") == "array":
            branch["maxItems"] = min(limit, branch.get("maxItems", limit))


_RATE_LIMITED = "the tenant is over its request rate (body `type: rate_limit`; README \"Rate limits\")"
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying (at least 1)",
                                "schema": {"type": "integer", "minimum": 1}}}


def _document_429(operation: dict[str, Any]) -> None:
    """Every authenticated operation may answer 429 (the tenant's rate limit), and every 429 carries Retry-After."""
    responses = operation.setdefault("responses", {})
    if operation.get("security"):  # an API key is checked there, then the tenant's rate (app.deps)
        existing = responses.get("429")
        responses["429"] = (
            {"description": _RATE_LIMITED} if existing is None
            else {**existing, "description": f"{existing['description']} (body `type: privacy_budget`); or {_RATE_LIMITED}"}
        )
    if "429" in responses:
        responses["429"]["headers"] = _RETRY_AFTER


def _branches(schema: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The branches of ``schema`` (itself, or its ``anyOf`` members) of JSON type ``kind``."""
    return [b for b in [schema, *schema.get("anyOf", [])] if b.get("type") == kind]


def _state_checks_in_code(schemas: dict[str, Any], settings: Settings) -> None:
    """Rules the server checks in code, written into the schema so a schema-valid request is never refused for them."""
    response = schemas.get("Response", {}).get("properties", {})  # qmatrix.Response: the library's model
    if "item_id" in response:  # an Identifier (qmatrix.check_identifier)
        response["item_id"]["pattern"] = identifier_pattern()
    for branch in _branches(response.get("correct", {}), "number"):  # a score in [0, 1] (partial credit)
        branch.update(minimum=0.0, maximum=1.0)
    # Released diagnoses outlive the repeat window (app.storage.retention: days * 86400 >= the window).
    floor = settings.privacy_repeat_window_s / 86400
    while floor * 86400 < settings.privacy_repeat_window_s:
        floor = math.nextafter(floor, math.inf)
    days = schemas.get("RetentionPolicy", {}).get("properties", {}).get("diagnoses_days", {})
    for branch in _branches(days, "number"):
        if floor > 0:
            branch.pop("exclusiveMinimum", None)
            branch["minimum"] = floor
    unnoised = schemas.get("PrivacyPolicy", {}).get("properties", {}).get("allow_unnoised")
    if unnoised is not None and not settings.allow_unnoised:  # a policy may not allow it (app.storage.policies)
        unnoised["const"] = False


def install_openapi(app: FastAPI, settings: Settings) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        schemas = document.get("components", {}).get("schemas", {})
        _state_checks_in_code(schemas, settings)
        for (name, prop), limit in _limits(settings).items():
            target = schemas.get(name, {}).get("properties", {}).get(prop)
            if target is not None:
                _bound(target, limit)
        for path, item in document.get("paths", {}).items():
            for operation in item.values():
                if "requestBody" in operation:
                    limit = settings.max_qmatrix_body_bytes if path.startswith("/v1/qmatrices") else settings.max_body_bytes
                    operation.setdefault("responses", {}).setdefault(
                        "413", {"description": f"request body over {limit} bytes"}
                    )
                _document_429(operation)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def install_docs(app: FastAPI) -> None:
    """``/docs``, ``/docs/oauth2-redirect`` and ``/redoc`` as FastAPI makes them (create the app with
    ``docs_url=None, redoc_url=None``), their assets served from ``/docs/assets/``."""
    missing = [name for name in DOCS_ASSETS if not (_ASSET_DIR / name).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline lacks the docs assets {missing} in {_ASSET_DIR}: reinstall it")
    assert app.openapi_url is not None

    def url(request: Request, path: str) -> str:
        return request.scope.get("root_path", "").rstrip("/") + path

    async def swagger_ui_html(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=url(request, app.openapi_url or "/openapi.json"), title=f"{app.title} - Swagger UI",
            swagger_js_url=url(request, f"{ASSETS_URL}/swagger-ui-bundle.js"),
            swagger_css_url=url(request, f"{ASSETS_URL}/swagger-ui.css"),
            swagger_favicon_url=url(request, f"{ASSETS_URL}/favicon.png"),
            oauth2_redirect_url=url(request, OAUTH2_REDIRECT_URL), init_oauth=app.swagger_ui_init_oauth,
            # no validator badge: Swagger UI would send the document to validator.swagger.io
            swagger_ui_parameters={"validatorUrl": None, **(app.swagger_ui_parameters or {})},
        )

    async def swagger_ui_redirect(_: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc_html(request: Request) -> HTMLResponse:
        return get_redoc_html(
            openapi_url=url(request, app.openapi_url or "/openapi.json"), title=f"{app.title} - ReDoc",
            redoc_js_url=url(request, f"{ASSETS_URL}/redoc.standalone.js"),
            redoc_favicon_url=url(request, f"{ASSETS_URL}/favicon.png"), with_google_fonts=False,
        )

    async def docs_asset(request: Request) -> FileResponse:
        name = request.path_params["name"]
        if name not in DOCS_ASSETS:
            raise StarletteHTTPException(404, "Not Found")
        return FileResponse(_ASSET_DIR / name, media_type=DOCS_ASSETS[name],
                            headers={"Cache-Control": "public, max-age=86400"})

    app.add_route(DOCS_URL, swagger_ui_html, include_in_schema=False)
    app.add_route(OAUTH2_REDIRECT_URL, swagger_ui_redirect, include_in_schema=False)
    app.add_route(REDOC_URL, redoc_html, include_in_schema=False)
    app.add_route(ASSETS_URL + "/{name}", docs_asset, include_in_schema=False)
