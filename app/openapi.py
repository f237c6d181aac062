"""The OpenAPI document, made exact about what this server's settings allow.

FastAPI derives the schema from the pydantic models; the request limits are settings (README
"Limits"), so they are written into the schema here: ``maxItems`` on the lists they bound, and a
413 on every operation that takes a body. Clients and fuzzers then see the same bounds the server
enforces.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.settings import Settings

__all__ = ["install_openapi"]


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


def install_openapi(app: FastAPI, settings: Settings) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        schemas = document.get("components", {}).get("schemas", {})
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
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
