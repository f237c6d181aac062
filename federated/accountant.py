"""Privacy accounting for Poisson-subsampled Gaussian steps, via Google's ``dp_accounting``.

Like Opacus' accountants, the accountant is a small pure object: its state is a ``history``
of :class:`Step` events ``(noise_multiplier, sample_rate, steps)``, ``step`` appends to it, and epsilon is
recomputed from the history on demand. It does no training and no I/O. What a manifest says of it is an
:class:`AccountingRecord`, made JSON only where the manifest is written (:meth:`AccountingRecord.to_json`).

PLD (privacy loss distributions) is the primary method because it is nearly tight; RDP is
kept as a cross-check (it is always looser, so ``rdp >= pld`` is a cheap sanity test). The PLD
discretisation is pessimistic, so a coarser interval (the default 1e-3, ~10x faster than
1e-4) still gives an upper bound on epsilon.

Composition is done on a *compressed* history (equal (sigma, q) pairs merged into one
self-composition), because dp_accounting convolves each listed event separately and a long
list of identical rounds would take minutes; self-composition of one event is one FFT power.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import dp_accounting

__all__ = ["MECHANISM", "AccountingRecord", "PrivacyAccountant", "Step", "epsilon_for", "noise_multiplier_for"]

MECHANISM = "poisson_subsampled_gaussian"
_COMPOSITION = ("each event is dp_accounting.PoissonSampledDpEvent(sample_rate, GaussianDpEvent(noise_multiplier)) "
                "self-composed steps times; the events compose")


class Step(NamedTuple):
    """One accountant event: ``steps`` applications of the Gaussian mechanism (noise multiplier σ) on a Poisson
    sample at ``sample_rate``. A named tuple, as Opacus' history entries are tuples: ``(σ, q, n)`` literals compare
    equal to it and unpack like it."""

    noise_multiplier: float
    sample_rate: float
    steps: int


@dataclass(frozen=True, kw_only=True)
class AccountingRecord:
    """The manifest's account of the guarantee per student: every charged event in order and the ε they compose
    to, enough to recompute it with ``dp_accounting`` alone (tests/federated/test_item_release.py does)."""

    delta: float
    value_discretization_interval: float
    epsilon: float
    events: tuple[Step, ...]

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``privacy_accounting`` block (its keys and order are the manifest's format)."""
        return {"mechanism": MECHANISM, "unit": "student", "delta": self.delta, "method": "pld",
                "value_discretization_interval": self.value_discretization_interval, "epsilon": self.epsilon,
                "events": [{"noise_multiplier": s, "sample_rate": q, "steps": n} for s, q, n in self.events],
                "composition": _COMPOSITION}
_RDP_ORDERS = tuple([1.25, 1.5, 1.75] + [2 + x / 4 for x in range(40)] + list(range(12, 65)) + [128, 256, 512])


def _compress(history: Iterable[Step]) -> tuple[Step, ...]:
    totals: dict[tuple[float, float], int] = {}
    for sigma, q, steps in history:
        if q > 0 and steps > 0:
            totals[(sigma, q)] = totals.get((sigma, q), 0) + steps
    return tuple(sorted(Step(sigma, q, n) for (sigma, q), n in totals.items()))


def _subsampled_gaussian(sigma: float, q: float) -> dp_accounting.DpEvent:
    # Imported here, not at module level: dp_accounting takes about 1 s to import, and every
    # Flower ClientApp process (one per node per round) imports this package without accounting.
    import dp_accounting

    return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))


@lru_cache(maxsize=512)
def _epsilon(compressed: tuple[Step, ...], delta: float, method: str, interval: float) -> float:
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    if not compressed:
        return 0.0
    event = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(_subsampled_gaussian(sigma, q), n)
            for sigma, q, n in compressed
        ]
    )
    if method == "pld":
        accountant: Any = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    elif method == "rdp":
        accountant = rdp_privacy_accountant.RdpAccountant(orders=_RDP_ORDERS)
    else:
        raise ValueError(f"method must be 'pld' or 'rdp', got {method!r}")
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


def _check_step(noise_multiplier: float, sample_rate: float, steps: int) -> None:
    if not noise_multiplier > 0 or not math.isfinite(noise_multiplier):
        raise ValueError(f"noise_multiplier must be a finite number > 0, got {noise_multiplier}")
    if not 0.0 <= sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in [0, 1], got {sample_rate}")
    if steps < 0 or int(steps) != steps:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")


