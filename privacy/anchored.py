"""Anchored release: one answer's mean released apart, every concept pulled toward it as far as the noise calls for.

Why: with Δ = the assessed concepts, a bounded mechanism gives each concept ε/Δ. A student of ASSIST0910 is
assessed on ~15 concepts (14.7 on average over every response of 1,000 students, docs/results/frontier/anchored), so
at the server's ε = 32 each concept gets ~2 and its piecewise report has an sd of 0.37–0.52 on a value in [0, 1]: the
served diagnosis lost 0.08 AUC against noiseless there (docs/results/issue31). Yet most of what predicts a student's
next responses is one number, how able they are overall (a one-ability 2PL predicts ASSIST0910's held-out responses
as well as the best diagnosis, docs/results/issue31). An anchored release spends a share of ε on that
number and the rest on the concepts, then combines them by their known noise:

1. the **anchor**: the mean ``m`` of the answer's values (in [0, 1]; one student changes it by at most 1, so
   sensitivity 1), released by the inner mechanism at ``share · ε`` as one coordinate;
2. the **details**: every value ``x_k``, released by the same mechanism at ``(1 − share) · ε`` split over
   ``dimension`` concepts (exactly the plain mechanism at that ε);
3. **post-processing** (no privacy cost: it reads only the two releases and public parameters): the two unbiased
   estimates of the mean, ``m̂`` and the details' mean ``r̄``, are pooled by inverse variance into ``m̃``; each
   concept's deviation ``r_k − r̄`` is kept in proportion ``λ = τ₀² / (τ₀² + v)`` — the Bayes weight of a report
   with noise variance ``v`` (the details' variance at the anchor's level) on a deviation with prior sd ``τ₀``
   (``prior_spread``). The release is ``clip(m̃ + λ(r_k − r̄), 0, 1)``.

Where the details are pure noise (large Δ, small ε) ``λ → 0`` and every concept reads the precise anchor; where
they are precise (small Δ or large ε) ``λ → 1`` and the concepts keep their own values. The share is chosen per
(ε, Δ) from public quantities only: the one of :data:`SHARE_GRID` that minimises the expected squared error of a
released value under the prior (:func:`expected_error`; share 0 — no anchor — wins when few concepts are assessed).
λ is not estimated from the reports themselves (empirical Bayes): with d concepts their sample variance has an sd of
about v·√(2/(d − 1)), which at ~30 concepts and ε ≈ 0.5 per concept (v ≈ 4) is far above any real spread (τ₀² = 0.04).
The whole release is ε-LDP by basic composition: ``share · ε + (1 − share) · ε = ε``, charged once as ε.

The posterior aggregator needs a likelihood of the released value given the clean one. The released value has no
simple law (it depends on every concept's report through their mean, and on the anchor), so :meth:`AnchoredMechanism.likelihood` is a stated
approximation: a clipped Gaussian whose sd is the release's expected error (:func:`expected_error`) combined with
the entity's own error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar, Self

import numpy as np

from privacy.bounded import BoundedMechanism, PiecewiseMechanism
from privacy.likelihood import ClippedAdditiveKernel, GaussianNoise, LikelihoodKernel
from privacy.mechanisms import Mechanism, ReleaseCost, described_dimension, described_number
from privacy.ranges import Epsilon, check_dimension, check_split

__all__ = ["DEFAULT_PRIOR_SPREAD", "SHARE_GRID", "AnchoredMechanism", "AnchoredPiecewiseMechanism", "expected_error"]

# τ₀: how far (sd) a student's concept masteries are taken to lie from their own mean, before any report. It sets
# how much of a noisy concept report is kept (λ = τ₀²/(τ₀² + v)) and the anchor's share of ε. docs/results/frontier
# (the anchored rows) measures the release against the plain mechanism; the prior is a design choice, not fitted on
# the evaluation data.
DEFAULT_PRIOR_SPREAD = 0.2
# The anchor shares considered (0: no anchor, the details alone, still shrunk toward their own mean).
SHARE_GRID: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True, kw_only=True)
class AnchoredMechanism(Mechanism):
    """ε-LDP release of up to ``dimension`` values in [0, 1]: an anchor (their mean) and the values, pooled by
    their known noise (module docstring). ``detail_kind`` is the bounded mechanism both parts are released by.

    ``prior_spread`` (τ₀) is how far a student's concepts are taken to lie from their own mean before any report is
    seen; ``anchor_share`` None chooses the share that minimises the expected squared error of one released value
    under that prior (:func:`expected_error`), from the public ``dimension`` and ε alone.
    """

    epsilon: float
    dimension: int
    prior_spread: float = DEFAULT_PRIOR_SPREAD
    anchor_share: float | None = None
    name: str = field(default="anchored", init=False)
    detail_kind: ClassVar[type[BoundedMechanism]]

    def __post_init__(self) -> None:
        check_dimension(self.dimension)
        check_split(epsilon=self.epsilon, sensitivity=self.dimension)
        spread = self.prior_spread
        if isinstance(spread, bool) or not isinstance(spread, float | int) or not 0.0 < spread <= 1.0:
            raise ValueError(f"prior_spread must lie in (0, 1], got {spread!r}")
        share = self.anchor_share
        if share is None:  # chosen once, here, so the description rebuilds an equal mechanism
            object.__setattr__(self, "anchor_share", min(SHARE_GRID, key=self._expected_error))
        elif isinstance(share, bool) or not isinstance(share, float | int) or not 0.0 <= share < 1.0:
            raise ValueError(f"anchor_share must lie in [0, 1), got {share!r}")
        else:
            object.__setattr__(self, "anchor_share", float(share))

    @classmethod
    def for_request(cls, *, epsilon: Epsilon, delta: float, dimension: int) -> Self:
        return cls(epsilon=epsilon, dimension=dimension)  # pure ε-DP: δ is not used

    @classmethod
    def from_description(cls, description: Mapping[str, object]) -> Self:
        return cls(epsilon=described_number(description, "epsilon"), dimension=described_dimension(description),
                   prior_spread=described_number(description, "prior_spread"),
                   anchor_share=described_number(description, "anchor_share"))

    @property
    def share(self) -> float:
        """The share of ε the anchor gets: as given, or the best of :data:`SHARE_GRID` by :func:`expected_error`."""
        assert self.anchor_share is not None  # set in __post_init__
        return self.anchor_share

    def _parts(self, share: float) -> tuple[BoundedMechanism | None, BoundedMechanism]:
        anchor = None if share == 0.0 else self.detail_kind(epsilon=self.epsilon * share, dimension=1)
        return anchor, self.detail_kind(epsilon=self.epsilon * (1.0 - share), dimension=self.dimension)

    def _expected_error(self, share: float) -> float:
        try:
            anchor, details = self._parts(share)
        except ValueError:  # a share whose ε falls outside a mechanism's range is not a candidate
            return math.inf
        return expected_error(anchor, details, self.dimension, self.prior_spread)

    @cached_property  # built once per mechanism (the registry reuses mechanisms across requests)
    def _chosen(self) -> tuple[BoundedMechanism | None, BoundedMechanism]:
        return self._parts(self.share)

    @property
    def anchor(self) -> BoundedMechanism | None:
        """The anchor's release: one coordinate at ``share · ε``; None when the share is 0."""
        return self._chosen[0]

    @property
    def details(self) -> BoundedMechanism:
        """The values' release: ``dimension`` coordinates at ``(1 − share) · ε``."""
        return self._chosen[1]

    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        keys = list(values)
        if not keys:
            return {}
        # checked and clamped once, by the details' own input map (the anchor's is the same, and the mean of values
        # in [0, 1] lies in [0, 1]); then each part draws as its own privatize would, the anchor first
        x = self.details.checked(keys, values)
        anchor = None if self.anchor is None else float(self.anchor.release(np.array([x.mean()]), rng)[0])
        return dict(zip(keys, self.combine(anchor, self.details.release(x, rng)).tolist()))

    def combine(self, anchor: float | None, reports: np.ndarray) -> np.ndarray:
        """The post-processing of step 3 (module docstring): a function of the two releases and the public noise law
        only. Public so tests can check it apart from the noise draws."""
        d = reports.size
        r_bar = float(reports.mean())
        level = min(max(r_bar if anchor is None else anchor, 0.0), 1.0)  # where the noise law is read, in [0, 1]
        v_detail = self.details.variance_at(level)
        pooled = r_bar
        if self.anchor is not None and anchor is not None:
            # Two unbiased estimates of the mean: the anchor, and the details' mean (variance v/d, independent).
            w_anchor, w_details = 1.0 / self.anchor.variance_at(level), d / v_detail
            pooled = (w_anchor * anchor + w_details * r_bar) / (w_anchor + w_details)
        prior = self.prior_spread**2
        shrink = prior / (prior + v_detail)  # Bayes under the prior spread: the noisier the details, the less kept
        return np.clip(pooled + shrink * (reports - r_bar), 0.0, 1.0)

    def describe(self) -> dict[str, object]:
        return dict(self._description)  # a copy: callers may add to it

    @cached_property
    def _description(self) -> dict[str, object]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "sensitivity": float(self.dimension),
            "noise_scale": self.noise_sd,
            "dimension": self.dimension,
            "anchor_share": self.share,
            "prior_spread": self.prior_spread,
            "epsilon_anchor": self.epsilon * self.share,
            "epsilon_per_coordinate": self.details.epsilon_per_coordinate,
            "output_range": [0.0, 1.0],
            "clip_output": True,
            "unbiased": False,
        }

    def charge(self) -> ReleaseCost:
        # Basic composition of the anchor and the details: their ε add up to this mechanism's ε.
        return ReleaseCost(epsilon=float(self.epsilon), delta=0.0, mechanism=self.name)

    @cached_property  # read by every posterior aggregation (likelihood): computed once per mechanism
    def noise_sd(self) -> float:
        """The root of :func:`expected_error` at the chosen share: the typical error of one released value."""
        return math.sqrt(expected_error(self.anchor, self.details, self.dimension, self.prior_spread))

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # An approximation (module docstring): the release's expected error plus the entity's own error.
        return ClippedAdditiveKernel(GaussianNoise(math.hypot(self.noise_sd, entity_error_sd)), self.name)


def expected_error(anchor: BoundedMechanism | None, details: BoundedMechanism, d: int, spread: float) -> float:
    """E[(released − clean)²] of one value, when all ``d`` values are released, the concepts lie ``spread`` (sd) from
    their mean, and the noise variances are read at a value of ½ (the middle of the range).

    The pooled mean's variance, plus the deviation's: each deviation is a noisy report shrunk by λ = τ₀²/(τ₀² + v),
    which leaves (1 − 1/d)·τ₀²v/(τ₀² + v) (the Bayes risk of one coordinate). The small correlation between the
    pooled mean and the mean of the deviations is ignored.
    """
    v_detail = float(details.variance(0.5))
    precision = d / v_detail + (0.0 if anchor is None else 1.0 / float(anchor.variance(0.5)))
    prior = spread**2
    return 1.0 / precision + (1.0 - 1.0 / d) * prior * v_detail / (prior + v_detail)


@dataclass(frozen=True, kw_only=True)
class AnchoredPiecewiseMechanism(AnchoredMechanism):
    """The anchored release with the piecewise mechanism (Wang et al.) for both parts."""

    name: str = field(default="anchored_piecewise", init=False)
    detail_kind: ClassVar[type[BoundedMechanism]] = PiecewiseMechanism
