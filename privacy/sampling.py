"""Floating-point-safe Laplace noise: Mironov's (2012) snapping mechanism.

Why: the textbook sampler ``x + b·sign·ln(U)`` with ``U = rng.random()`` leaks the input
through the low bits of the result. ``rng.random()`` returns multiples of 2^-53, so ``ln(U)``
takes only a sparse, input-independent set of values, and ``x + noise`` rounded to a double
lands on sets of outputs that differ between inputs: some outputs are possible for ``x`` and
impossible for ``x'`` (Mironov, "On significance of the least significant bits for
differential privacy", CCS 2012). The ratio of output probabilities is then unbounded.

The snapping mechanism (Mironov §5.2) for a sensitivity-1 value ``x``, scale λ and bound B:

    y = clamp_B( round_Λ( clamp_B(x) + S·λ·ln(U*) ) )

* ``U*`` is uniform on (0, 1) with *full* precision: every double in (0, 1) can occur, with
  probability proportional to its spacing (a geometric exponent and a 52-bit mantissa,
  :func:`uniform_full_precision`), not just the multiples of 2^-53.
* ``S`` is an independent, exact random sign bit.
* ``Λ`` is the smallest power of two ≥ λ and ``round_Λ`` rounds to the nearest multiple of Λ.
  Λ is a power of two, so dividing by it and multiplying back are exact.
* The output is clamped to [−B, B] again, which removes the far tails where ``ln(U*)``
  becomes coarse.

Privacy cost (Mironov, Theorem 1 and its proof; the same bound is used by SmartNoise/OpenDP's
``redefine_epsilon``): with η = 2^-53 (the unit round-off of a double) and λ < B < 2^46·λ, the
mechanism is ε'-DP for inputs at distance ≤ 1, with

    ε' = (1 + 12·B·η)/λ + 2η          (:func:`snapping_epsilon`)

slightly more than the nominal 1/λ. The proof assumes ``ln`` is accurate to within one unit in
the last place; we use ``math.log`` (the C library's ``log``; glibc's is < 1 ulp).

Randomness comes from a ``random_bytes(n) -> bytes`` callable: :func:`os_random_bytes`
(``secrets.token_bytes``, the OS CSPRNG) in production, :func:`generator_random_bytes`
(``np.random.Generator.bytes``) in tests, so that runs can be repeated. A numpy generator is
not a CSPRNG: its state could in principle be recovered from its outputs.

Cost of the guarantee: the released value lies on a grid of spacing Λ ≥ λ. For the paper's
scale λ = Δ/ε ≥ 1 on [0, 1] values this grid is coarse (see
:class:`SecureLaplaceMechanism`), which adds at most Λ²/12 ≤ λ²/3 to the noise variance of 2λ².
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privacy.likelihood import LikelihoodKernel, SnappedLaplaceKernel, laplace_with_error
from privacy.mechanisms import Mechanism, ReleaseCost, described_number
from privacy.ranges import Epsilon, check_split

__all__ = [
    "RELEASE_GRID",
    "ROUNDOFF",
    "RandomBytes",
    "SecureLaplaceMechanism",
    "generator_random_bytes",
    "laplace_noise",
    "os_random_bytes",
    "power_of_two_at_least",
    "snap_laplace",
    "snapping_epsilon",
    "stochastic_round",
    "uniform_full_precision",
]

RandomBytes = Callable[[int], bytes]
ROUNDOFF = 2.0**-53  # η: unit round-off of IEEE-754 double precision
RELEASE_GRID = 2.0**-20  # fixed dyadic grid continuous releases are rounded to (see stochastic_round)
_MANTISSA_MASK = np.uint64((1 << 52) - 1)
_MAX_LEADING_ZEROS = 1021  # keeps U* ≥ 2^-1022 (normal doubles); reaching it has probability 2^-1022


def os_random_bytes(n: int) -> bytes:
    """``n`` bytes from the OS CSPRNG (``secrets.token_bytes``, i.e. ``os.urandom``)."""
    return secrets.token_bytes(n)


def generator_random_bytes(rng: np.random.Generator) -> RandomBytes:
    """Random bytes from a numpy generator: repeatable, for tests only (not a CSPRNG)."""
    return rng.bytes


def _words(n: int, random_bytes: RandomBytes) -> np.ndarray:
    raw = random_bytes(8 * n)
    if len(raw) != 8 * n:
        raise ValueError(f"random_bytes returned {len(raw)} bytes, expected {8 * n}")
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


def uniform_full_precision(size: int, random_bytes: RandomBytes) -> np.ndarray:
    """Draws of U uniform on [0, 1) rounded *down* to a double, with all 52 mantissa bits random.

    The binary exponent is geometric (the number of leading zeros of an endless random bit
    string, read 53 bits at a time) and the mantissa is 52 fresh random bits, so the binade
    [2^-(z+1), 2^-z) has probability 2^-(z+1) and is filled uniformly. Zero never occurs.
    """
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    mantissa = _words(size, random_bytes) & _MANTISSA_MASK
    zeros = np.zeros(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:
        chunk = (_words(pending.size, random_bytes) >> np.uint64(11)).astype(np.float64)  # 53 bits, exact
        _, bit_length = np.frexp(chunk)  # chunk in [2^(bit_length-1), 2^bit_length) when > 0
        hit = chunk > 0
        zeros[pending[hit]] += 53 - bit_length[hit]
        zeros[pending[~hit]] += 53
        pending = pending[~hit]
        pending = pending[zeros[pending] < _MAX_LEADING_ZEROS]
    zeros = np.minimum(zeros, _MAX_LEADING_ZEROS)
    significand = (mantissa | np.uint64(1 << 52)).astype(np.float64)  # in [2^52, 2^53), exact
    return np.ldexp(significand, -(53 + zeros).astype(np.int32))


def laplace_noise(size: int, *, scale: float, random_bytes: RandomBytes) -> np.ndarray:
    """Laplace(scale) draws S·scale·ln(U*) with a full-precision U* and an exact sign bit S (not snapped)."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    u = uniform_full_precision(size, random_bytes)
    sign_bits = _words(size, random_bytes) >> np.uint64(63)
    sign = np.where(sign_bits == 1, -1.0, 1.0)
    log_u = np.fromiter((math.log(v) for v in u.tolist()), dtype=np.float64, count=size)
    return sign * (scale * log_u)


