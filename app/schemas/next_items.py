"""Adaptive item selection (``/v1/next-items``, ``/v1/next-items/batch``): which items to ask a student next."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, FailFast, Field

from app.schemas.common import Identifier, Name, WholeNumber
from qmatrix import Response

__all__ = [
    "BatchNextItemsRequest",
    "BatchNextItemsResponse",
    "ConceptInformed",
    "ConceptStatus",
    "NextItem",
    "NextItemsOptions",
    "NextItemsRequest",
    "NextItemsResponse",
    "StudentResponsesIn",
]

MAX_COUNT = 50
MAX_LISTED_IDS = 20_000  # as many as a Q-matrix may hold (FEDCD_MAX_QMATRIX_ITEMS' default)
DEFAULT_COUNT = 3
DEFAULT_RANDOMESQUE = 3
DEFAULT_MIN_GAIN = 0.01

StopReason = Literal["target_width_reached", "nothing_worth_asking", "no_items_left"]


class NextItemsOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # a request: no type coercion

    qmatrix_id: Identifier = Field(description="a stored Q-matrix of the tenant (or a shared one)")
    target_concepts: Annotated[list[Name], Field(min_length=1, max_length=MAX_LISTED_IDS)] | None = Field(
        default=None, description="the concepts to pin down; omitted: every concept of the Q-matrix")
    exclude_items: Annotated[list[Identifier], FailFast(), Field(max_length=MAX_LISTED_IDS)] = Field(
        default_factory=list, description="items never to suggest (items already answered are never suggested)")
    count: Annotated[int, Field(ge=1, le=MAX_COUNT), WholeNumber] = Field(default=DEFAULT_COUNT, description="how many items to return, best first")
    target_width: float | None = Field(
        default=None, gt=0.0, le=1.0, allow_inf_nan=False,
        description="stop once every targeted concept's 90 % credible interval (mastery scale) is narrower; "
        "omitted: never stop for width")
    randomesque: Annotated[int, Field(ge=1, le=20), WholeNumber] = Field(
        default=DEFAULT_RANDOMESQUE,
        description="exposure control: each item is drawn among this many best remaining (1: always the best); "
        "the draw is seeded by the student and the responses, so a repeat gets the same list")
    min_gain: float = Field(
        default=DEFAULT_MIN_GAIN, ge=0.0, le=10.0, allow_inf_nan=False,
        description="an item whose expected entropy reduction over the open targeted concepts (nats) is not above "
        "this is not worth asking")


class NextItemsRequest(NextItemsOptions):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "student_id": "demo-student", "qmatrix_id": "example-prealgebra", "count": 3, "target_width": 0.3,
        "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q03", "correct": False}],
    }]})

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(
        default_factory=list, description="the student's responses so far (none: the first items to ask)")


class StudentResponsesIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    student_id: Identifier
    responses: Annotated[list[Response], FailFast()] = Field(default_factory=list)


class BatchNextItemsRequest(NextItemsOptions):
    students: Annotated[list[StudentResponsesIn], FailFast()] = Field(min_length=1)


class ConceptInformed(BaseModel):
    concept: str
    entropy_reduction: float = Field(description="expected reduction of this concept's posterior entropy (nats)")
    width_now: float = Field(description="the concept's 90 % credible interval width now (mastery scale)")
    width_after: float = Field(description="its expected width once this item is answered")


class NextItem(BaseModel):
    item_id: str
    rank: int
    expected_gain: float = Field(description="expected entropy reduction summed over the open targeted concepts (nats; "
                                 "what min_gain is read against)")
    expected_narrowing: float = Field(description="expected narrowing of the open targeted concepts' interval widths, "
                                      "summed (mastery scale): what the items are ranked by")
    p_correct: float = Field(description="the chance this student answers it correctly (posterior predictive)")
    concepts: list[str] = Field(description="the item's Q-row")
    informs: list[ConceptInformed] = Field(description="the targeted concepts it informs most, most first")


class ConceptStatus(BaseModel):
    concept: str
    mastery: float
    interval: tuple[float, float]
    width: float
    targeted: bool
    open: bool = Field(description="targeted and still wider than target_width (every targeted one when none is given)")


class NextItemsResponse(BaseModel):
    student_id: str
    qmatrix_id: str
    model: str = Field(description="the serving model whose item parameters and posterior the selection uses")
    basis: Literal["trained", "untrained"]
    items: list[NextItem]
    stop: bool = Field(description="true: nothing more to ask for these targets (see stop_reason)")
    stop_reason: StopReason | None = None
    concepts: list[ConceptStatus]
    not_modelled: list[str] = Field(
        default_factory=list, description="Q-matrix concepts the serving model does not know: no interval, no item")
    criterion: str = ("expected narrowing of the open targeted concepts' credible intervals in mastery space "
                      "(Laplace posterior, posterior-weighted information)")
    epsilon_charged: float = Field(default=0.0, description="always 0: no entity is asked, nothing leaves the gateway")


class BatchNextItemsResponse(BaseModel):
    results: list[NextItemsResponse] = Field(description="one per student, in the request's order (every input is "
                                             "checked before any student is answered: a bad one is a 422)")
    count: int
