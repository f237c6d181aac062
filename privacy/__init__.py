"""Local differential privacy for entity answers (imports nothing of fedcd but itself)."""

from privacy.bounded import DuchiMechanism, HybridMechanism, PiecewiseMechanism
from privacy.gaussian import AnalyticGaussianMechanism, analytic_gaussian_sigma
from privacy.mechanisms import (
    LaplaceMechanism,
    Mechanism,
    NoNoise,
    SensitivityMode,
    laplace_for_request,
    make_rng,
    sensitivity_for,
)
from privacy.registry import DEFAULT_DELTA, MECHANISM_NAMES, MechanismName, mechanism_for_request
from privacy.sampling import SecureLaplaceMechanism

__all__ = [
    "DEFAULT_DELTA",
    "MECHANISM_NAMES",
    "AnalyticGaussianMechanism",
    "DuchiMechanism",
    "HybridMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "MechanismName",
    "NoNoise",
    "PiecewiseMechanism",
    "SecureLaplaceMechanism",
    "SensitivityMode",
    "analytic_gaussian_sigma",
    "laplace_for_request",
    "make_rng",
    "mechanism_for_request",
    "sensitivity_for",
]
