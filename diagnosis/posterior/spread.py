"""An entity's own uncertainty in the posterior, and the floor that keeps unmeasured entities honest (issue 33).

**Own uncertainty.** An entity whose model has a posterior (local-fed) releases, next to its privatized mastery u,
a curve s(x): the sd of logit(mastery) when the mastery is x (:class:`providers.MasteryUncertainty`; computed from
which items were answered, never from the scores, so it costs no privacy). Its model says the student's logit
mastery is N(logit u, s²) given the answers; the aggregator reads that as the density of x,

    f(x | u) = φ((logit u − logit x) / s(u)) / (s(u) · x(1 − x)),

the entity's own posterior carried to the [0, 1] scale (its interval is the model's interval). The model already
holds a prior, so the concept's Beta prior is not applied a second time where such a source answered. The entity's
report r went through the public mechanism M, so the factor is E[f(x | u) | r] ∝ ∫ M(r | u) f(x | u) du with u uniform
on [0, 1] a priori, integrated on a grid of logit u (u = r exactly when the mechanism adds no noise).

**Unknown skill.** An entity no calibration measured and that states no uncertainty of its own gives no evidence:
its answers are not weighed (agreeing entities of unknown skill must not narrow an interval). A source whose
uncertainty comes from a model with assumed parameters (``measured=False``: local-fed's untrained evidence model)
is weighed, but where nothing measured answered a concept its interval is never narrower than the 90 %
Beta(1 + c, 1 + k − c) interval of the k answers behind it, with c read from the aggregated mastery
(:func:`beta_floor_width`): the floor depends on how many answers there were and on the privatized answer, never on
which answers were right, so it releases nothing more than the answer count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from scipy.special import betaincinv, logsumexp

from diagnosis.posterior.model import ReportModel
from privacy import Mechanism
from providers import MasteryUncertainty

__all__ = ["UncertainAnswer", "beta_floor_width", "own_log_likelihood", "uncertainty_of", "widen_to"]

_LOGIT_U = np.linspace(-9.0, 9.0, 361)  # the grid of logit u the mechanism's noise is integrated over
_EDGE = 1e-9


class UncertainAnswer(dict[str, float]):
    """An entity's answer (concept -> privatized mastery) carrying the entity's own uncertainty per concept.

    A plain mapping to every aggregator (filters that copy entities' answers keep it: they copy the value); the
    posterior aggregator reads ``uncertainty``.
    """

    def __init__(self, mastery: Mapping[str, float], uncertainty: Mapping[str, MasteryUncertainty] | None = None):
        super().__init__(mastery)
        self.uncertainty: dict[str, MasteryUncertainty] = dict(uncertainty or {})


def uncertainty_of(values: Mapping[str, float], concept: str) -> MasteryUncertainty | None:
    """The entity's own uncertainty about ``concept``, if its answer carries one."""
    found = getattr(values, "uncertainty", None)
    return found.get(concept) if isinstance(found, Mapping) else None


def _logit(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, _EDGE, 1 - _EDGE)
    return np.log(x) - np.log1p(-x)


def logit_sd_at(uncertainty: MasteryUncertainty, x: np.ndarray) -> np.ndarray:
    """s(x): the curve interpolated linearly in logit(x), held constant beyond its ends."""
    return np.interp(_logit(x), _logit(np.asarray(uncertainty.at)), np.asarray(uncertainty.logit_sd))


def own_log_likelihood(
    report: float, uncertainty: MasteryUncertainty, mechanism: Mechanism, centres: np.ndarray
) -> np.ndarray:
    """log of the factor ∫ M(r | u) f(x | u) du at each grid centre x (module docstring), shape (len(centres),).

    The spread is read at the entity's answer u (where its model's mode is), so with no privacy noise the factor
    is exactly the model's own posterior of x and its quantiles are the model's interval.
    """
    lx = _logit(centres)
    log_jacobian = -np.log(np.clip(centres * (1 - centres), _EDGE, None))
    release = ReportModel(mechanism, 0.0)
    if release.noiseless:  # the report is u itself
        sd = float(logit_sd_at(uncertainty, np.asarray([report]))[0])
        z = (_logit(np.asarray([report]))[0] - lx) / sd
        return -0.5 * z * z + log_jacobian
    # E[f(x | u) | r]: u given r ∝ M(r | u) under a uniform law of u on [0, 1] (proper: a report cannot rule out
    # extreme u, as the piecewise mechanism's floor never does, so a law flat in logit u would pile the mass at 0
    # and 1). On the grid of logit u the measure du is u(1 − u) d logit u.
    u = 1 / (1 + np.exp(-_LOGIT_U))
    log_release = release.log_likelihood([report], u)[0] + np.log(u * (1 - u))
    sd = logit_sd_at(uncertainty, u)
    z = (_LOGIT_U[None, :] - lx[:, None]) / sd[None, :]
    step = float(_LOGIT_U[1] - _LOGIT_U[0])
    return logsumexp(log_release[None, :] - np.log(sd)[None, :] - 0.5 * z * z, axis=1) + math.log(step) + log_jacobian


def beta_floor_width(answers: int, level: float, mean: float) -> float:
    """The width of the equal-tailed ``level`` interval of Beta(1 + c, 1 + k − c), k = ``answers``, at the c whose
    posterior mean (1 + c)/(2 + k) is ``mean`` (c clipped to [0, k]).

    ``mean`` is the aggregated (privatized) mastery, not the count of right answers, so the floor releases nothing
    the answer did not. A Beta interval narrows as c moves away from k/2, and the aggregated mean lies nearer ½ than
    the answers' own proportion whenever the prior or the noise pulls it there, so the floor is then at least the
    interval of the answers as they were.
    """
    c = min(max(mean * (2 + answers) - 1, 0.0), float(answers))
    tail = (1 - level) / 2
    a, b = 1 + c, 1 + answers - c
    return float(betaincinv(a, b, 1 - tail) - betaincinv(a, b, tail))


def widen_to(lower: float, median: float, upper: float, width: float) -> tuple[float, float]:
    """[lower, upper] stretched about ``median`` (each side in proportion) to ``width``, kept inside [0, 1]."""
    if upper - lower >= width:
        return lower, upper
    current = upper - lower
    if current <= 0:
        lo, hi = median - width / 2, median + width / 2
    else:
        scale = width / current
        lo, hi = median - (median - lower) * scale, median + (upper - median) * scale
    if lo < 0:
        lo, hi = 0.0, min(1.0, hi - lo)
    if hi > 1:
        lo, hi = max(0.0, lo - (hi - 1)), 1.0
    return lo, hi
