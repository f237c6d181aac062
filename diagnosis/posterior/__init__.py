"""Bayes post-processing at the aggregator: the posterior of each concept's mastery.

Every entity's mechanism is public (a :class:`privacy.Mechanism`, described by ``describe()``), so
the aggregator can write down the likelihood of each privatized report and combine the reports of
all entities with a prior into a posterior for the concept's mastery x ∈ [0, 1]. Everything here is
a function of the released reports and public parameters only: it is post-processing and costs no
privacy.

**Model.** For one student and one concept, the latent mastery is x ∈ [0, 1] with a
Beta(a, b) prior (fitted per concept on the calibration split, :func:`fit_beta_prior`; uniform
when there is none). Entity j's clean answer is u_j = x + e_j with e_j ~ N(0, τ_j²) independent
(τ_j = ``entity_error_sd``, default 0: the entity reports the truth; fit it with
:func:`fit_entity_error_sd`). The entity has no bias in this model: a biased entity's τ fitted as
a root-mean-square error widens the posterior instead. Entity j releases r_j = M_j(u_j) with its
public mechanism M_j, independently of the other entities. Each mechanism owns the likelihood of its
reports (``Mechanism.likelihood(τ)``, kernels in :mod:`privacy.likelihood`); here is what each one is:

* ``laplace`` (the paper's): r = clip(u + Lap(b), 0, 1), b = Δ/ε. A report strictly inside
  (0, 1) contributes the density of r − x under Lap(b) ⊛ N(0, τ²) (the normal-Laplace law, in
  closed form; plain Laplace when τ = 0). A report exactly 0 or 1 is a point mass:
  P(r = 0 | x) = F(−x), P(r = 1 | x) = 1 − F(1 − x) = F(x − 1). The two kinds of report are
  measured against different dominating measures (Lebesgue, atoms), but for a posterior over x
  only the x-dependence of each factor matters, and that is exact. Exact for this model (the
  Laplace mechanism does not clamp its input).
* ``analytic_gaussian``: r = clip(u + N(0, σ²), 0, 1): as Laplace with N(0, σ² + τ²). The
  mechanism clamps its input u to [0, 1] first; with τ > 0 that clamp is *ignored* (an
  approximation of order τ near the ends, negligible when τ ≪ σ). The release's 2^-20 rounding is
  ignored (treated as a density).
* ``secure_laplace`` (snapping): exact on its output grid. The release is ½ + kΛ before the
  final clip, so each report is an interval of the pre-rounding value z = (u − ½) + Lap(λ):
  interior r = ½ + kΛ ⇔ z ∈ [(k − ½)Λ, (k + ½)Λ); r = 0 ⇔ z < (k₀ + ½)Λ with k₀ = ⌊−½/Λ⌋;
  r = 1 ⇔ z ≥ (k₁ − ½)Λ with k₁ = ⌈½/Λ⌉. The floating-point Laplace draw is treated as exact
  Laplace; with τ > 0 the noise is normal-Laplace and the input clamp is ignored, as above.
* ``duchi``: t = 2·clip(u, 0, 1) − 1 is released as ±C (x-scale (1 ± C)/2) with
  P(+) = ½ + t/(2C) at ε_c = ``epsilon_per_coordinate``. P(+) is linear in t, so the entity error
  enters exactly through E[clip(x + e, 0, 1)] (closed form).
* ``piecewise``: the known piecewise-constant density of the output given t (density p_high on
  [l(t), r(t)], p_low elsewhere on [−C, C]). With τ > 0 it is averaged exactly over the clamped
  clean answer: p_low + (p_high − p_low)·P(l(t) ≤ v ≤ r(t)). The 2^-20 release rounding is
  ignored. ``clip_output=True`` adds point masses at 0 and 1 (closed form, also with τ > 0).
* ``hybrid``: PM with probability α, Duchi otherwise. A report equal to one of Duchi's two
  values is a Duchi point mass; any other report is PM's density times α.
* ``none`` (no privacy): r = u. With τ > 0 this is the Gaussian case with σ = 0 (the answer's own
  clip to [0, 1] gives the point masses). With τ = 0 the report *is* x: the posterior is a point
  mass at r; noiseless reports that disagree are impossible under the model and raise
  :class:`DegeneratePosteriorError` (give those entities a τ > 0).

Mechanisms are assumed to release on [0, 1] (``LaplaceMechanism.likelihood`` ignores its
``lower``/``upper``, which are not in its description either; the pipeline always uses the defaults).

**Computation.** The posterior is evaluated on G equal cells of [0, 1] (G = ``grid_size``,
raised automatically to 40 cells per noise scale when a report is sharper than that, up to
:data:`MAX_GRID_SIZE`). Each cell's weight is the prior's exact mass of the cell (regularized
incomplete beta, so priors with a, b < 1 are handled) times the likelihood at the cell centre;
the posterior is treated as uniform within a cell for quantiles and the variance. Log-space
throughout. Error: O(h²) for smooth likelihoods, O(h) where a likelihood jumps (the piecewise
mechanism with τ = 0), h = 1/G.

Public API: :class:`BetaPrior`, :func:`fit_beta_prior`, :func:`fit_concept_priors`,
:func:`fit_entity_error_sd`, :class:`ReportModel`, :func:`posterior_grid`,
:func:`posterior_summary`, :func:`posterior_summaries` (vectorized over students),
:func:`posterior_aggregate` and :class:`PosteriorAggregator` (an :class:`Aggregator`).

Layout: :mod:`.priors` (the Beta prior and the fits), :mod:`.model` (:class:`ReportModel`: a
mechanism and τ, holding the kernel the mechanism built), :mod:`.grid` (the posterior on a grid and
its summaries), :mod:`.aggregate` (aggregation over entities and concepts). The noise laws and the
likelihood kernels live with the mechanisms, in :mod:`privacy.likelihood`.
"""

from diagnosis.posterior.aggregate import (
    DEFAULT_ENTITY_ERROR_SD,
    PosteriorAggregation,
    PosteriorAggregator,
    posterior_aggregate,
)
from diagnosis.posterior.grid import (
    DEFAULT_GRID_SIZE,
    DEFAULT_LEVEL,
    MAX_GRID_SIZE,
    Estimate,
    PosteriorSummaries,
    PosteriorSummary,
    posterior_grid,
    posterior_summaries,
    posterior_summary,
)
from diagnosis.posterior.model import ReportModel
from diagnosis.posterior.priors import (
    UNIFORM_PRIOR,
    BetaPrior,
    fit_beta_prior,
    fit_concept_priors,
    fit_entity_error_sd,
)
from diagnosis.posterior.spread import UncertainAnswer, beta_floor_width
from privacy import DegeneratePosteriorError  # raised here and by the mechanisms' kernels: one type

__all__ = [
    "DEFAULT_ENTITY_ERROR_SD",
    "DEFAULT_GRID_SIZE",
    "DEFAULT_LEVEL",
    "MAX_GRID_SIZE",
    "UNIFORM_PRIOR",
    "BetaPrior",
    "DegeneratePosteriorError",
    "Estimate",
    "PosteriorAggregation",
    "PosteriorAggregator",
    "PosteriorSummaries",
    "PosteriorSummary",
    "ReportModel",
    "UncertainAnswer",
    "beta_floor_width",
    "fit_beta_prior",
    "fit_concept_priors",
    "fit_entity_error_sd",
    "posterior_aggregate",
    "posterior_grid",
    "posterior_summaries",
    "posterior_summary",
]
