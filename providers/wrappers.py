"""Cross-cutting behaviour as entities that wrap entities (like Flower's DP strategy wrappers).

``build_chain`` stacks them in one fixed order::

    Observed( CircuitBroken( WithDeadline( ConcurrencyLimited( Retrying( adapter ) ) ) ) )

``Observed`` (``providers.observed``) times and counts every call, refused ones included; the
circuit breaker (``providers.circuit``, when configured) refuses at once while open, before a
concurrency slot or a deadline is spent, and counts a call that failed after all its retries as
one failure. The deadline bounds everything a caller waits for: the time queued for one of the entity's
concurrency slots *and* all attempts together. (With the deadline inside the limiter, 12 calls to
a hung entity with 4 slots and a 10 s deadline ended after 10, 20 and 30 s.) The slot is held
for the whole call, retries included, and released when the deadline cancels it. Adapters build
their SDK clients with ``max_retries=0``: retries happen here only, and never multiply.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tenacity import RetryCallState, wait_random_exponential

from providers.circuit import CircuitBreaker, CircuitBroken
from providers.errors import EntityError, EntityParseError, EntityTimeout, EntityUnavailable
from providers.observed import Observed, retry_counter
from providers.scheduling import PrioritySlots, deadline_scope, enclosing_deadline
from providers.types import Entity, EntityPrediction, PromptContext, TokenUsage

__all__ = ["Cached", "ConcurrencyLimited", "RetryPolicy", "Retrying", "WithDeadline", "build_chain"]

Sleep = Callable[[float], Awaitable[None]]

# How much earlier than an enclosing deadline an inner one fires (WithDeadline).
_INNER_MARGIN_S = 0.01


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Retry policy as a value: how many attempts, how long to wait, what to retry.

    Waits are exponential with full jitter (``initial_wait_s`` · 2^n, capped at
    ``max_wait_s``), except when the server sent Retry-After: then that, capped at
    ``max_retry_after_s`` (a server asking for longer is treated as unavailable now).
    """

    max_attempts: int = 3
    initial_wait_s: float = 0.5
    max_wait_s: float = 8.0
    max_retry_after_s: float = 30.0
    retry_parse_errors: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_wait_s < 0 or self.max_wait_s < 0 or self.max_retry_after_s < 0:
            raise ValueError("wait times must be >= 0")

    def should_retry(self, exc: BaseException) -> bool:
        if isinstance(exc, EntityUnavailable):
            return exc.retry_after is None or exc.retry_after <= self.max_retry_after_s
        # A sampled LLM answer that could not be read is worth one more draw.
        return self.retry_parse_errors and isinstance(exc, EntityParseError)

    def wait_seconds(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, EntityUnavailable) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_retry_after_s)
        return wait_random_exponential(multiplier=self.initial_wait_s, max=self.max_wait_s)(state)


class Retrying:
    """Retries transient failures of the wrapped entity (tenacity's policy pieces), honouring Retry-After.

    ``on_retry`` is called with each failure about to be retried (the chain counts them in metrics).
    Token usage is summed over the attempts: the answer (or the last failure) carries every token billed.
    """

    def __init__(
        self,
        inner: Entity,
        policy: RetryPolicy,
        *,
        sleep: Sleep = asyncio.sleep,
        on_retry: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.inner, self.policy, self._sleep, self._on_retry = inner, policy, sleep, on_retry
        self.name = inner.name

    async def respond(self, context: PromptContext) -> EntityPrediction:
        # tenacity's loop, written out: building its AsyncRetrying and attempt objects for every call cost more
        # than the call's own retry logic on the success path (docs/results/gateway-issue36). Same rules: stop after
        # max_attempts, retry what the policy says (nothing else: re-raised), ``on_retry`` before each wait, the
        # policy's waits computed from a tenacity RetryCallState.
        attempts, spent = 0, TokenUsage()
        while True:
            attempts += 1
            try:
                prediction = await self.inner.respond(context)
            except EntityError as exc:
                spent = exc.usage = spent + exc.usage  # the last failure re-raised carries them all
                if attempts >= self.policy.max_attempts or not self.policy.should_retry(exc):
                    raise
                if self._on_retry is not None:
                    self._on_retry(exc)
                await self._sleep(self.policy.wait_seconds(_failed_attempt(attempts, exc)))
                continue
            return prediction.model_copy(update={"attempts": attempts, "usage": spent + prediction.usage})

    async def aclose(self) -> None:
        await self.inner.aclose()


def _failed_attempt(number: int, exc: BaseException) -> RetryCallState:
    """The state tenacity's wait functions read: the attempt's number and its failure."""
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = number
    state.set_exception((type(exc), exc, exc.__traceback__))
    return state


class WithDeadline:
    """Bounds the whole call to ``deadline_s`` seconds: whatever it wraps (queueing, retries) included.

    Inside an enclosing deadline (the request's, ``providers.scheduling``) that ends first, this one ends
    ``_INNER_MARGIN_S`` before it: the innermost deadline fires first, so the circuit breaker and the
    failure metrics, which sit between the two, see the timeout instead of a cancellation.
    """

    def __init__(self, inner: Entity, deadline_s: float) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s}")
        self.inner, self.deadline_s = inner, deadline_s
        self.name = inner.name

    async def respond(self, context: PromptContext) -> EntityPrediction:
        now = asyncio.get_running_loop().time()
        own = now + self.deadline_s
        enclosing = enclosing_deadline()
        bounded_by_enclosing = enclosing is not None and enclosing - _INNER_MARGIN_S < own
        until = enclosing - _INNER_MARGIN_S if bounded_by_enclosing else own  # type: ignore[operator]
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for runs the call in a task of its own, one more
            # task per entity call for the same cancellation at the same instant.
            with deadline_scope(until):
                async with asyncio.timeout_at(until):
                    return await self.inner.respond(context)
        except TimeoutError:
            which = "the request's" if bounded_by_enclosing else f"the {self.deadline_s:g} s"
            raise EntityTimeout(f"no answer within {which} deadline", entity=self.name) from None

    async def aclose(self) -> None:
        await self.inner.aclose()


