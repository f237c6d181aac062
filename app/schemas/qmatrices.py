"""Q-matrix bodies: registration, listing, and extraction from item texts (``/v1/qmatrices``)."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, FailFast, Field, create_model

from app.pagination import Paginated
from app.schemas.common import Identifier, Name, QMatrixNames

__all__ = [
    "AgreementPublic",
    "ExtractItem",
    "ExtractRequest",
    "ExtractResponse",
    "QMatrixCreate",
    "QMatrixItem",
    "QMatrixList",
    "QMatrixPublic",
    "QMatrixSummary",
    "qmatrix_create_model",
]

MAX_ITEM_TEXT = 20000  # characters of an item's text, in a Q-matrix and in an extraction request alike
# concepts one item may assess, whatever the server's max_qmatrix_concepts: every form of a Q-matrix is checked
# against it (app.limits), as the JSON form is by this model, so a stored one can always be shown again
MAX_ITEM_CONCEPTS = 500


class QMatrixItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    id: Identifier
    text: str | None = Field(default=None, max_length=MAX_ITEM_TEXT)
    concepts: QMatrixNames = Field(max_length=MAX_ITEM_CONCEPTS)


class QMatrixCreate(BaseModel):
    """The JSON form of a Q-matrix."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{  # a request: no coercion
        "id": "fractions", "concepts": ["add", "subtract"],
        "items": [{"id": "i1", "text": "1/2 + 1/3", "concepts": ["add"]}, {"id": "i2", "text": "3/4 - 1/2", "concepts": ["subtract"]}],
    }]})

    id: str = Field(min_length=1, max_length=128, pattern=r"^(?:[A-Za-z0-9_.-]{3,}|[A-Za-z0-9_-][A-Za-z0-9_.-]?|\.[A-Za-z0-9_-])$")  # not '.' or '..' (app.storage.qmatrices)
    concepts: QMatrixNames = Field(min_length=1)
    items: Annotated[list[QMatrixItem], FailFast()] = Field(min_length=1)


@lru_cache(maxsize=8)
def qmatrix_create_model(max_items: int, max_concepts: int) -> type[QMatrixCreate]:
    """:class:`QMatrixCreate` with a server's size limits on ``items`` and ``concepts`` (settings, so not in the
    static schema): a list past its limit is one error naming the field, and no model is built per element nor
    a Q-matrix from them (the JSON text itself is parsed whole: its memory is bounded by the body limit)."""
    return create_model(  # type: ignore[call-overload,no-any-return]
        "QMatrixCreate", __base__=QMatrixCreate,
        concepts=(QMatrixNames, Field(min_length=1, max_length=max_concepts)),
        items=(Annotated[list[QMatrixItem], FailFast()], Field(min_length=1, max_length=max_items)),
    )


class QMatrixPublic(QMatrixCreate):
    version: int = Field(description="1 at registration; each PUT adds one")
    n_items: int
    n_concepts: int
    builtin: bool = Field(default=False, description="shared read-only with every tenant")


class QMatrixSummary(BaseModel):
    """What a registration or replacement answers: the new version, without echoing every item back."""

    id: str
    version: int
    concepts: list[str]
    n_items: int
    n_concepts: int
    builtin: bool = False


class QMatrixList(Paginated[str]):
    """Q-matrix ids: the built-in ones first, then the tenant's by id."""

class ExtractItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    # The rules of a Q-matrix item's id and text: the extracted Q-matrix is answered (and saved) with them.
    id: Identifier
    text: str = Field(min_length=1, max_length=MAX_ITEM_TEXT)


class ExtractRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    id: str = Field(min_length=1, max_length=128, pattern=r"^(?:[A-Za-z0-9_.-]{3,}|[A-Za-z0-9_-][A-Za-z0-9_.-]?|\.[A-Za-z0-9_-])$")  # not '.' or '..' (app.storage.qmatrices)
    items: list[ExtractItem] = Field(min_length=1, max_length=500)
    concepts: list[Name] | None = Field(
        default=None, min_length=1,
        description="default: fedcd's GSM8K concept set; at most the server's max_qmatrix_concepts (a 422 past it)",
    )
    method: Literal["keyword", "llm", "both"] = "keyword"
    entities: list[Name] | None = Field(default=None, min_length=1, description="LLM taggers; default: all configured")
    save: bool = Field(default=False, description="also register the extracted Q-matrix under 'id'")


class AgreementPublic(BaseModel):
    percent: float | None = Field(description="null when no item was tagged by both methods")
    kappa: float | None
    per_concept: dict[str, dict[str, float | None]]


class ExtractResponse(BaseModel):
    qmatrix: QMatrixCreate | None
    method: str
    tags: dict[str, list[str]]
    untagged_items: list[str] = Field(description="items no concept was tagged for: left out of the Q-matrix")
    unused_concepts: list[str] = Field(description="concepts no item was tagged with: left out of the Q-matrix")
    agreement: AgreementPublic | None = Field(default=None, description="keyword vs LLM tagging (method 'both')")
    failures: dict[str, list[str]] = Field(default_factory=dict, description="entity -> items it failed to tag")
    registered: bool = False

