"""Per-tenant request rate limits: a token bucket per tenant, shared by every worker through Redis when
``redis_url`` is set, in this process otherwise (docs/api.md, "Rate limits").

A rate is written ``<count>/<second|minute|hour|day>`` with an optional ``burst <n>``, e.g. ``50/second burst 100``:
a tenant may send ``burst`` requests at once (default: ``count``), and the bucket refills at ``count`` per unit.
``off`` disables the limit. The bucket is kept as GCRA (generic cell rate algorithm): one number per tenant, the
"theoretical arrival time" of its next request, which is exactly a token bucket and tells the refused caller how
long to wait (``Retry-After``).

Why not the ``limits`` library: it offers fixed, moving and sliding windows, not a token bucket (a burst then a
steady rate), and its moving window keeps one entry per request of the window. Here the Redis state is one key per
tenant, updated by one Lua script that reads Redis' own clock, so workers with skewed clocks agree.

Redis unavailable: requests are let through — a rate limit that takes the API down with it would be worse than
none, as for the circuit breakers — but never silently: each one is counted in ``fedcd_rate_limit_fail_open_total``
and a warning is logged (at most once a minute, not once a request).

Without Redis each worker process has its own buckets, so N workers let a tenant through at N times its rate:
:func:`warn_per_worker_buckets` says so at start.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = [
    "MemoryBuckets", "Rate", "RateLimited", "RateLimiter", "RedisBuckets", "parse_rate", "warn_per_worker_buckets",
]

log = logging.getLogger("fedcd.ratelimit")
_WARN_EVERY_S = 60.0  # the fail-open warning's interval: an outage under load would otherwise log every request

_UNITS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
_RATE = re.compile(
    r"^\s*(\d+)\s*(?:/|per)\s*(second|minute|hour|day)s?\s*(?:[,;]?\s*burst\s*[= ]?\s*(\d+))?\s*$", re.IGNORECASE
)


@dataclass(frozen=True)
class Rate:
    count: int
    per_s: float
    burst: int

    @property
    def interval_s(self) -> float:
        """Seconds one request's token takes to come back."""
        return self.per_s / self.count

    def __str__(self) -> str:
        unit = next(name for name, seconds in _UNITS.items() if seconds == self.per_s)
        return f"{self.count}/{unit} burst {self.burst}"


def parse_rate(text: str) -> Rate | None:
    """``"50/second burst 100"`` → a :class:`Rate`; ``"off"`` → ``None``; anything else: ``ValueError``."""
    if text.strip().lower() in ("off", "none", "disabled"):
        return None
    match = _RATE.match(text)
    if match is None:
        raise ValueError(f"rate {text!r}: write <count>/<second|minute|hour|day> [burst <n>], e.g. '50/second burst "
                         "100', or 'off'")
    count, unit, burst = int(match.group(1)), match.group(2).lower(), match.group(3)
    if count < 1 or (burst is not None and int(burst) < 1):
        raise ValueError(f"rate {text!r}: the count and the burst must be at least 1")
    return Rate(count=count, per_s=_UNITS[unit], burst=int(burst) if burst is not None else count)


class RateLimited(Exception):
    """The tenant is over its request rate: answered 429 with ``Retry-After`` (never a privacy budget)."""

    def __init__(self, tenant: str, rate: Rate, retry_after_s: float) -> None:
        self.tenant, self.rate = tenant, rate
        self.retry_after_s = max(1, math.ceil(retry_after_s))  # whole seconds, never 0: "now" would be refused again
        super().__init__(
            f"rate limit: tenant '{tenant}' sent more requests than its rate allows ({rate}); this is a request rate "
            f"limit, not a privacy budget — retry after {self.retry_after_s} s"
        )


class Buckets(Protocol):
    async def take(self, tenant: str, rate: Rate) -> float:
        """Take one token: 0 when the request may go, else the seconds until it may."""
        ...

    async def aclose(self) -> None: ...


