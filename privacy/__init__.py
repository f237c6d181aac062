"""Local differential privacy for entity answers (imports nothing of fedcd but itself)."""

from privacy.mechanisms import (
    LaplaceMechanism,
    Mechanism,
    NoNoise,
    SensitivityMode,
    laplace_for_request,
    make_rng,
    sensitivity_for,
)

__all__ = [
    "LaplaceMechanism",
    "Mechanism",
    "NoNoise",
    "SensitivityMode",
    "laplace_for_request",
    "make_rng",
    "sensitivity_for",
]
