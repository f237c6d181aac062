"""Scoring what the service serves (issue 31, part 2): the ``served`` and ``single:local-fed`` rows are scored by
the item forecasts ``/v1/diagnose`` returns (``forecast_items``: ``diagnosis.forecast`` through the item parameters of
the ``local-fed`` model), not through the evaluation's own link.

Each held-out response of a test student is predicted as the API would forecast that item from the row's diagnosis
of the student: the served row's posterior means and credible intervals, ``single:local-fed``'s (privatized) point
answer; a concept the row did not diagnose stands at the model's prior, as in the API. The concept-mastery link
(:mod:`evaluation.link`) stays as a second scoring of the same rows, named ``<row> (link)``, side by side: it is the
only scoring an LLM-only row has, and it is how these rows were scored before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from diagnosis.forecast import concept_beliefs, item_forecast, z_of
from evaluation.rows import Estimates
from providers.item_response import ItemResponder, ItemResponseFunction, items_to_forecast
from qmatrix import QMatrix, Response

__all__ = ["FORECAST_ROWS", "LINK_SUFFIX", "ForecastScorer", "item_responder"]

FORECAST_ROWS = ("served", "single:local-fed")  # the rows an item forecast is served for
LINK_SUFFIX = " (link)"


def item_responder(entities: Mapping[str, object]) -> ItemResponder | None:
    """The federation's ``local-fed`` entity, under its wrappers (``Cached``: ``inner``), if it has one."""
    entity = entities.get("local-fed")
    while entity is not None and not isinstance(entity, ItemResponder):
        entity = getattr(entity, "inner", None)
    return entity


class ForecastScorer:
    """P(correct) of the test students' held-out responses, forecast from a row's diagnoses."""

    def __init__(self, q: QMatrix, responder: ItemResponder, test_held: Sequence[Sequence[Response]]) -> None:
        items = items_to_forecast(q)
        # operator's model of the Q-matrix (the evaluation's registry holds no tenant's)
        self.irf: ItemResponseFunction = responder.item_response(q.id, None, items, tuple(q.concepts))
        self.index = {item_id: n for n, item_id in enumerate(self.irf.item_ids)}
        self.test_held = test_held

    def probabilities(self, est: Estimates) -> np.ndarray:
        irf, z = self.irf, z_of(est.interval_level)
        out: list[float] = []
        for s, held in enumerate(self.test_held):
            rows = [self.index[r.item_id] for r in held]
            needed = {c for n in rows for c in irf.concepts[n]}
            intervals = est.test_intervals[s] if est.test_intervals is not None else None
            beliefs = concept_beliefs(est.test[s], intervals, est.interval_level, irf, concepts=needed)
            for n in rows:
                p, _ = item_forecast(float(irf.alpha[n]), float(irf.intercept[n]),
                                     [beliefs[c] for c in irf.concepts[n]], z=z, average=est.forecast_averages)
                out.append(p)
        return np.asarray(out, dtype=float)

    def basis_counts(self) -> dict[str, int]:
        """How many of the held-out responses' items rest on each basis (trained, q-row, untrained)."""
        counts: dict[str, int] = {}
        for held in self.test_held:
            for r in held:
                basis = self.irf.basis[self.index[r.item_id]]
                counts[basis] = counts.get(basis, 0) + 1
        return counts
