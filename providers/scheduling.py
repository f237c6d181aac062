"""Who goes first at an entity, and until when a call may run: call priority and the enclosing deadline.

Both travel with the call in context variables, so no signature between the job runner or the diagnosis
pipeline and the adapter has to carry them (asyncio copies the context into every task a call spawns):

* **Priority.** A user's diagnosis is ``interactive`` (the default); everything a background job asks (a
  calibration, the first-start default calibration) runs under :func:`background_priority`.
  :class:`PrioritySlots` hands an entity's concurrency slots to interactive callers first, caps what
  background callers may hold at once (``background_share`` of the slots, at least one), and — where a
  repeated call costs no money (embedded models) — takes a slot back from a background call when an
  interactive caller is waiting and none is free: the background call starts over once a slot is free.
  Measured before this existed: the README's first curl waited 120 s behind the default calibration's
  queue on smollm2 and gemma3 (one slot each).
* **Deadline.** :func:`enclosing_deadline` is the earliest deadline of every ``WithDeadline`` the call is
  inside (event-loop time). The entity's own deadline (inside its circuit breaker) fires just *before*
  an enclosing one (the request's), so the breaker and ``fedcd_entity_failures_total{reason="timeout"}``
  see the timeout whichever deadline was shorter; before, the request's deadline (≈ 9.9999 s) cancelled
  a hung provider's call just before its own 10 s one, and its circuit never opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, TypeVar

__all__ = [
    "Priority",
    "PrioritySlots",
    "background_priority",
    "call_priority",
    "deadline_scope",
    "enclosing_deadline",
]

Priority = Literal["interactive", "background"]
T = TypeVar("T")

_PRIORITY: ContextVar[Priority] = ContextVar("fedcd_call_priority", default="interactive")
_DEADLINE: ContextVar[float | None] = ContextVar("fedcd_call_deadline", default=None)


def call_priority() -> Priority:
    """The priority of calls made from here (``interactive`` unless inside :func:`background_priority`)."""
    return _PRIORITY.get()


@contextlib.contextmanager
def background_priority() -> Iterator[None]:
    """Calls made inside (and by every task started inside) yield to interactive ones."""
    token = _PRIORITY.set("background")
    try:
        yield
    finally:
        _PRIORITY.reset(token)


def enclosing_deadline() -> float | None:
    """The earliest deadline (``loop.time()``) the current call is inside, or None."""
    return _DEADLINE.get()


@contextlib.contextmanager
def deadline_scope(until: float) -> Iterator[None]:
    """Calls inside end by ``until`` (``loop.time()``) at the latest: the earlier of it and any enclosing one."""
    outer = _DEADLINE.get()
    token = _DEADLINE.set(until if outer is None else min(until, outer))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@dataclass(eq=False)
class _Hold:
    """One slot held by one call."""

    priority: Priority
    task: asyncio.Future[object] | None = None
    preempted: bool = False


@dataclass
class _Waiters:
    interactive: deque[asyncio.Future[_Hold]] = field(default_factory=deque)
    background: deque[asyncio.Future[_Hold]] = field(default_factory=deque)

    def of(self, priority: Priority) -> deque[asyncio.Future[_Hold]]:
        return self.interactive if priority == "interactive" else self.background


class PrioritySlots:
    """``limit`` slots; interactive callers first, background callers capped at ``background_share``.

    ``preempt``: an interactive caller finding every slot taken cancels the most recently started
    background call, which waits for a slot again and starts over (its deadline keeps running). Only
    for entities where a repeated call is free (embedded models), never for a hosted one that bills.
    """

    def __init__(self, limit: int, *, background_share: float = 0.5, preempt: bool = False) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if not 0.0 < background_share <= 1.0:
            raise ValueError(f"background_share must lie in (0, 1], got {background_share}")
        self.limit, self.preempt = limit, preempt
        # At least one slot: a job must make progress on an entity with a single slot.
        self.background_cap = max(1, int(limit * background_share))
        self._holds: list[_Hold] = []
        self._waiters = _Waiters()
        self.preemptions = 0  # background calls started over for an interactive one (tests, metrics)

    @property
    def in_use(self) -> int:
        return len(self._holds)

    def _background_held(self) -> int:
        return sum(1 for h in self._holds if h.priority == "background")

    def _may_take(self, priority: Priority) -> bool:
        if len(self._holds) >= self.limit:
            return False
        if priority == "interactive":
            return True
        interactive_waiting = any(not w.done() for w in self._waiters.interactive)
        return not interactive_waiting and self._background_held() < self.background_cap

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` in a slot; started over if a preemption took the slot back."""
        priority = call_priority()
        while True:
            hold = await self._acquire(priority)
            task: asyncio.Future[T] = asyncio.ensure_future(call())
            hold.task = task  # type: ignore[assignment]
            try:
                return await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if hold.preempted and (current is None or not current.cancelling()):
                    continue  # the slot went to an interactive caller; queue again
                raise
            finally:
                self._release(hold)

    async def _acquire(self, priority: Priority) -> _Hold:
        queue = self._waiters.of(priority)
        if not queue and self._may_take(priority):
            return self._take(priority)
        waiter: asyncio.Future[_Hold] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        if priority == "interactive":
            self._preempt_for_waiters()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed a slot just as we were cancelled: pass it on
                self._release(waiter.result())
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(waiter)
            raise

    def _take(self, priority: Priority) -> _Hold:
        hold = _Hold(priority)
        self._holds.append(hold)
        return hold

    def _release(self, hold: _Hold) -> None:
        with contextlib.suppress(ValueError):
            self._holds.remove(hold)
        self._wake()

    def _wake(self) -> None:
        """Hand free slots to waiters: interactive first, then background within its cap."""
        for priority in ("interactive", "background"):
            queue = self._waiters.of(priority)  # type: ignore[arg-type]
            while queue and self._may_take(priority):  # type: ignore[arg-type]
                waiter = queue.popleft()
                if waiter.done():  # cancelled while waiting
                    continue
                waiter.set_result(self._take(priority))  # type: ignore[arg-type]

    def _preempt_for_waiters(self) -> None:
        """Take slots back from background calls for interactive waiters no free slot can serve."""
        if not self.preempt:
            return
        waiting = sum(1 for w in self._waiters.interactive if not w.done())
        being_freed = sum(1 for h in self._holds if h.preempted)
        running_background = [h for h in self._holds if h.priority == "background" and not h.preempted and h.task]
        while waiting > being_freed and running_background:
            victim = running_background.pop()  # the most recently started: it has done the least work
            victim.preempted = True
            being_freed += 1
            self.preemptions += 1
            assert victim.task is not None
            victim.task.cancel()
