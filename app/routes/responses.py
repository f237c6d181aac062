"""OpenAPI descriptions of the error responses every authenticated route shares."""

from __future__ import annotations

from typing import Any

__all__ = ["ADMIN_ERRORS", "AUTH_ERRORS"]

AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing, invalid, expired or revoked API key (`WWW-Authenticate: Bearer`)"},
}
ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    **AUTH_ERRORS,
    403: {"description": "a client key on an admin route or option"},
}
