"""Held-out responses of validation students: what a DP release's guard scores its candidates on (issue 31, part 4).

The guard (:mod:`calibration.release_guard`) chooses which calibration a DP release serves. What the service is
judged by is its item forecasts on responses it has not seen (:mod:`diagnosis.forecast`), and the concept-mastery
truth it used to be scored on can prefer another candidate: on ASSIST0910 (476 validation students) the truth's
absolute error preferred the stack ridged toward equal weights, while held-out forecasts preferred ``local-fed``
alone by about 0.012 AUC (docs/results/dp-calibration). So where a validation student's responses can be split,
the entities answer one part and the other part is kept back here, one :class:`ItemCheck` per kept response: its
item's concepts and the serving model's item parameters (public, the model's), and the score (the student's, read
only inside the guard's clipped, DP-released sum).

A candidate's forecast of a check is the one the API serves for a stack: the point ``σ(α · mean_k θ_k + c)`` with
``θ_k = logit(mastery_k)`` (:func:`diagnosis.forecast.item_forecast` with ``average=False``); a concept the
candidate did not diagnose stands at the model's prior mean, as in a served forecast (``from_prior``).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from diagnosis.forecast import ConceptBelief, item_forecast, mastery_logit
from providers.item_response import ItemResponseFunction
from qmatrix import Response
from qmatrix.splits import HOLDOUT_FRACTION, holdout_responses

__all__ = ["KEEP_BACK_SEED", "ItemCheck", "check_forecast", "item_checks", "keep_back"]

KEEP_BACK_SEED = 31  # with the student's id, which responses a calibrate job keeps back (the same on a resumed job)


@dataclass(frozen=True)
class ItemCheck:
    """One held-out response: its item's ``concepts`` with the model's prior mean ability of each (``prior_theta``,
    used where a candidate did not diagnose the concept), the item's ``alpha`` and ``intercept``, and the ``score``
    (partial credit y counts as y right and 1 − y wrong, as the evaluation scores it)."""

    concepts: tuple[str, ...]
    prior_theta: tuple[float, ...]
    alpha: float
    intercept: float
    score: float


def item_checks(irf: ItemResponseFunction, responses: Sequence[Response]) -> list[ItemCheck]:
    """One check per response in ``responses`` whose item ``irf`` lists (the others cannot be forecast: skipped)."""
    index = {item_id: n for n, item_id in enumerate(irf.item_ids)}
    out = []
    for r in responses:
        n = index.get(r.item_id)
        if n is None or not irf.concepts[n]:
            continue
        concepts = tuple(irf.concepts[n])
        out.append(ItemCheck(concepts=concepts, prior_theta=tuple(irf.prior_mean.get(c, 0.0) for c in concepts),
                             alpha=float(irf.alpha[n]), intercept=float(irf.intercept[n]), score=float(r.score)))
    return out


def check_forecast(check: ItemCheck, mastery: Mapping[str, float]) -> float:
    """The point forecast of ``check`` from a diagnosis's ``mastery`` (module docstring)."""
    held = [ConceptBelief(mastery_logit(mastery[c]) if c in mastery else prior, None, assessed=c in mastery)
            for c, prior in zip(check.concepts, check.prior_theta, strict=True)]
    return item_forecast(check.alpha, check.intercept, held, z=0.0, average=False)[0]


def keep_back(student_id: str, responses: Sequence[Response], irf: ItemResponseFunction
              ) -> tuple[list[Response], list[ItemCheck]]:
    """(the responses the entities answer, the checks of those kept back): the held-out protocol's fifth
    (:data:`qmatrix.splits.HOLDOUT_FRACTION`; none of a student with fewer than two responses), chosen by a
    generator seeded by ``student_id``, so a calibrate job resumed after a restart keeps back the same ones."""
    rng = np.random.default_rng([KEEP_BACK_SEED, zlib.crc32(student_id.encode())])
    seen, held = holdout_responses(responses, fraction=HOLDOUT_FRACTION, rng=rng)
    return seen, item_checks(irf, held)
