"""Mechanisms by name: the one place a mechanism's name is read.

``laplace`` is the paper's mechanism and the default. The others answer the same
question — release an entity's per-concept mastery vector under ε-LDP (ε, δ for the
Gaussian) — with different noise shapes; see each class for its guarantee.

A name maps to a type; the type builds itself for a request (:meth:`Mechanism.for_request`) or
from a stored description (:meth:`Mechanism.from_description`), and from then on the object
travels: it privatizes, describes itself, says what a release costs and gives the likelihood of
its reports. Adding a mechanism is one class, and its name here (``MechanismName``, ``MECHANISM_NAMES``
and ``_REQUESTED``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Literal, get_args

from privacy.anchored import AnchoredPiecewiseMechanism
from privacy.bounded import DuchiMechanism, HybridMechanism, PiecewiseMechanism
from privacy.gaussian import AnalyticGaussianMechanism
from privacy.mechanisms import LaplaceMechanism, Mechanism, NoNoise, SensitivityMode, sensitivity_for
from privacy.ranges import Epsilon
from privacy.sampling import SecureLaplaceMechanism

__all__ = [
    "COHORT_MECHANISM",
    "DEFAULT_DELTA",
    "MECHANISM_NAMES",
    "PAPER_MECHANISM",
    "MechanismName",
    "mechanism_for_request",
    "mechanism_from_description",
    "mechanism_kind",
    "names_of",
    "requested_name",
]

MechanismName = Literal["laplace", "secure_laplace", "gaussian", "duchi", "piecewise", "hybrid", "anchored_piecewise"]
MECHANISM_NAMES: tuple[MechanismName, ...] = get_args(MechanismName)
PAPER_MECHANISM: MechanismName = "laplace"  # the paper's Algorithm 1, the default of a request
DEFAULT_DELTA = 1e-5
# What a cohort report's central Laplace release (privacy.central) is charged as: a pure ε-DP release of each student.
COHORT_MECHANISM = "central_laplace"

# The name a request asks for -> the type that builds it.
_REQUESTED: dict[str, type[Mechanism]] = {
    "laplace": LaplaceMechanism,
    "secure_laplace": SecureLaplaceMechanism,
    "gaussian": AnalyticGaussianMechanism,
    "duchi": DuchiMechanism,
    "piecewise": PiecewiseMechanism,
    "hybrid": HybridMechanism,
    "anchored_piecewise": AnchoredPiecewiseMechanism,
}
# Adding a mechanism is its class and its name in the Literal above and in _REQUESTED; both must agree.
assert set(_REQUESTED) == set(MECHANISM_NAMES), "MechanismName and _REQUESTED name different mechanisms"
# The type -> the name a request asks for it by (the inverse of _REQUESTED: one name per type).
_REQUESTED_NAME: dict[type[Mechanism], MechanismName] = {_REQUESTED[name]: name for name in MECHANISM_NAMES}
assert len(_REQUESTED_NAME) == len(_REQUESTED), "two requested names build the same mechanism type"
# The name a description carries (``describe()["mechanism"]``, each type's own ``name``: the Gaussian calls
# itself ``analytic_gaussian``) -> its type; the requested names are accepted too.
_DESCRIBED: dict[str, type[Mechanism]] = {
    **{kind.name: kind for kind in (NoNoise, *_REQUESTED.values())},
    **_REQUESTED,
}


@lru_cache(maxsize=4096)  # mechanisms are frozen: built once per parameters and reused by every request
def mechanism_for_request(
    *,
    name: str = PAPER_MECHANISM,
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
    epsilon = Epsilon(epsilon)
    kind = _REQUESTED.get(name)
    if kind is None:
        raise ValueError(f"unknown mechanism {name!r} (use {', '.join(MECHANISM_NAMES)})")
    d = int(sensitivity_for(mode, n_concepts_total=n_concepts_total, n_concepts_assessed=n_concepts_assessed))
    return kind.for_request(epsilon=epsilon, delta=delta, dimension=d)


def mechanism_from_description(description: Mapping[str, object]) -> Mechanism:
    """The mechanism a :meth:`Mechanism.describe` mapping describes (a stored record, JSON): the inverse of
    ``describe``, so stored descriptions become objects at the storage boundary. ``ValueError`` when it names
    no mechanism or lacks a parameter."""
    name = description.get("mechanism")
    if not isinstance(name, str):
        raise ValueError(f"no mechanism named {name!r} (known: {', '.join(sorted(_DESCRIBED))})")
    return mechanism_kind(name).from_description(description)


def names_of(kind: type[Mechanism]) -> frozenset[str]:
    """Every name ``kind`` is known by (requested or described): what an accountant matches a recorded release's
    name against. Exactly ``kind``, not its subclasses (secure Laplace is not Laplace)."""
    return frozenset(name for name, known in _DESCRIBED.items() if known is kind)


def requested_name(kind: type[Mechanism]) -> MechanismName:
    """The name a request asks for ``kind`` by (a default that names a type, not a string); ``ValueError`` when a
    request cannot ask for it."""
    name = _REQUESTED_NAME.get(kind)
    if name is None:
        raise ValueError(f"{kind.__name__} is not a mechanism a request may ask for")
    return name


def mechanism_kind(name: str) -> type[Mechanism]:
    """The mechanism kind a name (requested or described, ``"none"`` included) stands for: what a stored or
    requested name becomes at the edge (``diagnosis.NoiseLevel``). ``ValueError`` for an unknown name."""
    kind = _DESCRIBED.get(name)
    if kind is None:
        raise ValueError(f"no mechanism named {name!r} (known: {', '.join(sorted(_DESCRIBED))})")
    return kind
