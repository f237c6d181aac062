"""Privacy accountants: how the (ε, δ) of one student's released answers add up.

An accountant only does arithmetic: :meth:`Accountant.step` records one release, and
:meth:`Accountant.spent` says what all releases so far cost together. Persistence, caps and
refusals belong to :class:`privacy.ledger.PrivacyLedger`, which keeps one accountant per
(tenant, student) and saves it with :meth:`Accountant.state_dict` (a plain dict, checked on
load). This mirrors Opacus, where the accountants are separate from the engine.

Accountants (by registry name):

* ``basic`` (:class:`BasicCompositionAccountant`, the default): k releases that are (ε_i, δ_i)-DP
  are (Σε_i, Σδ_i)-DP together. Exact for pure ε-DP mechanisms (Laplace, Duchi, PM, HM) and valid
  for every mechanism.
* ``rdp`` (:class:`RDPAccountant`): Rényi-DP composition through Google's ``dp_accounting``. Each
  Gaussian release is a ``GaussianDpEvent`` with noise multiplier σ/Δ₂ (given, or derived from
  the release's (ε, δ) by the analytic Gaussian calibration, which is scale-free), each Laplace
  release a ``LaplaceDpEvent`` with noise multiplier b/Δ₁ = 1/ε, and any other pure ε-DP release
  the RDP curve min(ε, α·ε²/2) (Mironov 2017, Prop. 3; Bun & Steinke 2016, Prop. 3.3). The RDP
  curves add up; ε at a target δ comes from ``dp_accounting.rdp.compute_epsilon``. For many
  Gaussian releases this is far below basic composition, which is why it exists.
* ``zcdp`` (:class:`ZCDPAccountant`): the same with zero-concentrated DP, ρ = 1/(2(σ/Δ₂)²) per
  Gaussian release and ρ = ε²/2 per pure ε-DP release; ρ's add, converted to ε at δ as above.

The Rényi accountants also know the basic-composition bound of the same history and report the
smaller ε of the two whenever basic composition's Σδ fits the target δ: both bounds hold, so
their minimum does. A few pure ε-DP releases are thus never charged more than Σε.

Neighbouring inputs are any two answer sets of one student (local DP, "replace one"); the
sensitivities Δ₁, Δ₂ the mechanisms use are for that relation, so the RDP curves above apply
as written.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from abc import ABC, abstractmethod
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from privacy.gaussian import AnalyticGaussianMechanism, analytic_gaussian_sigma
from privacy.mechanisms import LaplaceMechanism, ReleaseCost
from privacy.ranges import NOISE_MULTIPLIER_RANGE
from privacy.registry import names_of

__all__ = [
    "DEFAULT_TARGET_DELTA",
    "NOISE_MULTIPLIER_RANGE",
    "Accountant",
    "BasicCompositionAccountant",
    "RDPAccountant",
    "ZCDPAccountant",
    "accountant_names",
    "make_accountant",
    "register_accountant",
]

DEFAULT_TARGET_DELTA = 1e-5
# The names a recorded release may carry (the registry's, so no name is spelt here): the Gaussian is recorded as
# "analytic_gaussian" (its charge) or "gaussian" (the request's name). Exact Laplace only: the secure (snapping)
# Laplace, the bounded mechanisms and any other name are charged as generic pure ε-DP.
GAUSSIAN_MECHANISMS = names_of(AnalyticGaussianMechanism)
LAPLACE_MECHANISMS = names_of(LaplaceMechanism)
# A stored event's keys: ReleaseCost's fields, the name first (the key order of every history already stored).
_EVENT_FIELDS = ("mechanism", *(f.name for f in dataclasses.fields(ReleaseCost) if f.name != "mechanism"))
_EVENT_KEYS = frozenset(_EVENT_FIELDS)
_STATE_KEYS = frozenset({"accountant", "history"})


def _stored(event: ReleaseCost) -> dict[str, Any]:
    """One release as ``state_dict`` stores it (JSON, in the ledger's ``privacy_students`` rows): the edge where
    an event stops being a :class:`ReleaseCost`."""
    return {name: getattr(event, name) for name in _EVENT_FIELDS}


class Accountant(ABC):
    """Adds up the privacy cost of a sequence of releases about one individual.

    ``history`` is the list of :class:`~privacy.mechanisms.ReleaseCost` events, one per :meth:`step` (checked
    when they were made); subclasses derive everything else from it.
    """

    name: ClassVar[str]

    def __init__(self) -> None:
        self.history: list[ReleaseCost] = []

    def step(self, cost: ReleaseCost) -> None:
        """Record one release that is (ε, δ)-DP by itself (δ = 0: pure ε-DP).

        ``cost.sigma_over_sensitivity`` (σ/Δ₂) is the Gaussian noise multiplier, used by the Rényi
        accountants; without it they derive it from (ε, δ).
        """
        if not isinstance(cost, ReleaseCost):
            raise TypeError(f"an accountant steps by a ReleaseCost, got {type(cost).__name__}")
        self._compose(cost)  # may refuse the event before it enters the history
        self.history.append(cost)

    @abstractmethod
    def spent(self, delta: float | None = None) -> tuple[float, float]:
        """(ε, δ) such that all releases so far are (ε, δ)-DP together; ``delta`` is a target δ."""

    def mechanism(self) -> str:
        """The accounting method (its registry name), e.g. ``"basic"`` or ``"rdp"``."""
        return self.name

    def __len__(self) -> int:
        return len(self.history)

    def _compose(self, event: ReleaseCost) -> None:  # noqa: B027 - optional hook
        """Fold one validated event into derived state; raise ``ValueError`` to refuse it."""

    def _reset(self) -> None:  # noqa: B027 - optional hook
        """Clear derived state (``history`` is cleared by the caller)."""

    def spent_after(
        self, cost: ReleaseCost, *, count: int = 1, target_delta: float | None = None
    ) -> tuple[float, float]:
        """What :meth:`spent` would say after ``count`` more releases costing ``cost`` (this accountant is unchanged)."""
        trial = copy.deepcopy(self)
        for _ in range(count):
            trial.step(cost)
        return trial.spent(target_delta)

    def state_dict(self) -> dict[str, Any]:
        return {"accountant": self.mechanism(), "history": [_stored(e) for e in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace this accountant's history with a saved one, after checking its keys and its method."""
        if not isinstance(state, dict) or set(state) != _STATE_KEYS:
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"accountant state must have exactly the keys {sorted(_STATE_KEYS)}, got {got}")
        if state["accountant"] != self.mechanism():
            raise ValueError(f"state was saved by the {state['accountant']!r} accountant, not {self.mechanism()!r}")
        if not isinstance(state["history"], list):
            raise ValueError("accountant state 'history' must be a list")
        events = []
        for i, entry in enumerate(state["history"]):
            if not isinstance(entry, dict) or set(entry) != _EVENT_KEYS:
                raise ValueError(f"history entry {i} must have exactly the keys {sorted(_EVENT_KEYS)}, got {entry!r}")
            events.append(ReleaseCost(**entry))
        self.history = []
        self._reset()
        for event in events:
            self._compose(event)
            self.history.append(event)


