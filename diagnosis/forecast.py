"""Item forecasts: the chance a student answers an item correctly, from the aggregated concept posterior through the
serving model's item-response function (issue 31, part 1).

For item ``i`` requiring concepts ``Q_i``, with the diagnosis's belief about each concept's ability
``θ_k ~ N(m_k, s_k²)`` (``m_k = logit(mastery_k)``; ``s_k`` read off the credible interval) and the model's item
parameters ``α_i, c_i`` (:mod:`providers.item_response`)::

    η_i = α_i · mean_{k∈Q_i} θ_k + c_i,   var(η_i) = α_i² · Σ_{k∈Q_i} s_k² / |Q_i|²
    P(correct) ≈ σ(E η_i / sqrt(1 + π/8 · var η_i))     (the probit approximation of the posterior predictive)
    interval   = [σ(E η_i − z·sd η_i), σ(E η_i + z·sd η_i)] at the diagnosis's credible level

The concepts are taken as independent given the diagnosis (only their marginals are released), as the model's own
posterior predictive does. A concept the diagnosis did not assess (the item was not among the student's answers)
stands at the model's prior, listed in ``from_prior``: its forecast is as uncertain as the model says a student it
knows nothing about is.

A calibrated stack (``mean`` aggregation) has intervals from its measured error (:mod:`diagnosis.measured`), not a
posterior: its forecast is the point ``σ(α_i · mean θ + c_i)`` (``average=False``) with the interval that spread gives.
Averaging over it was measured and rejected: on ASSIST0910's held-out responses (seed 0, every student) it raised the
served forecasts' expected calibration error from 0.027 to 0.033 at the default noise and to 0.029 without noise, at
the same AUC (docs/results/measured-intervals): the stack's point, fitted by least squares on the mastery scale, is
already pulled toward the middle, and averaging pulls it further. A mean without a measured error (uncalibrated)
gives a point forecast with no interval.

This is post-processing of an already released (privatized) diagnosis and the model's public parameters: it costs
no ε and reads no response.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, logit
from scipy.stats import norm

from providers.item_response import ItemBasis, ItemResponseFunction

__all__ = ["DEFAULT_LEVEL", "LOGIT_CLIP", "ConceptBelief", "ItemForecast", "concept_beliefs", "forecast_items", "item_forecast", "mastery_logit", "z_of"]

LOGIT_CLIP = 1e-4  # a mastery of exactly 0 or 1 would be an infinite ability (diagnosis.measured clips alike)
DEFAULT_LEVEL = 0.9


@dataclass(frozen=True)
class ConceptBelief:
    """The diagnosis's belief about one concept's ability θ (logit scale): mean and sd (None: a point estimate)."""

    theta: float
    sd: float | None
    assessed: bool


@dataclass(frozen=True)
class ItemForecast:
    item_id: str
    p_correct: float
    interval: tuple[float, float] | None
    basis: ItemBasis
    from_prior: tuple[str, ...]


def mastery_logit(p: float) -> float:
    """θ = logit(mastery), the mastery clipped to [LOGIT_CLIP, 1 − LOGIT_CLIP] first (0 or 1 would be infinite)."""
    return float(logit(min(max(p, LOGIT_CLIP), 1 - LOGIT_CLIP)))


def z_of(level: float | None) -> float:
    return float(norm.ppf(0.5 + (level or DEFAULT_LEVEL) / 2))


def concept_beliefs(
    mastery: Mapping[str, float], intervals: Mapping[str, tuple[float, float]] | None, level: float | None,
    irf: ItemResponseFunction, *, concepts: Iterable[str] | None = None,
) -> dict[str, ConceptBelief]:
    """Beliefs for ``concepts`` (default: every concept the forecast items require): the diagnosis's where it
    assessed the concept (its interval read as ±z·sd on the logit scale), else the model's prior."""
    z = z_of(level)
    beliefs: dict[str, ConceptBelief] = {}
    for concept in set(concepts) if concepts is not None else {c for row in irf.concepts for c in row}:
        if concept in mastery:
            bounds = (intervals or {}).get(concept)
            sd = None if bounds is None else max(mastery_logit(bounds[1]) - mastery_logit(bounds[0]), 0.0) / (2 * z)
            beliefs[concept] = ConceptBelief(mastery_logit(mastery[concept]), sd, assessed=True)
        else:
            beliefs[concept] = ConceptBelief(irf.prior_mean.get(concept, 0.0), irf.prior_sd.get(concept, 1.0),
                                             assessed=False)
    return beliefs


def forecast_items(
    irf: ItemResponseFunction, beliefs: Mapping[str, ConceptBelief], *, level: float | None, average: bool = True
) -> list[ItemForecast]:
    """One forecast per item of ``irf`` (its order), at credible ``level`` (default 90 %); ``average``: whether
    P(correct) averages over the beliefs' spread (a posterior's) or is read at the point (a stack's; module
    docstring)."""
    z = z_of(level)
    out: list[ItemForecast] = []
    for n, (item_id, concepts) in enumerate(zip(irf.item_ids, irf.concepts, strict=True)):
        held = [beliefs[k] for k in concepts]
        p, interval = item_forecast(float(irf.alpha[n]), float(irf.intercept[n]), held, z=z, average=average)
        out.append(ItemForecast(item_id=item_id, p_correct=p, interval=interval, basis=irf.basis[n],
                                from_prior=tuple(k for k, b in zip(concepts, held, strict=True) if not b.assessed)))
    return out


def item_forecast(
    alpha: float, intercept: float, held: Sequence[ConceptBelief], *, z: float, average: bool = True
) -> tuple[float, tuple[float, float] | None]:
    """(P(correct), its interval at ±z) of one item with parameters ``alpha``, ``intercept`` requiring the concepts
    whose beliefs are ``held`` (the module docstring's formulas; ``average`` False: P(correct) at the point)."""
    mean = alpha * float(np.mean([b.theta for b in held])) + intercept
    if any(b.sd is None for b in held):
        return float(expit(mean)), None
    sd = alpha * math.sqrt(sum(b.sd**2 for b in held)) / len(held)  # type: ignore[operator]
    p = float(expit(mean / math.sqrt(1 + math.pi / 8 * sd**2))) if average else float(expit(mean))
    return p, (float(expit(mean - z * sd)), float(expit(mean + z * sd)))
