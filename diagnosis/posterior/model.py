"""How one entity's report arose: :class:`ReportModel` (its mechanism + its error sd τ).

The likelihood itself belongs to the mechanism (``Mechanism.likelihood``, :mod:`privacy.likelihood`):
the model holds the kernel the mechanism built for τ and evaluates it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from privacy import LikelihoodKernel, Mechanism


@dataclass(frozen=True)
class ReportModel:
    """An entity's public mechanism and its error sd τ (``entity_error_sd``): u = x + N(0, τ²) is released by it."""

    mechanism: Mechanism
    entity_error_sd: float = 0.0
    kernel: LikelihoodKernel = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tau = self.entity_error_sd
        if isinstance(tau, bool) or not (isinstance(tau, int | float) and math.isfinite(tau) and tau >= 0):
            raise ValueError(f"entity_error_sd must be a finite number >= 0, got {tau!r}")
        if not isinstance(self.mechanism, Mechanism):
            raise TypeError(f"mechanism must be a privacy.Mechanism, got {self.mechanism!r}")
        object.__setattr__(self, "entity_error_sd", float(tau))
        object.__setattr__(self, "kernel", self.mechanism.likelihood(float(tau)))

    @property
    def noiseless(self) -> bool:
        """The report equals x exactly (no privacy noise and τ = 0)."""
        return self.kernel.exact

    def log_likelihood(self, reports: Sequence[float] | np.ndarray, x: Sequence[float] | np.ndarray) -> np.ndarray:
        """log p(report_i | x_g), shape (len(reports), len(x)); a point-mass report gives a log probability."""
        r = np.atleast_1d(np.asarray(reports, dtype=np.float64))
        xs = np.atleast_1d(np.asarray(x, dtype=np.float64))
        if not np.all(np.isfinite(r)):
            raise ValueError("reports must be finite")
        self.kernel.check(r)
        return self.kernel.loglik(r, xs)