class BasicCompositionAccountant(Accountant):
    """Basic (sequential) composition: Σε and Σδ. ``spent`` ignores the target δ."""

    name: ClassVar[str] = "basic"

    def spent(self, delta: float | None = None) -> tuple[float, float]:
        return _basic(self.history)


def _basic(history: list[ReleaseCost]) -> tuple[float, float]:
    return math.fsum(e.epsilon for e in history), math.fsum(e.delta for e in history)


@lru_cache(maxsize=1)
def _orders() -> np.ndarray:
    from dp_accounting.rdp import rdp_privacy_accountant

    orders = np.array(rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=np.float64)
    orders.setflags(write=False)
    return orders


@lru_cache(maxsize=1024)
def gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """σ/Δ₂ of the analytic Gaussian mechanism that is (ε, δ)-DP (the calibration is scale-free)."""
    return analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=1.0)


@lru_cache(maxsize=1024)
def _dp_accounting_rdp(gaussian: bool, parameter: float) -> np.ndarray:
    """The RDP curve of one Gaussian (``gaussian``) or Laplace release, ``parameter`` its noise multiplier."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    accountant = RdpAccountant(orders=_orders())
    event = dp_accounting.GaussianDpEvent(parameter) if gaussian else dp_accounting.LaplaceDpEvent(parameter)
    accountant.compose(event)
    curve = accountant.rdp
    curve.setflags(write=False)
    return curve


def _pure_dp_rdp(epsilon: float) -> np.ndarray:
    """RDP of any pure ε-DP release: min(ε, α·ε²/2) (Mironov 2017, Prop. 3; Bun & Steinke 2016)."""
    return np.minimum(epsilon, _orders() * epsilon**2 / 2)


class RDPAccountant(Accountant):
    """Rényi-DP composition via ``dp_accounting``; ``spent(δ)`` is ε at δ (default ``target_delta``)."""

    name: ClassVar[str] = "rdp"

    def __init__(self, *, target_delta: float = DEFAULT_TARGET_DELTA) -> None:
        if not (0.0 < target_delta < 1.0):
            raise ValueError(f"target_delta must lie in (0, 1), got {target_delta}")
        super().__init__()
        self.target_delta = target_delta
        self._curve = np.zeros_like(_orders())

    @property
    def orders(self) -> np.ndarray:
        return _orders().copy()

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP curve, one value per order."""
        return self._curve.copy()

    def _event_curve(self, event: ReleaseCost) -> np.ndarray:
        mechanism, epsilon, delta = event.mechanism, event.epsilon, event.delta
        if mechanism in GAUSSIAN_MECHANISMS:
            multiplier = event.sigma_over_sensitivity
            if multiplier is None:
                if delta <= 0:
                    raise ValueError("a Gaussian release needs delta > 0 or sigma_over_sensitivity")
                multiplier = gaussian_noise_multiplier(epsilon, delta)
            return _dp_accounting_rdp(True, multiplier)
        if delta > 0:
            raise ValueError(
                f"Rényi accounting takes Gaussian or pure ε-DP releases; {mechanism!r} with delta={delta} is neither"
            )
        pure = _pure_dp_rdp(epsilon)
        if mechanism in LAPLACE_MECHANISMS:
            # Both curves bound the Laplace mechanism's RDP, so their minimum does. The clip also
            # removes dp_accounting's round-off at extreme ε (e.g. −1.7e-316 at ε = 1e-300).
            return np.clip(np.nan_to_num(_dp_accounting_rdp(False, 1.0 / epsilon), nan=np.inf), 0.0, pure)
        return pure

    def _compose(self, event: ReleaseCost) -> None:
        self._curve = self._curve + self._event_curve(event)

    def _reset(self) -> None:
        self._curve = np.zeros_like(_orders())

    def renyi_epsilon(self, delta: float | None = None) -> float:
        """ε at δ from the RDP curve alone (``dp_accounting.rdp.compute_epsilon``)."""
        from dp_accounting.rdp import compute_epsilon

        target = self.target_delta if delta is None else float(delta)
        if not self.history:
            return 0.0
        return float(compute_epsilon(_orders(), self._curve, target)[0])

    def spent(self, delta: float | None = None) -> tuple[float, float]:
        target = self.target_delta if delta is None else float(delta)
        if not (0.0 <= target < 1.0):
            raise ValueError(f"delta must lie in [0, 1), got {target}")
        if not self.history:
            return 0.0, 0.0
        renyi = self.renyi_epsilon(target) if target > 0 else math.inf
        basic_epsilon, basic_delta = _basic(self.history)
        if basic_delta <= target and basic_epsilon <= renyi:
            return basic_epsilon, basic_delta
        return renyi, target


