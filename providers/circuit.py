"""A circuit breaker per entity: stop asking an entity that keeps failing, probe it now and then.

::

    closed ──N consecutive failed calls──▶ open ──reset timeout over: one caller takes the probe──▶ half_open
      ▲                                      ▲                                                        │
      │                                      └─────────────────── the probe fails ────────────────────┤
      └─────────────────────────────────────── the probe succeeds ────────────────────────────────────┘

* **A failed call** is one that ends in ``EntityUnavailable`` (5xx, rate limit, timeout, connection
  error — after the retries, since the breaker wraps the whole chain). Any answer at all, even a
  rejection or an unreadable one, shows the provider is up and resets the count. ``EntitySkipped``
  and cancellations say nothing about health and change nothing.
* **Open**: the entity is not asked; the caller gets ``EntityCircuitOpen`` at once (the pipeline
  names it in ``failed_entities`` with reason ``circuit_open``).
* **Half-open**: exactly one caller — across every worker sharing the store — gets the probe; the
  others are refused as while open, so a dead provider costs one deadline per reset timeout, not
  one per request. A probe whose holder died (a worker killed mid-call) lapses after
  ``probe_lease_s`` and the next caller probes.

The transitions are pure functions of the stored :class:`Circuit` record; a :class:`CircuitStore`
applies one atomically (in-process: a dict; across workers: Redis, ``providers.circuit_redis``).

Why not a library: ``purgatory`` (asyncio, Redis storage) lets *every* caller through while
half-open, writes state to Redis as read-modify-write of a JSON value (two workers can overwrite
each other's transition), and decides "N consecutive" from a count read before the call;
``aiobreaker`` (last release 2021) keeps Redis state through the blocking redis client, which
would stall the event loop. Both count any exception class given, with no "no verdict" outcome
for a skipped entity.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, Protocol, TypeVar

from providers.errors import EntityCircuitOpen, EntitySkipped, EntityUnavailable
from providers.types import Entity, EntityPrediction, PromptContext

__all__ = [
    "Circuit",
    "CircuitBreaker",
    "CircuitBreakers",
    "CircuitBroken",
    "CircuitPolicy",
    "CircuitState",
    "CircuitStore",
    "CircuitStoreUnavailable",
    "MemoryCircuitStore",
    "Permit",
]

log = logging.getLogger("fedcd.circuit")

CircuitState = Literal["closed", "open", "half_open"]
T = TypeVar("T")
Clock = Callable[[], float]


@dataclass(frozen=True)
class Circuit:
    """One entity's stored breaker record (times are epoch seconds, shared by every worker)."""

    state: CircuitState = "closed"
    failures: int = 0  # consecutive failed calls
    opened_at: float = 0.0
    probe: str = ""  # token of the caller holding the half-open probe
    probe_until: float = 0.0  # when that probe lapses if its holder never reports back

    def to_fields(self) -> dict[str, str]:
        return {
            "state": self.state, "failures": str(self.failures), "opened_at": repr(self.opened_at),
            "probe": self.probe, "probe_until": repr(self.probe_until),
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Circuit:
        """The record stored as strings (Redis hash); an empty mapping is a new, closed circuit."""
        if not fields:
            return cls()
        state = fields.get("state", "closed")
        if state not in ("closed", "open", "half_open"):
            raise ValueError(f"unknown circuit state {state!r}")
        return cls(
            state=state,  # type: ignore[arg-type]  # checked above
            failures=int(fields.get("failures", "0")),
            opened_at=float(fields.get("opened_at", "0")),
            probe=fields.get("probe", ""),
            probe_until=float(fields.get("probe_until", "0")),
        )


@dataclass(frozen=True, kw_only=True)
class CircuitPolicy:
    """When to open (``failure_threshold`` consecutive failed calls), how long to stay open before a
    probe (``reset_timeout_s``), and how long a probe may run before another caller may probe."""

    failure_threshold: int = 5
    reset_timeout_s: float = 30.0
    probe_lease_s: float = 120.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {self.failure_threshold}")
        if self.reset_timeout_s <= 0 or self.probe_lease_s <= 0:
            raise ValueError("reset_timeout_s and probe_lease_s must be > 0")


@dataclass(frozen=True)
class Permit:
    """Leave to call the entity: an ordinary call (closed) or the half-open probe (``probe`` set)."""

    probe: str = ""


# -- the transitions: pure functions of (record, policy, now) ------------------------------------


def admit(circuit: Circuit, policy: CircuitPolicy, now: float, token: str) -> tuple[Circuit, Permit | float]:
    """A permit, or the time (epoch s) before which no probe will be allowed."""
    if circuit.state == "closed":
        return circuit, Permit()
    if circuit.state == "open" and now < circuit.opened_at + policy.reset_timeout_s:
        return circuit, circuit.opened_at + policy.reset_timeout_s
    if circuit.state == "half_open" and now < circuit.probe_until:
        return circuit, circuit.probe_until
    # Open past its timeout, or a half-open probe nobody holds (or whose holder never came back).
    return replace(circuit, state="half_open", probe=token, probe_until=now + policy.probe_lease_s), Permit(token)


def succeeded(circuit: Circuit, permit: Permit) -> Circuit:
    if permit.probe:
        return Circuit() if _holds_probe(circuit, permit) else circuit
    # An ordinary call resets the count while closed; once open, only the probe may close it.
    return replace(circuit, failures=0) if circuit.state == "closed" and circuit.failures else circuit


def failed(circuit: Circuit, policy: CircuitPolicy, now: float, permit: Permit) -> Circuit:
    if permit.probe:
        return Circuit(state="open", failures=circuit.failures, opened_at=now) if _holds_probe(circuit, permit) else circuit
    if circuit.state != "closed":
        return circuit  # already open: late failures of calls admitted earlier do not extend it
    failures = circuit.failures + 1
    if failures >= policy.failure_threshold:
        return Circuit(state="open", failures=failures, opened_at=now)
    return replace(circuit, failures=failures)


def released(circuit: Circuit, permit: Permit) -> Circuit:
    """No verdict (skipped, cancelled): a probe is handed back so the next caller may probe at once."""
    return replace(circuit, probe="", probe_until=0.0) if _holds_probe(circuit, permit) else circuit


def _holds_probe(circuit: Circuit, permit: Permit) -> bool:
    return circuit.state == "half_open" and bool(permit.probe) and circuit.probe == permit.probe


# -- storage ------------------------------------------------------------------------------------


class CircuitStoreUnavailable(Exception):
    """The shared store could not be reached; the breaker then lets calls through (and logs it)."""


class CircuitStore(Protocol):
    """Where the records live. ``update`` applies ``change`` to one record atomically: no other
    update of that record (in any process sharing the store) interleaves with it."""

    async def update(self, name: str, change: Callable[[Circuit], tuple[Circuit, T]]) -> T: ...

    async def read(self, names: Iterable[str]) -> dict[str, Circuit]: ...

    async def aclose(self) -> None: ...


class MemoryCircuitStore:
    """In-process records: each worker process has its own breakers (used when no Redis is configured)."""

    def __init__(self) -> None:
        self._circuits: dict[str, Circuit] = {}

    async def update(self, name: str, change: Callable[[Circuit], tuple[Circuit, T]]) -> T:
        # No await between read and write: atomic on the event loop.
        new, result = change(self._circuits.get(name, Circuit()))
        self._circuits[name] = new
        return result

    async def read(self, names: Iterable[str]) -> dict[str, Circuit]:
        return {name: self._circuits.get(name, Circuit()) for name in names}

    async def aclose(self) -> None:
        pass


# -- one entity's breaker, and the wrapper ------------------------------------------------------


_STORE_RETRY_S = 5.0  # after the store failed, calls go through unguarded this long before it is tried again
_WARN_EVERY_S = 60.0


class CircuitBreaker:
    """One entity's breaker over a (possibly shared) store. If the store is unreachable the
    breaker fails open: calls go through as if closed (the store is tried again after a few
    seconds, so a hung Redis does not slow every call), with a warning at most once a minute."""

    def __init__(self, name: str, policy: CircuitPolicy, store: CircuitStore, *, clock: Clock = time.time) -> None:
        self.name, self.policy, self.store, self._clock = name, policy, store, clock
        self._warned_at = self._store_down_until = -float("inf")

    async def admit(self) -> Permit:
        """A permit to call the entity, or ``EntityCircuitOpen``."""
        now, token = self._clock(), uuid.uuid4().hex
        decision = await self._apply(lambda c: admit(c, self.policy, now, token))
        if decision is None:
            return Permit()  # the store is unreachable: unguarded
        if isinstance(decision, Permit):
            if decision.probe:
                log.info("entity %s: circuit half-open, probing", self.name)
            return decision
        when = datetime.fromtimestamp(decision, UTC).isoformat(timespec="seconds")
        raise EntityCircuitOpen(
            f"circuit open after {self.policy.failure_threshold} consecutive failed calls; not asked until a "
            f"probe from {when} succeeds",
            entity=self.name, retry_at=decision,
        )

    async def success(self, permit: Permit) -> None:
        closed = await self._apply(lambda c: (succeeded(c, permit), c.state != "closed" and _holds_probe(c, permit)))
        if closed:
            log.info("entity %s: the probe succeeded, circuit closed", self.name)

    async def failure(self, permit: Permit) -> None:
        now = self._clock()

        def change(circuit: Circuit) -> tuple[Circuit, bool]:
            after = failed(circuit, self.policy, now, permit)
            return after, after.state == "open" and circuit.state != "open"

        if await self._apply(change):
            log.warning("entity %s: circuit open for %g s (%s)", self.name, self.policy.reset_timeout_s,
                        "the probe failed" if permit.probe else f"{self.policy.failure_threshold} consecutive failed calls")

    async def release(self, permit: Permit) -> None:
        if permit.probe:
            await self._apply(lambda c: (released(c, permit), None))

    async def state(self) -> CircuitState:
        return (await self.store.read([self.name]))[self.name].state

    async def _apply(self, change: Callable[[Circuit], tuple[Circuit, T]]) -> T | None:
        """``change`` applied in the store, or None while the store is unreachable."""
        if time.monotonic() < self._store_down_until:
            return None
        try:
            return await self.store.update(self.name, change)
        except CircuitStoreUnavailable as exc:
            now = time.monotonic()
            self._store_down_until = now + _STORE_RETRY_S
            if now - self._warned_at >= _WARN_EVERY_S:
                self._warned_at = now
                log.warning("entity %s: circuit breaker store unavailable, calls go through unguarded: %s", self.name, exc)
            return None


class CircuitBroken:
    """The wrapped entity behind its circuit breaker: refused at once while the circuit is open."""

    def __init__(self, inner: Entity, breaker: CircuitBreaker) -> None:
        self.inner, self.breaker = inner, breaker
        self.name = inner.name

    async def respond(self, context: PromptContext) -> EntityPrediction:
        permit = await self.breaker.admit()
        try:
            prediction = await self.inner.respond(context)
        except EntitySkipped:
            await self.breaker.release(permit)
            raise
        except EntityUnavailable:
            await self.breaker.failure(permit)
            raise
        except asyncio.CancelledError:
            await asyncio.shield(self.breaker.release(permit))
            raise
        except Exception:
            await self.breaker.success(permit)  # it answered (a rejection, an unreadable answer): it is up
            raise
        await self.breaker.success(permit)
        return prediction

    async def aclose(self) -> None:
        await self.inner.aclose()


class CircuitBreakers:
    """Every entity's breaker over one store, with the shared thresholds (built once from settings)."""

    def __init__(
        self, store: CircuitStore, *, failure_threshold: int, reset_timeout_s: float, clock: Clock = time.time
    ) -> None:
        CircuitPolicy(failure_threshold=failure_threshold, reset_timeout_s=reset_timeout_s)  # validate now
        self.store, self._clock = store, clock
        self.failure_threshold, self.reset_timeout_s = failure_threshold, reset_timeout_s

    def breaker(self, name: str, *, probe_lease_s: float) -> CircuitBreaker:
        """``probe_lease_s``: the longest one call to the entity can take (its deadline), plus a margin."""
        policy = CircuitPolicy(
            failure_threshold=self.failure_threshold, reset_timeout_s=self.reset_timeout_s, probe_lease_s=probe_lease_s
        )
        return CircuitBreaker(name, policy, self.store, clock=self._clock)

    async def states(self, names: Iterable[str]) -> dict[str, CircuitState]:
        return {name: circuit.state for name, circuit in (await self.store.read(names)).items()}

    async def aclose(self) -> None:
        await self.store.aclose()
