"""The two bases of the generated models (``models.py``): what is read from the server tolerates fields a newer
server adds; what only goes to the server refuses unknown fields, as the server does, before sending."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["RequestModel", "ResponseModel"]


class ResponseModel(BaseModel):
    """A body the server sends (or both sends and takes): fields a newer server adds are ignored, so an older
    client keeps working."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, protected_namespaces=())


class RequestModel(BaseModel):
    """A request body the server refuses unknown fields in: refused here first, naming the field."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, protected_namespaces=())
