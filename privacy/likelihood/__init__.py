"""The likelihood of a privatized report, for Bayes post-processing: noise laws and one kernel per mechanism family.

Each mechanism owns its likelihood (``Mechanism.likelihood(entity_error_sd)`` returns one of these
kernels), so the posterior in :mod:`diagnosis.posterior` never switches on a mechanism's name.
"""

from privacy.likelihood.kernels import (
    MATCH_TOL,
    ClippedAdditiveKernel,
    DegeneratePosteriorError,
    DuchiKernel,
    ExactKernel,
    HybridKernel,
    LikelihoodKernel,
    PiecewiseKernel,
    SnappedLaplaceKernel,
)
from privacy.likelihood.noise import (
    GaussianNoise,
    LaplaceNoise,
    Noise,
    NormalLaplaceNoise,
    expected_clamped_affine,
    laplace_with_error,
    prob_clip_in,
)

__all__ = [
    "MATCH_TOL",
    "ClippedAdditiveKernel",
    "DegeneratePosteriorError",
    "DuchiKernel",
    "ExactKernel",
    "GaussianNoise",
    "HybridKernel",
    "LaplaceNoise",
    "LikelihoodKernel",
    "Noise",
    "NormalLaplaceNoise",
    "PiecewiseKernel",
    "SnappedLaplaceKernel",
    "expected_clamped_affine",
    "laplace_with_error",
    "prob_clip_in",
]