def power_of_two_at_least(x: float) -> float:
    """The smallest power of two ≥ ``x`` (exact; ``x`` must be a positive finite number)."""
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"x must be a finite number > 0, got {x}")
    mantissa, exponent = math.frexp(x)  # x = mantissa·2^exponent, mantissa in [0.5, 1)
    return x if mantissa == 0.5 else math.ldexp(1.0, exponent)


def _check_snapping(scale: float, bound: float) -> None:
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    if not (math.isfinite(bound) and scale < bound < 2.0**46 * scale):
        raise ValueError(f"snapping needs scale < bound < 2^46·scale, got scale={scale}, bound={bound}")


def snapping_epsilon(*, scale: float, bound: float) -> float:
    """Mironov's ε' = (1 + 12·B·η)/λ + 2η for inputs at distance ≤ 1 (η = 2^-53)."""
    _check_snapping(scale, bound)
    return (1.0 + 12.0 * bound * ROUNDOFF) / scale + 2.0 * ROUNDOFF


def snap_laplace(values: np.ndarray, *, scale: float, bound: float, random_bytes: RandomBytes) -> np.ndarray:
    """The snapping mechanism on sensitivity-1 ``values``: outputs are multiples of Λ in [−B, B].

    Each value is ε'-DP (:func:`snapping_epsilon`) with respect to a change of at most 1.
    ``bound`` should be a multiple of Λ (e.g. a power of two ≥ Λ) so clamped outputs stay on the grid.
    """
    _check_snapping(scale, bound)
    x = np.clip(np.asarray(values, dtype=np.float64), -bound, bound)
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    grid = power_of_two_at_least(scale)
    noisy = x + laplace_noise(x.size, scale=scale, random_bytes=random_bytes).reshape(x.shape)
    return np.clip(np.rint(noisy / grid) * grid, -bound, bound)


def stochastic_round(values: np.ndarray, *, grid: float, rng: np.random.Generator) -> np.ndarray:
    """Round each value to a neighbouring multiple of ``grid`` (a power of two), up with probability frac.

    Unbiased (E[out] = value) and the possible outputs are multiples of ``grid`` whatever the input,
    so a release no longer carries input-dependent low bits. For a continuous mechanism whose
    densities for two inputs differ by at most e^ε pointwise, P(out = k·grid) is the density
    integrated against a fixed triangle kernel, so the ratio stays ≤ e^ε (up to the floating-point
    resolution of the underlying draw, far finer than ``grid``). A hardening, not Mironov's proof.
    """
    if power_of_two_at_least(grid) != grid:
        raise ValueError(f"grid must be a power of two, got {grid}")
    scaled = np.asarray(values, dtype=np.float64) / grid  # exact: division by a power of two
    floor = np.floor(scaled)
    up = rng.random(scaled.shape) < (scaled - floor)
    return (floor + up) * grid


