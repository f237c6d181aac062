"""Every error the client raises, in one tree (catch ``FedcdError`` for all of them)::

    FedcdError
    ├── FedcdConnectionError          the request did not complete (refused, reset, DNS)
    │   └── FedcdTimeoutError         no answer in time
    ├── APIStatusError                the gateway answered with an error status
    │   ├── AuthenticationError       401: no key, or an unknown/revoked one
    │   ├── PermissionDeniedError     403: the key's role may not do this (admin routes)
    │   ├── NotFoundError             404: unknown id (another tenant's is unknown too)
    │   ├── ConflictError             409: e.g. the id is taken, the job has finished
    │   ├── PayloadTooLargeError      413
    │   ├── InvalidRequestError       422: ``errors`` lists ``{loc, msg, type}``, ``loc`` naming the field
    │   ├── RateLimitError            429 ``type: rate_limit``: the tenant's request rate (retried by the client)
    │   ├── PrivacyBudgetExceeded     429 ``type: privacy_budget``: the student's ε is spent (never retried)
    │   ├── ServiceUnavailableError   503: every entity failed, none was there to ask, or "try later"
    │   └── ServerError               any other 5xx
    ├── JobFailedError                a waited-for job ended ``failed`` or ``cancelled``
    ├── WaitTimeoutError              a job did not finish within the wait's timeout
    └── WebhookVerificationError      a webhook's signature or timestamp does not check out

The two 429s are told apart by the body's ``type`` (the server's ``app/errors.py`` sets it on both): a rate limit
frees up in about a second, a spent privacy budget only when its period renews (or never), so retrying it would only
wait — and the client must never hide that a student's budget is spent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from fedcd_client.models import JobPublic

__all__ = [
    "APIStatusError", "AuthenticationError", "ConflictError", "FedcdConnectionError", "FedcdError",
    "FedcdTimeoutError", "InvalidRequestError", "JobFailedError", "NotFoundError", "PayloadTooLargeError",
    "PermissionDeniedError", "PrivacyBudgetExceeded", "RateLimitError", "ServerError", "ServiceUnavailableError",
    "WaitTimeoutError", "WebhookVerificationError", "error_from_response",
]


class FedcdError(Exception):
    """Base of every error this client raises."""


class FedcdConnectionError(FedcdError):
    """The request did not complete: connection refused or reset, name resolution failed."""


class FedcdTimeoutError(FedcdConnectionError):
    """No answer within the client's timeout."""


class APIStatusError(FedcdError):
    """The gateway answered with a 4xx or 5xx status. ``body`` is the parsed JSON body (``None`` if not JSON)."""

    def __init__(self, response: httpx.Response, body: Any) -> None:
        self.response, self.status_code, self.body = response, response.status_code, body
        self.detail: Any = body.get("detail") if isinstance(body, dict) else response.text[:500]
        super().__init__(f"HTTP {response.status_code} on {response.request.method} {response.request.url.path}: "
                         f"{_summary(self.detail)}")

    @property
    def retry_after_s(self) -> float | None:
        """The ``Retry-After`` header in seconds, when the gateway sent one."""
        return parse_retry_after(self.response.headers.get("retry-after"))


class AuthenticationError(APIStatusError):
    """401: no API key, or an unknown or revoked one."""


class PermissionDeniedError(APIStatusError):
    """403: the key's role may not do this (most job, Q-matrix writing and student-data routes need an admin key)."""


class NotFoundError(APIStatusError):
    """404: an unknown id; another tenant's resources are unknown too."""


class ConflictError(APIStatusError):
    """409: the id is taken, a built-in Q-matrix, a finished job, a student with work in flight."""


class PayloadTooLargeError(APIStatusError):
    """413: the body is over the server's limit."""


class InvalidRequestError(APIStatusError):
    """422: ``errors`` is the server's list of ``{loc, msg, type}``; ``loc`` names the offending field."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.detail if isinstance(e, dict)] if isinstance(self.detail, list) else []


class RateLimitError(APIStatusError):
    """429 ``type: rate_limit``: over the tenant's request rate. Raised once the client's retries are used up, or
    when ``Retry-After`` is longer than the client waits."""


class PrivacyBudgetExceeded(APIStatusError):
    """429 ``type: privacy_budget``: the student's privacy budget is spent; never retried by the client.

    ``renews_at`` (ISO 8601, or ``None``) is when it frees up; a budget that never renews under the tenant's policy
    still carries a one-day ``Retry-After`` as a floor (only an admin's policy change can free it)."""

    @property
    def renews_at(self) -> str | None:
        return self.body.get("renews_at") if isinstance(self.body, dict) else None


class ServiceUnavailableError(APIStatusError):
    """503: every entity failed (``entities`` lists why), none was there to ask, or the server said to try later."""

    @property
    def entities(self) -> list[dict[str, Any]]:
        value = self.body.get("entities") if isinstance(self.body, dict) else None
        return value if isinstance(value, list) else []


class ServerError(APIStatusError):
    """Any other 5xx: the request was not completed (the gateway charges nothing for it)."""


class JobFailedError(FedcdError):
    """A job waited for ended ``failed`` or ``cancelled``; ``job`` is its last state."""

    def __init__(self, job: JobPublic) -> None:
        self.job = job
        super().__init__(f"job {job.job_id} ended {job.status}" + (f": {job.error}" if job.error else ""))


class WaitTimeoutError(FedcdError):
    """A job did not finish within the wait's ``timeout_s``; ``job`` is the last state read (it keeps running)."""

    def __init__(self, job: JobPublic, timeout_s: float) -> None:
        self.job = job
        super().__init__(f"job {job.job_id} still {job.status} after {timeout_s:g} s")


class WebhookVerificationError(FedcdError):
    """A webhook delivery whose signature does not match, or whose timestamp is missing or too old."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError, 409: ConflictError,
    413: PayloadTooLargeError, 422: InvalidRequestError, 503: ServiceUnavailableError,
}


def error_from_response(response: httpx.Response) -> APIStatusError:
    """The typed error of an error response (the body must have been read)."""
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if response.status_code == 429:
        return PrivacyBudgetExceeded(response, body) if is_privacy_budget(body) else RateLimitError(response, body)
    cls = _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = ServerError if response.status_code >= 500 else APIStatusError
    return cls(response, body)


def is_privacy_budget(body: Any) -> bool:
    """Whether a 429's body is the privacy-budget refusal (and so must not be retried)."""
    return isinstance(body, dict) and body.get("type") == "privacy_budget"


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the gateway sends whole seconds; an HTTP date is not used by it)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _summary(detail: Any) -> str:
    if isinstance(detail, list):  # FastAPI's validation shape: name the fields
        parts = [f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg', '')}" for e in detail[:3]
                 if isinstance(e, dict)]
        return "; ".join(parts) + (f" (+{len(detail) - 3} more)" if len(detail) > 3 else "")
    return str(detail)[:500]
