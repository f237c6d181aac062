"""Typed Python client of the fedcd gateway: ``FedcdClient`` (sync) and ``AsyncFedcdClient`` (async, httpx).

    from fedcd_client import FedcdClient
    with FedcdClient("http://127.0.0.1:8000", api_key="fcd_...") as fedcd:
        diagnosis = fedcd.diagnose({"student_id": "s1", "qmatrix_id": "example-prealgebra",
                                    "responses": [{"item_id": "q01", "correct": True}]})

Models (``fedcd_client.models``, re-exported here) are generated from the server's OpenAPI schema; errors form one
tree under :class:`FedcdError`; webhook receivers check deliveries with :func:`verify_webhook`.
"""

from fedcd_client import models
from fedcd_client._async_client import AsyncFedcdClient
from fedcd_client._errors import (
    APIStatusError,
    AuthenticationError,
    ConflictError,
    FedcdConnectionError,
    FedcdError,
    FedcdTimeoutError,
    InvalidRequestError,
    JobFailedError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    PrivacyBudgetExceeded,
    RateLimitError,
    ServerError,
    ServiceUnavailableError,
    WaitTimeoutError,
    WebhookVerificationError,
)
from fedcd_client._retry import RetryPolicy
from fedcd_client._sync_client import FedcdClient
from fedcd_client.models import *  # every request and response model, by its server name
from fedcd_client.webhooks import WebhookEvent, sign_webhook, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "APIStatusError", "AsyncFedcdClient", "AuthenticationError", "ConflictError", "FedcdClient",
    "FedcdConnectionError", "FedcdError", "FedcdTimeoutError", "InvalidRequestError", "JobFailedError",
    "NotFoundError", "PayloadTooLargeError", "PermissionDeniedError", "PrivacyBudgetExceeded", "RateLimitError",
    "RetryPolicy", "ServerError", "ServiceUnavailableError", "WaitTimeoutError", "WebhookEvent",
    "WebhookVerificationError", "__version__", "models", "sign_webhook", "verify_webhook",
]
__all__ += models.__all__