@dataclass(frozen=True, kw_only=True)
class SecureLaplaceMechanism(Mechanism):
    """The paper's mechanism (Laplace(Δ/ε) per concept, clipped to [0, 1]) with snapping.

    Values are in [0, 1], so each concept has sensitivity 1 and is released with
    ε_c = ε/Δ; up to Δ concepts together cost ε by basic composition (Δ = K, or the number of
    assessed concepts). Each concept is centred (x − ½, clamped to [−½, ½]), snapped with
    λ = Δ/ε and B = max(2Λ, ½), shifted back and clipped to [0, 1] (post-processing).

    ``effective_epsilon`` = Δ·ε'_c = ε·(1 + 12·B·η) + 2η·Δ is what the release really costs.

    Output grid: values are ½ + k·Λ before the final clip, so for λ ≥ ½ (Λ ≥ ½) a concept is
    released as one of {0, ½, 1}. That is the price of a provable guarantee at this noise level.

    Total for ε/Δ in [COORDINATE_EPSILON_MIN, EPSILON_MAX] and 1 ≤ Δ ≤ DIMENSION_MAX
    (:func:`privacy.ranges.check_split`): then 10⁻³ ≤ λ ≤ 10⁹, so λ < B < 2^46·λ always holds.

    ``randomness="os"`` (default) draws from the OS CSPRNG and *ignores* the ``rng`` argument of
    :meth:`privatize`; ``randomness="generator"`` draws from ``rng`` (repeatable; tests only).
    """

    epsilon: float
    sensitivity: float
    randomness: Literal["os", "generator"] = "os"
    name: str = field(default="secure_laplace", init=False)

    def __post_init__(self) -> None:
        check_split(epsilon=self.epsilon, sensitivity=self.sensitivity)
        if not self.sensitivity >= 1:
            raise ValueError(f"sensitivity must be >= 1 (values in [0, 1]), got {self.sensitivity}")
        if self.randomness not in ("os", "generator"):
            raise ValueError(f"randomness must be 'os' or 'generator', got {self.randomness!r}")
        _check_snapping(self.scale, self.bound)

    @property
    def scale(self) -> float:
        """λ = Δ/ε, the Laplace scale per concept."""
        return self.sensitivity / self.epsilon

    @property
    def epsilon_per_coordinate(self) -> float:
        return self.epsilon / self.sensitivity

    @property
    def grid(self) -> float:
        """Λ, the smallest power of two ≥ λ: released values are ½ + k·Λ before the final clip."""
        return power_of_two_at_least(self.scale)

    @property
    def bound(self) -> float:
        """B, the snapping clamp around ½ (a multiple of Λ, > λ, ≥ ½ so no value in [0, 1] is clamped)."""
        return max(2.0 * self.grid, 0.5)

    @property
    def effective_epsilon(self) -> float:
        """ε·(1 + 12·B·η) + 2η·Δ: Mironov's bound summed over the Δ concepts the budget covers."""
        return self.sensitivity * snapping_epsilon(scale=self.scale, bound=self.bound)

    def privatize(self, values: Mapping[str, float], rng: np.random.Generator) -> dict[str, float]:
        keys = list(values)
        if len(keys) > self.sensitivity:
            raise ValueError(f"{len(keys)} values exceed the budget's sensitivity Δ={self.sensitivity}")
        random_bytes = os_random_bytes if self.randomness == "os" else generator_random_bytes(rng)
        x = np.array([values[k] for k in keys], dtype=np.float64)
        if not np.all(np.isfinite(x)):
            raise ValueError("values must be finite")
        centred = np.clip(x, 0.0, 1.0) - 0.5
        snapped = snap_laplace(centred, scale=self.scale, bound=self.bound, random_bytes=random_bytes)
        released = np.clip(snapped + 0.5, 0.0, 1.0)
        return {k: float(v) for k, v in zip(keys, released)}

    def describe(self) -> dict[str, object]:
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "sensitivity": self.sensitivity,
            "noise_scale": self.scale,
            "epsilon_per_coordinate": self.epsilon_per_coordinate,
            "effective_epsilon": self.effective_epsilon,
            "snapping_grid": self.grid,
            "snapping_bound": self.bound,
            "randomness": self.randomness,
        }

    @classmethod
    def for_request(cls, *, epsilon: Epsilon, delta: float, dimension: int) -> SecureLaplaceMechanism:
        return cls(epsilon=epsilon, sensitivity=float(dimension))  # pure ε-DP: δ is not used

    @classmethod
    def from_description(cls, description: Mapping[str, object]) -> SecureLaplaceMechanism:
        randomness = description.get("randomness", "os")
        if randomness not in ("os", "generator"):
            raise ValueError(f"mechanism description has randomness {randomness!r}, not 'os' or 'generator'")
        return cls(
            epsilon=described_number(description, "epsilon"), sensitivity=described_number(description, "sensitivity"),
            randomness=randomness,
        )

    def charge(self) -> ReleaseCost:
        return ReleaseCost(epsilon=float(self.effective_epsilon), delta=0.0, mechanism=self.name)

    def likelihood(self, entity_error_sd: float) -> LikelihoodKernel:
        # Exact on the output grid: each report is an interval of the pre-rounding value (the floating-point
        # Laplace draw is treated as exact Laplace; with τ > 0 the input clamp is ignored, as for the Gaussian).
        return SnappedLaplaceKernel(laplace_with_error(self.scale, entity_error_sd), self.grid, self.name)

    @property
    def noise_sd(self) -> float:
        """√2·λ of the Laplace draw (the snapping grid adds at most Λ²/12 to the variance; not counted)."""
        return self.scale * math.sqrt(2)
