"""Item forecasts on a diagnosis (``forecast_items``): which items, checked before anything is charged, and the
forecasts themselves, computed from the released diagnosis (``diagnosis.forecast``) through the item parameters of
the model serving the tenant's Q-matrix (``providers.item_response``).

A federation without the ``local-fed`` entity, a Q-matrix with no trained model, and inline rows are all forecast by
the untrained evidence model, and say so (``basis``: untrained). Forecasts are never stored with the diagnosis: a
repeat of the request gets them afresh from the stored (already privatized) answer, at no cost.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from app.domain_errors import InvalidInput
from app.schemas import DiagnoseResponse, ForecastBasis, ItemForecast
from diagnosis.forecast import DEFAULT_LEVEL, concept_beliefs, forecast_items
from providers.item_response import ItemResponder, ItemResponseFunction, ItemToForecast, item_response_function
from qmatrix import QMatrix

__all__ = ["ForecastService"]

_LISTED = 20  # unknown item ids named in a refusal


class ForecastService:
    """``local_fed``: the federation's ``local-fed`` entity (None when it has none)."""

    def __init__(self, local_fed: ItemResponder | None) -> None:
        self.local_fed = local_fed

    def items(self, wanted: list[str] | Literal["all"] | None, q: QMatrix) -> list[ItemToForecast]:
        """The items to forecast, in the order asked (``all``: the Q-matrix's order); ``InvalidInput`` naming
        ``body.forecast_items`` for an id the Q-matrix does not define."""
        if wanted is None:
            return []
        ids = list(q.item_ids) if wanted == "all" else list(dict.fromkeys(wanted))
        unknown = q.unknown_items(ids)
        if unknown:
            more = f" … and {len(unknown) - _LISTED} more" if len(unknown) > _LISTED else ""
            raise InvalidInput(("forecast_items",), [
                f"items not in Q-matrix '{q.id}': {', '.join(unknown[:_LISTED])}{more}"])
        return [ItemToForecast(i, tuple(q.item(i).concepts), q.item(i).text) for i in ids]

    async def attach(
        self, response: DiagnoseResponse, items: list[ItemToForecast], *, q: QMatrix, qmatrix_id: str | None,
        tenant: str,
    ) -> DiagnoseResponse:
        """``response`` with the forecasts of ``items`` (unchanged when there are none)."""
        if not items:
            return response
        irf = await asyncio.to_thread(self.item_response, items, q, qmatrix_id, tenant)
        level = response.interval_level or DEFAULT_LEVEL
        beliefs = concept_beliefs(response.mastery, response.mastery_interval, level, irf)
        # a posterior's intervals are averaged over; a stack's measured ones are not (diagnosis.forecast)
        forecasts = forecast_items(irf, beliefs, level=level, average=response.aggregation == "posterior")
        trained = sum(f.basis != "untrained" for f in forecasts)
        summary = (f"{len(forecasts)} items through {irf.model}'s item parameters ({trained} from a trained model)"
                   if trained else f"{len(forecasts)} items through the untrained evidence model (no trained model "
                   "serves them): discrimination 1, intercept 0")
        return response.model_copy(update={
            "forecasts": [ItemForecast(item_id=f.item_id, p_correct=f.p_correct, interval=f.interval, basis=f.basis,
                                       from_prior=list(f.from_prior)) for f in forecasts],
            "forecast_basis": ForecastBasis(model=irf.model, interval_level=level, summary=summary),
        })

    def item_response(
        self, items: list[ItemToForecast], q: QMatrix, qmatrix_id: str | None, tenant: str
    ) -> ItemResponseFunction:
        """The item-response function the tenant's forecasts on ``q`` go through (blocking: it may load a model)."""
        concepts = tuple(q.concepts)
        if self.local_fed is not None:
            return self.local_fed.item_response(qmatrix_id, tenant, items, concepts)
        from providers.local_fed import untrained_model  # torch: only once a forecast is asked for

        untrained = untrained_model(concepts)
        return item_response_function(untrained, items, untrained=untrained)