class MemoryBuckets:
    """This process's buckets (one worker): a dict of arrival times. ``clock``: tests pass a fake one."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tat: dict[str, float] = {}
        self._lock = threading.Lock()  # the event loop is one thread, but tests may share buckets across loops

    async def take(self, tenant: str, rate: Rate) -> float:
        with self._lock:
            now = self._clock()
            tat = max(self._tat.get(tenant, now), now)
            # (burst - 1) intervals ahead at most; written so, not as tat + T - burst*T: float rounding of that
            # refused a bucket's very first request.
            allowed_at = tat - (rate.burst - 1) * rate.interval_s
            if now < allowed_at:
                return allowed_at - now
            self._tat[tenant] = tat + rate.interval_s
            if len(self._tat) > 10_000:  # forget full buckets (a tenant whose time passed is as good as new)
                self._tat = {k: v for k, v in self._tat.items() if v > now}
            return 0.0

    async def aclose(self) -> None:
        return None


# One tenant's bucket, atomically; times in microseconds from Redis' own clock (TIME), so every worker agrees.
# Returns 0 (allowed, the new arrival time stored with an expiry) or the microseconds to wait.
_TAKE = """
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allowed_at = tat - (burst - 1) * interval
if now < allowed_at then return math.max(1, allowed_at - now) end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return 0
"""


class RedisBuckets:
    """Buckets shared by every worker. ``prefix``: the key prefix (one per deployment; tests use one per run)."""

    def __init__(self, url: str, *, prefix: str, timeout_s: float = 0.5) -> None:
        if not prefix:
            raise ValueError("a key prefix is required (keys of other applications must stay untouched)")
        self.prefix = prefix
        # Short timeouts: every request waits for this answer.
        self._redis = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._take = self._redis.register_script(_TAKE)
        self._warned_at = -math.inf

    def key(self, tenant: str) -> str:
        return f"{self.prefix}{tenant}"

    async def take(self, tenant: str, rate: Rate) -> float:
        interval_us = max(1, round(rate.interval_s * 1_000_000))
        try:
            wait_us = await self._take(keys=[self.key(tenant)], args=[interval_us, rate.burst])
        except (RedisError, OSError) as exc:
            # Imported here: app.metrics imports the settings, which import this module (parse_rate).
            from app.metrics import count_rate_limit_fail_open

            count_rate_limit_fail_open(tenant)
            now = time.monotonic()
            if now - self._warned_at > _WARN_EVERY_S:
                self._warned_at = now
                log.warning("rate limits are not enforced while Redis is unavailable (%s): requests are let through, "
                            "each counted in fedcd_rate_limit_fail_open_total; this warning repeats at most every "
                            "%.0f s", type(exc).__name__, _WARN_EVERY_S)
            return 0.0
        return int(wait_us) / 1_000_000

    async def aclose(self) -> None:
        await self._redis.aclose()


class RateLimiter:
    """The gateway's limiter: the rate of each tenant (a tenant's own, or the default) and the buckets."""

    def __init__(self, default: Rate | None, buckets: Buckets, *, tenants: Mapping[str, Rate | None] | None = None) -> None:
        self.default, self.buckets, self.tenants = default, buckets, dict(tenants or {})

    def rate_of(self, tenant: str) -> Rate | None:
        return self.tenants[tenant] if tenant in self.tenants else self.default

    async def check(self, tenant: str) -> None:
        """Let one request of ``tenant`` through, or raise :class:`RateLimited`."""
        rate = self.rate_of(tenant)
        if rate is None:
            return
        wait_s = await self.buckets.take(tenant, rate)
        if wait_s > 0:
            raise RateLimited(tenant, rate, wait_s)

    async def aclose(self) -> None:
        await self.buckets.aclose()


def warn_per_worker_buckets(
    *, rate_limit: str, tenant_rates: Mapping[str, str], shared: bool, workers: int
) -> str | None:
    """At start: the warning (logged, and returned) that ``workers`` processes without Redis (``shared`` false) each
    keep their own buckets, so a tenant gets ``workers`` times its rate and burst; None when that is not the case
    (one worker, Redis, or no limit at all)."""
    rates = [parse_rate(rate_limit), *(parse_rate(rate) for rate in tenant_rates.values())]
    if shared or workers <= 1 or all(rate is None for rate in rates):
        return None
    message = (
        f"rate limits: {workers} workers and no FEDCD_REDIS_URL: each worker keeps its own token buckets, so the "
        f"effective limit is {workers}x the configured rate and burst per tenant (FEDCD_RATE_LIMIT={rate_limit!r}). "
        "Set FEDCD_REDIS_URL to share one bucket per tenant across workers (docs: api.md, 'Rate limits')"
    )
    log.warning(message)
    return message
