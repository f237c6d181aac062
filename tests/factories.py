"""Test factories: a SIMULATED entity and request builders shared by the test modules."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from hypothesis import strategies as st

from diagnosis import DiagnosisRequest
from providers import EntityPrediction, PromptContext
from qmatrix import Response, example_qmatrix


class FakeEntity:
    """A SIMULATED entity: answers from a function of the prompt context, or raises.

    Records every context it was asked, and the number of calls in flight at once.
    """

    def __init__(
        self,
        name: str,
        answer: Callable[[PromptContext], dict[str, float]] | dict[str, float] | float = 0.5,
        *,
        error: Exception | None = None,
        delay_s: float = 0.0,
        missing: list[str] | None = None,
    ) -> None:
        self.name = name
        self._answer = answer
        self._error = error
        self._delay_s = delay_s
        self._missing = missing or []
        self.contexts: list[PromptContext] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed = False

    async def respond(self, context: PromptContext) -> EntityPrediction:
        self.contexts.append(context)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self._delay_s:
                await asyncio.sleep(self._delay_s)
            if self._error is not None:
                raise self._error
            if callable(self._answer):
                values = self._answer(context)
            elif isinstance(self._answer, dict):
                values = {c: self._answer[c] for c in context.concepts if c in self._answer}
            else:
                values = {c: float(self._answer) for c in context.concepts}
            values = {c: v for c, v in values.items() if c not in self._missing}
            missing = [c for c in context.concepts if c not in values]
            return EntityPrediction(
                entity=self.name,
                model="fake",
                status="partial" if missing else "ok",
                mastery=values,
                missing=missing,
                simulated=True,
            )
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        self.closed = True


def log_uniform(low: float, high: float, *, also: tuple[float, ...] = ()) -> st.SearchStrategy[float]:
    """Floats in [low, high] spread evenly over orders of magnitude, plus the end points and ``also``."""
    spread = st.floats(math.log(low), math.log(high)).map(lambda x: min(high, max(low, math.exp(x))))
    return st.one_of(st.sampled_from([low, high, *also]), spread)


def diagnosis_request(**overrides: object) -> DiagnosisRequest:
    """A pipeline request on the example Q-matrix (two responses, two concepts), no noise unless overridden."""
    values: dict[str, object] = {
        "student_id": "s-042",
        "qmatrix": example_qmatrix(),
        "responses": [Response(item_id="q01", correct=True), Response(item_id="q10", correct=False)],
        "epsilon": None,
    }
    values.update(overrides)
    return DiagnosisRequest(**values)  # type: ignore[arg-type]
