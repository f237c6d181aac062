"""The documented parameter ranges over which every mechanism and accountant is total.

A request's privacy parameters must lie in these ranges; the API's request schema uses the same
constants (a request outside them is a 422, never a 500), and where a value enters privacy/ it is
made a validated type (:class:`Epsilon`; ``ValueError`` naming the parameter and the range). Inside them every mechanism returns
finite values within its documented output range, every loop in it ends after a bounded number
of steps, and every accountant's ``spent`` is finite. docs/privacy.md explains the choice:

* ``EPSILON_MIN = 1e-3``: at ε = 10⁻³ a release is already pure noise (Laplace scale 1000·Δ on
  values in [0, 1]); smaller ε buys nothing and, near ε = 10⁻³⁰⁰, overflowed the bounded
  mechanisms (their output bound grows like 2/ε).
* ``EPSILON_MAX = 1e3``: the default lifetime cap of a student (``FEDCD_PRIVACY_CAP_EPSILON``),
  so no larger single request could be charged there anyway; and it keeps s = e^(ε/2) of the
  piecewise mechanism (whose densities the posterior calibration evaluates) a finite double.
* ``DELTA_MIN = 1e-12``, ``DELTA_MAX = 0.1``: δ is a failure probability; above 0.1 a release
  may expose the answer outright too often to call it private, and below 10⁻¹² it vanishes in
  the floating-point sums of a student's lifetime δ (caps are ~10⁻⁴; the ledger's relative
  slack is 10⁻⁹).
* ``DIMENSION_MAX = 1_000_000``: the most concepts one budget is split over (Δ); the API's own
  limit on concepts per Q-matrix is far lower.

The mechanism classes check the numerical domain they need, which contains every allowed request.
Those that split ε over Δ concepts (Laplace, secure Laplace, Duchi, piecewise, hybrid) add noise
that depends only on ε/Δ, the ε of each concept, so they check ε/Δ ∈ [``COORDINATE_EPSILON_MIN``,
EPSILON_MAX] = [10⁻⁹, 1000] with 0 < Δ ≤ DIMENSION_MAX (:func:`check_split`): the bounded
mechanisms' output bound 1 + 2/(e^(ε/Δ) − 1) is then at most ~4·10⁹. (Statistical tests use this
to release many values at once: large Δ, large ε, moderate ε/Δ.) The Gaussian does not split ε
(its L2 sensitivity covers the vector), so it checks ε and δ themselves.

An accountant records releases, not requests: the snapping mechanism is charged slightly more than
its nominal ε, and a ledger replays histories charged under earlier versions, so an accountant
accepts any finite ε in (0, ``MAX_RELEASE_EPSILON``] per release; with at most 10⁶ per release a
history's sum stays finite.

ε's range is checked in one place: constructing an :class:`Epsilon`. The functions that take ε from outside
privacy/ (:func:`privacy.mechanism_for_request`, :func:`privacy.laplace_for_request`,
:func:`privacy.cohort_statistics`, the Gaussian calibration) make one, and what they pass inward is that validated
value (``Mechanism.for_request`` takes an ``Epsilon``); making an ``Epsilon`` of an ``Epsilon`` returns it unchecked,
so a value validated at the edge is never checked again. The API's schemas and settings state the same range from
these constants.
"""

from __future__ import annotations

import math
from numbers import Real

__all__ = [
    "DELTA_MAX",
    "DELTA_MIN",
    "DIMENSION_MAX",
    "EPSILON_MAX",
    "EPSILON_MIN",
    "COORDINATE_EPSILON_MIN",
    "MAX_RELEASE_EPSILON",
    "NOISE_MULTIPLIER_RANGE",
    "Epsilon",
    "check_delta",
    "check_dimension",
    "check_coordinate_epsilon",
    "check_split",
]

EPSILON_MIN = 1e-3
EPSILON_MAX = 1e3
DELTA_MIN = 1e-12
DELTA_MAX = 0.1
DIMENSION_MAX = 1_000_000
COORDINATE_EPSILON_MIN = EPSILON_MIN / DIMENSION_MAX
MAX_RELEASE_EPSILON = 1e6
# σ/Δ₂ of a Gaussian release. The analytic calibration gives 0.023 … 5412 over the allowed (ε, δ);
# the range keeps ρ = 1/(2(σ/Δ₂)²) and every RDP order's α·ρ finite with a wide margin.
NOISE_MULTIPLIER_RANGE = (1e-6, 1e6)


def _number(value: object, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value!r}")
    number = float(value)
    if not low <= number <= high:
        raise ValueError(f"{name} must lie in [{low:g}, {high:g}], got {value!r}")
    return number


class Epsilon(float):
    """The ε of one request, validated: a finite float in [EPSILON_MIN, EPSILON_MAX]; else ``ValueError``.

    A ``float`` (it computes, compares, hashes and serialises as one), so a validated ε travels inward as a plain
    number does, and a signature that takes an ``Epsilon`` says its range was checked at the edge.
    """

    __slots__ = ()

    def __new__(cls, value: object) -> Epsilon:
        if type(value) is cls:  # validated already: carried, not checked again
            return value  # type: ignore[return-value]
        return super().__new__(cls, _number(value, "epsilon", EPSILON_MIN, EPSILON_MAX))


def check_delta(value: object, *, name: str = "delta") -> float:
    """``value`` as a float if it lies in [DELTA_MIN, DELTA_MAX], else ``ValueError``."""
    return _number(value, name, DELTA_MIN, DELTA_MAX)


def check_dimension(value: object, *, name: str = "dimension") -> int:
    """``value`` if it is an integer in [1, DIMENSION_MAX], else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= DIMENSION_MAX:
        raise ValueError(f"{name} must be an integer in [1, {DIMENSION_MAX}], got {value!r}")
    return value


def check_coordinate_epsilon(value: object, *, name: str = "epsilon") -> float:
    """The ε of one concept (one scalar release) if it lies in [COORDINATE_EPSILON_MIN, EPSILON_MAX]."""
    return _number(value, name, COORDINATE_EPSILON_MIN, EPSILON_MAX)


def check_split(*, epsilon: object, sensitivity: object) -> float:
    """ε/Δ, the ε of each concept, after checking ε > 0, 0 < Δ ≤ DIMENSION_MAX and ε/Δ in range."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real) or not (0 < float(epsilon) < math.inf):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if (
        isinstance(sensitivity, bool)
        or not isinstance(sensitivity, Real)
        or not 0 < float(sensitivity) <= DIMENSION_MAX
    ):
        raise ValueError(f"sensitivity must be a number in (0, {DIMENSION_MAX}], got {sensitivity!r}")
    per_concept = float(epsilon) / float(sensitivity)
    if not COORDINATE_EPSILON_MIN <= per_concept <= EPSILON_MAX:
        raise ValueError(
            f"epsilon/sensitivity, the ε of each concept, must lie in [{COORDINATE_EPSILON_MIN:g}, "
            f"{EPSILON_MAX:g}]; got epsilon={epsilon!r}, sensitivity={sensitivity!r} ({per_concept:g} per concept)"
        )
    return per_concept
