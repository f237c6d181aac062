"""Mechanisms by name, built for one request's privacy parameters.

``laplace`` is the paper's mechanism and the default. The others answer the same
question — release an entity's per-concept mastery vector under ε-LDP (ε, δ for the
Gaussian) — with different noise shapes; see each class for its guarantee.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from privacy.bounded import DuchiMechanism, HybridMechanism, PiecewiseMechanism
from privacy.gaussian import AnalyticGaussianMechanism
from privacy.mechanisms import LaplaceMechanism, Mechanism, NoNoise, SensitivityMode, sensitivity_for
from privacy.ranges import check_delta, check_epsilon
from privacy.sampling import SecureLaplaceMechanism

__all__ = ["DEFAULT_DELTA", "MECHANISM_NAMES", "MechanismName", "charge_parameters", "mechanism_for_request"]

MechanismName = Literal["laplace", "secure_laplace", "gaussian", "duchi", "piecewise", "hybrid"]
MECHANISM_NAMES: tuple[MechanismName, ...] = ("laplace", "secure_laplace", "gaussian", "duchi", "piecewise", "hybrid")
DEFAULT_DELTA = 1e-5


@lru_cache(maxsize=4096)  # mechanisms are frozen; a diagnosis builds the same one twice (charge, release)
def mechanism_for_request(
    *,
    name: str = "laplace",
    epsilon: float | None,
    mode: SensitivityMode,
    n_concepts_total: int,
    n_concepts_assessed: int,
    delta: float = DEFAULT_DELTA,
) -> Mechanism:
    """The mechanism for one request; ``epsilon=None`` means the request asked for no noise.

    ``mode`` sets how many coordinates the budget covers: all K concepts of the Q-matrix
    (``paper``) or only those the request assesses (``assessed``). For Laplace that is the
    L1 sensitivity Δ; for the Gaussian the L2 sensitivity is √d; the bounded mechanisms
    split ε over the d coordinates.

    ``epsilon`` must lie in [EPSILON_MIN, EPSILON_MAX] and, for the Gaussian, ``delta`` in
    [DELTA_MIN, DELTA_MAX] (:mod:`privacy.ranges`); anything else is a ``ValueError``.
    """
    if epsilon is None:
        return NoNoise()
    check_epsilon(epsilon)
    if name == "gaussian":
        check_delta(delta)
    d = int(sensitivity_for(mode, n_concepts_total=n_concepts_total, n_concepts_assessed=n_concepts_assessed))
    if name == "laplace":
        return LaplaceMechanism(epsilon=epsilon, sensitivity=float(d))
    if name == "secure_laplace":
        return SecureLaplaceMechanism(epsilon=epsilon, sensitivity=float(d))
    if name == "gaussian":
        return AnalyticGaussianMechanism.for_vector(epsilon=epsilon, delta=delta, dimension=d)
    if name == "duchi":
        return DuchiMechanism(epsilon=epsilon, dimension=d)
    if name == "piecewise":
        return PiecewiseMechanism(epsilon=epsilon, dimension=d)
    if name == "hybrid":
        return HybridMechanism(epsilon=epsilon, dimension=d)
    raise ValueError(f"unknown mechanism {name!r} (use {', '.join(MECHANISM_NAMES)})")


def charge_parameters(mechanism: Mechanism) -> dict[str, float | str | None]:
    """What one release by ``mechanism`` costs, for a privacy accountant or ledger.

    The snapping mechanism is charged its effective ε (slightly above the nominal one);
    the Gaussian is charged (ε, δ) and carries σ/Δ₂ so an RDP accountant can compose it tightly.
    """
    info = mechanism.describe()
    if info["epsilon"] is None:
        raise ValueError("a release without noise has unbounded privacy cost and cannot be charged")
    epsilon = float(info.get("effective_epsilon") or info["epsilon"])  # type: ignore[arg-type]
    delta = float(info.get("delta") or 0.0)  # type: ignore[arg-type]
    sigma = None
    if isinstance(mechanism, AnalyticGaussianMechanism):
        sigma = mechanism.sigma / mechanism.sensitivity
    return {"epsilon": epsilon, "delta": delta, "mechanism": str(info["mechanism"]), "sigma_over_sensitivity": sigma}