def _check_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def epsilon_for(history: Iterable[Step], *, delta: float, method: str = "pld", interval: float = 1e-3) -> float:
    """Epsilon of composing every step in ``history`` (pure; cached on the compressed history)."""
    _check_delta(delta)
    return _epsilon(_compress(history), float(delta), method, float(interval))


class PrivacyAccountant:
    """Composes Poisson-subsampled Gaussian steps; answers epsilon for a delta.

    ``history`` holds every step actually taken, in order; nothing else is state.
    """

    def __init__(self, *, value_discretization_interval: float = 1e-3) -> None:
        if not value_discretization_interval > 0:
            raise ValueError(f"value_discretization_interval must be > 0, got {value_discretization_interval}")
        self.interval = float(value_discretization_interval)
        self.history: list[Step] = []

    def step(self, *, noise_multiplier: float, sample_rate: float, steps: int = 1) -> None:
        """Record ``steps`` applications of the Gaussian mechanism on a Poisson(q) sample."""
        _check_step(noise_multiplier, sample_rate, steps)
        self.history.append(Step(float(noise_multiplier), float(sample_rate), int(steps)))

    def get_epsilon(self, delta: float) -> float:
        """Epsilon spent so far (PLD)."""
        return epsilon_for(self.history, delta=delta, method="pld", interval=self.interval)

    def get_epsilon_rdp(self, delta: float) -> float:
        """Epsilon spent so far by RDP: a looser cross-check (always >= PLD up to discretisation)."""
        return epsilon_for(self.history, delta=delta, method="rdp")

    def would_exceed(
        self, *, noise_multiplier: float, sample_rate: float, epsilon_budget: float, delta: float, steps: int = 1
    ) -> bool:
        """True if taking these steps would push epsilon past ``epsilon_budget``: ask *before* a round runs."""
        _check_step(noise_multiplier, sample_rate, steps)
        proposed = [*self.history, Step(float(noise_multiplier), float(sample_rate), int(steps))]
        return epsilon_for(proposed, delta=delta, method="pld", interval=self.interval) > epsilon_budget

    def mechanism(self) -> str:
        return MECHANISM

    def record(self, delta: float) -> AccountingRecord:
        """The account of the guarantee per student at ``delta`` (the manifest's, once made JSON)."""
        return AccountingRecord(delta=delta, value_discretization_interval=self.interval,
                                epsilon=self.get_epsilon(delta), events=tuple(self.history))

    def __len__(self) -> int:
        return sum(steps for _, _, steps in self.history)

    def state_dict(self) -> dict[str, Any]:
        return {"mechanism": MECHANISM, "interval": self.interval, "history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved history; refuses another mechanism's state."""
        if state.get("mechanism") != MECHANISM:
            raise ValueError(f"state is for mechanism {state.get('mechanism')!r}, not {MECHANISM!r}")
        history = [Step(float(s), float(q), int(n)) for s, q, n in state["history"]]
        for s, q, n in history:
            _check_step(s, q, n)
        self.interval, self.history = float(state["interval"]), history


def noise_multiplier_for(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    interval: float = 1e-3,
    tolerance: float = 0.01,
    max_sigma: float = 1e4,
    prior: Iterable[Step] = (),
) -> float:
    """Smallest noise multiplier (to ``tolerance``, relative) whose epsilon is <= ``target_epsilon``.

    Bisects in log(sigma); returns the upper end of the bracket, so the answer never
    overshoots the target budget. ``prior``: steps the same students are charged for besides these (a release
    made before the rounds, ``federated.item_release``); the target is the composition of both.
    """
    if not target_epsilon > 0:
        raise ValueError(f"target_epsilon must be > 0, got {target_epsilon}")
    before = list(prior)
    if before and epsilon_for(before, delta=delta, interval=interval) >= target_epsilon:
        raise ValueError(f"the earlier steps alone spend epsilon {target_epsilon} or more")

    def eps(sigma: float) -> float:
        return epsilon_for([*before, Step(sigma, sample_rate, steps)], delta=delta, interval=interval)

    _check_step(1.0, sample_rate, steps)
    low, high = 0.05, 1.0
    while eps(high) > target_epsilon:
        low, high = high, high * 2
        if high > max_sigma:
            raise ValueError(f"no noise multiplier <= {max_sigma} reaches epsilon {target_epsilon}")
    if eps(low) <= target_epsilon:
        return low
    while high / low > 1 + tolerance:
        mid = math.sqrt(low * high)
        low, high = (low, mid) if eps(mid) <= target_epsilon else (mid, high)
    return high
