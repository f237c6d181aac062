"""A diagnosis request, and its plan: everything the pipeline runs it by, decided once.

:meth:`DiagnosisPipeline.plan <diagnosis.pipeline.DiagnosisPipeline.plan>` turns a :class:`DiagnosisRequest` into a
:class:`DiagnosisPlan` — the prompt context (the assessed concepts), the privacy mechanism (the one object that
privatizes every answer, models the noise and says what a release costs), the federation mode, the entities selected
(in asking order), the aggregator and the deadline — and :meth:`~diagnosis.pipeline.DiagnosisPipeline.run` executes
a plan without deriving any of it again. A caller that charges a privacy budget before the answers are released
(the gateway) reads the charge from the same plan: ``plan.mechanism.charge()`` per answer, ``plan.releases``
answers at most.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from diagnosis.aggregation import Aggregator
from diagnosis.calibrated import NoiseLevel
from diagnosis.tiers import AskAll, FederationMode
from privacy import DEFAULT_DELTA, PAPER_MECHANISM, Mechanism, SensitivityMode, mechanism_for_request
from providers import Entity, PromptContext, PromptItem
from qmatrix import QMatrix, Response

__all__ = ["DiagnosisPlan", "DiagnosisRequest", "UnknownEntities", "build_context", "request_mechanism"]


class UnknownEntities(ValueError):
    def __init__(self, names: Sequence[str], known: Sequence[str]) -> None:
        self.names = list(names)
        super().__init__(f"unknown entities: {', '.join(names)} (configured: {', '.join(known) or 'none'})")


@dataclass(frozen=True, kw_only=True)
class DiagnosisRequest:
    student_id: str
    qmatrix: QMatrix
    responses: Sequence[Response]
    epsilon: float | None = 1.0  # None: the caller asked for no noise
    sensitivity: SensitivityMode = "paper"
    mechanism: str = PAPER_MECHANISM  # privacy.MECHANISM_NAMES; the paper's Laplace by default
    delta: float = DEFAULT_DELTA  # used by the Gaussian mechanism only
    entities: Sequence[str] | None = None  # None: every configured entity
    include_answers: bool = False  # send free-text answers to the entities (off: data minimisation)
    federation: FederationMode = field(default_factory=AskAll)  # which entities are asked, in what order
    deadline_s: float | None = None  # one deadline for the whole request, every stage included; None: none
    cache_scope: str | None = None  # who may share cached entity answers (the tenant); see PromptContext
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def noise(self) -> NoiseLevel:
        return NoiseLevel(mechanism=self.mechanism, epsilon=self.epsilon, sensitivity=self.sensitivity, delta=self.delta)


def build_context(
    qmatrix: QMatrix, responses: Sequence[Response], *, include_answers: bool = True, cache_scope: str | None = None,
    own_uncertainty: bool = True,
) -> PromptContext:
    """Q-filtered prompt context. Raises ``QMatrixError`` naming unknown item ids.

    Data minimisation: the context holds the answered items' text, their Q-matrix rows
    and correctness — never the student id. Free-text answers are included only when
    ``include_answers`` (they may hold names or other identifying text).
    """
    concepts = qmatrix.concepts_for([r.item_id for r in responses])
    items = tuple(
        PromptItem(
            item_id=r.item_id,
            text=qmatrix.item(r.item_id).text,
            concepts=qmatrix.item(r.item_id).concepts,
            score=r.score,
            answer=r.answer if include_answers else None,
        )
        for r in responses
    )
    return PromptContext(concepts=concepts, items=items, qmatrix_id=qmatrix.id, cache_scope=cache_scope,
                         own_uncertainty=own_uncertainty)


def request_mechanism(request: DiagnosisRequest, n_concepts_assessed: int | None = None) -> Mechanism:
    """The privacy mechanism the request's answers are released through (built once per parameters: the registry
    reuses it). ``n_concepts_assessed``: the number of concepts the responses assess, when the caller knows it."""
    if n_concepts_assessed is None:
        n_concepts_assessed = len(request.qmatrix.concepts_for([r.item_id for r in request.responses]))
    return mechanism_for_request(
        name=request.mechanism,
        epsilon=request.epsilon,
        delta=request.delta,
        mode=request.sensitivity,
        n_concepts_total=len(request.qmatrix.concepts),
        n_concepts_assessed=n_concepts_assessed,
    )


@dataclass(frozen=True, kw_only=True, eq=False)
class DiagnosisPlan:
    """One request, decided (see the module docstring). ``entities``: the selected entities in asking order, never
    empty; ``deadline_s``: the whole request's time, counted from when the plan starts running."""

    request: DiagnosisRequest
    context: PromptContext
    mechanism: Mechanism
    mode: FederationMode
    entities: Mapping[str, Entity]
    aggregator: Aggregator
    deadline_s: float | None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.entities)

    @property
    def releases(self) -> int:
        """The most independently noised answers the plan can release: one per entity selected."""
        return len(self.entities)
