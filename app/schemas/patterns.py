"""A string's JSON-schema ``pattern`` for a rule the server checks in code (the schema says what is enforced).

Its own module, below ``app.schemas`` and ``app.openapi``, so the schemas can use it without importing the module
that builds the OpenAPI document (which reads the schemas).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import GetJsonSchemaHandler

__all__ = ["SchemaPattern"]


@dataclass(frozen=True)
class SchemaPattern:
    """An annotation that writes ``pattern`` into a string's JSON schema, for a rule the server checks in code
    (``Annotated[str, SchemaPattern(f)]``): ``f`` is called when the schema is made, not at import. An annotation
    rather than ``json_schema_extra``, which FastAPI's ``Query``/``Path`` would replace."""

    pattern: Callable[[], str]

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        schema = handler(core_schema)
        schema["pattern"] = self.pattern()
        return schema