class ConcurrencyLimited:
    """At most ``limit`` calls in flight to the wrapped entity; the rest wait their turn, interactive
    calls first (``providers.scheduling.PrioritySlots``: background jobs hold at most ``background_share``
    of the slots and, with ``preempt``, give a slot back to a waiting interactive call)."""

    def __init__(self, inner: Entity, limit: int, *, background_share: float = 0.5, preempt: bool = False) -> None:
        self.inner, self.limit = inner, limit
        self.name = inner.name
        self.slots = PrioritySlots(limit, background_share=background_share, preempt=preempt)

    async def respond(self, context: PromptContext) -> EntityPrediction:
        return await self.slots.run(lambda: self.inner.respond(context))

    async def aclose(self) -> None:
        await self.inner.aclose()


class Cached:
    """Answers each distinct prompt context once; later identical requests reuse the answer.

    Used inside one calibration job or evaluation run, *beneath* the privacy wrapper, so
    every reuse is privatized afresh and raw answers stay inside the entity boundary.
    Concurrent identical requests share one in-flight call. Failures are not cached. A reuse reports
    ``cache="hit"`` and no token usage (no provider was called for it), so usage is counted once.
    """

    def __init__(self, inner: Entity) -> None:
        self.inner = inner
        self.name = inner.name
        self._answers: dict[str, asyncio.Task[EntityPrediction]] = {}
        self.hits = 0
        self.misses = 0

    async def respond(self, context: PromptContext) -> EntityPrediction:
        key = context.model_dump_json()
        task = self._answers.get(key)
        reused = task is not None
        if task is None:
            self.misses += 1
            task = asyncio.ensure_future(self.inner.respond(context))
            # shielded: a caller cancelled (e.g. at shutdown) leaves the call running with nobody awaiting it; its
            # failure is then read and forgotten here (not reported by asyncio as "Task exception was never
            # retrieved", nor handed to the next identical request)
            task.add_done_callback(functools.partial(self._settled, key))
            self._answers[key] = task
        else:
            self.hits += 1
        try:
            prediction = await asyncio.shield(task)
        except BaseException:
            if self._answers.get(key) is task and task.done():
                del self._answers[key]
            raise
        return prediction.model_copy(update={"cache": "hit", "usage": TokenUsage()}) if reused else prediction

    def _settled(self, key: str, task: asyncio.Future[EntityPrediction]) -> None:
        """Failures are not cached: a shared call that failed (or was cancelled) is dropped when it ends."""
        if (task.cancelled() or task.exception() is not None) and self._answers.get(key) is task:
            del self._answers[key]

    async def aclose(self) -> None:
        await self.inner.aclose()


def build_chain(
    adapter: Entity,
    *,
    policy: RetryPolicy,
    deadline_s: float,
    concurrency: int,
    breaker: CircuitBreaker | None = None,
    sleep: Sleep = asyncio.sleep,
    background_share: float = 0.5,
    preempt_background: bool = False,
) -> Entity:
    """The standard chain (module docstring): deadline outside, so time queued for a slot counts against it;
    the breaker (if any) outside that, so an open circuit costs neither; metrics outermost."""
    retrying = Retrying(adapter, policy, sleep=sleep, on_retry=retry_counter(adapter.name))
    limited = ConcurrencyLimited(retrying, concurrency, background_share=background_share, preempt=preempt_background)
    guarded: Entity = WithDeadline(limited, deadline_s)
    if breaker is not None:
        guarded = CircuitBroken(guarded, breaker)
    return Observed(guarded)


def timed() -> Callable[[], float]:
    """A stopwatch in milliseconds (adapters report latency per attempt)."""
    start = time.perf_counter()
    return lambda: (time.perf_counter() - start) * 1000.0


def tag_entity(exc: EntityError, name: str) -> EntityError:
    if not exc.entity:
        exc.entity = name
    return exc