class ZCDPAccountant(RDPAccountant):
    """Zero-concentrated DP: ρ adds up over releases; ε at δ via the RDP conversion of ``dp_accounting``."""

    name: ClassVar[str] = "zcdp"

    @property
    def rho(self) -> float:
        return math.fsum(self._rho(e) for e in self.history)

    @staticmethod
    def _rho(event: ReleaseCost) -> float:
        mechanism, epsilon, delta = event.mechanism, event.epsilon, event.delta
        if mechanism in GAUSSIAN_MECHANISMS:
            multiplier = event.sigma_over_sensitivity
            if multiplier is None:
                if delta <= 0:
                    raise ValueError("a Gaussian release needs delta > 0 or sigma_over_sensitivity")
                multiplier = gaussian_noise_multiplier(epsilon, delta)
            return 1.0 / (2.0 * multiplier**2)
        if delta > 0:
            raise ValueError(
                f"zCDP accounting takes Gaussian or pure ε-DP releases; {mechanism!r} with delta={delta} is neither"
            )
        return epsilon**2 / 2.0

    def _event_curve(self, event: ReleaseCost) -> np.ndarray:
        return _orders() * self._rho(event)


_REGISTRY: dict[str, type[Accountant]] = {}


def register_accountant(name: str, cls: type[Accountant], force: bool = False) -> None:
    """Make ``cls`` available as ``make_accountant(name)``; a taken name is refused unless ``force``."""
    if not (isinstance(cls, type) and issubclass(cls, Accountant)):
        raise TypeError(f"{cls!r} is not an Accountant subclass")
    if name in _REGISTRY and not force:
        raise ValueError(f"accountant {name!r} is already registered (pass force=True to replace it)")
    _REGISTRY[name] = cls


def make_accountant(name: str) -> Accountant:
    """A fresh accountant by registry name, with its constructor's defaults (build the class itself to set them)."""
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown accountant {name!r} (use {', '.join(accountant_names())})") from None
    return cls()


def accountant_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


register_accountant("basic", BasicCompositionAccountant)
register_accountant("rdp", RDPAccountant)
register_accountant("zcdp", ZCDPAccountant)
