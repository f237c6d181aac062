"""Circuit records in Redis, so every gateway worker (and every host) shares each entity's breaker.

One hash per entity at ``<prefix><entity>``; a healthy circuit (closed, no failures) is no key at
all. Each change is an optimistic transaction (``WATCH`` the key, read it, compute the transition
in Python with the same pure functions the in-process store uses, ``MULTI``/``EXEC`` the result;
another worker's write in between aborts the ``EXEC`` and the change is recomputed on the new
record), so two workers can never overwrite each other's transition.

Times in the records are the workers' wall clocks: hosts sharing one Redis should run NTP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError, WatchError

from providers.circuit import Circuit, CircuitStoreUnavailable

__all__ = ["RedisCircuitStore"]

T = TypeVar("T")
_MAX_RACES = 50  # EXECs lost to concurrent writers before giving up on one change


class RedisCircuitStore:
    """``url``: a redis:// URL; ``prefix``: the key prefix (one per deployment; tests use one per run)."""

    def __init__(self, url: str, *, prefix: str, timeout_s: float = 1.0) -> None:
        if not prefix:
            raise ValueError("a key prefix is required (keys of other applications must stay untouched)")
        self.prefix = prefix
        # Short socket timeouts: a hung Redis must cost a diagnosis a second, not its deadline.
        self._redis = Redis.from_url(
            url, decode_responses=True, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    async def update(self, name: str, change: Callable[[Circuit], tuple[Circuit, T]]) -> T:
        key = self.key(name)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for _ in range(_MAX_RACES):
                    try:
                        await pipe.watch(key)
                        current = Circuit.from_fields(await pipe.hgetall(key))
                        new, result = change(current)
                        if new == current:
                            await pipe.reset()  # nothing to write: drop the WATCH
                            return result
                        pipe.multi()
                        if new == Circuit():
                            pipe.delete(key)
                        else:
                            pipe.hset(key, mapping=new.to_fields())
                        await pipe.execute()
                        return result
                    except WatchError:
                        continue  # another worker changed the record first: recompute on its result
        except (RedisError, OSError) as exc:
            raise CircuitStoreUnavailable(f"redis: {exc}") from exc
        raise CircuitStoreUnavailable(f"redis: record {key} changed under {_MAX_RACES} attempts in a row")

    async def read(self, names: Iterable[str]) -> dict[str, Circuit]:
        names = list(names)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hgetall(self.key(name))
                records = await pipe.execute()
        except (RedisError, OSError) as exc:
            raise CircuitStoreUnavailable(f"redis: {exc}") from exc
        return {name: Circuit.from_fields(fields) for name, fields in zip(names, records, strict=True)}

    async def aclose(self) -> None:
        await self._redis.aclose()
