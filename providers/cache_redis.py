"""The response cache in Redis, shared by every gateway worker (and host) using the same prefix.

Each answer is a string at ``<prefix>e:<key>`` with Redis expiry (``PX ttl``). The size bound is
fedcd's own, per prefix: a sorted set ``<prefix>index`` holds every stored key scored by when it was
written; each write (one Lua script, atomic) drops index entries older than the TTL, adds its key,
and evicts the oldest-written keys beyond ``max_entries`` (eviction by age of write, not by use —
a hit does not refresh an entry). Redis's own ``maxmemory`` policy stays the operator's, on top.

A tag (``providers.cache.tagged_as``) is a set ``<prefix>t:<tag>`` of the keys stored or hit under it, expiring
a TTL after its last addition (so never before an entry it names); ``forget`` deletes those entries and the set.

The script touches keys it computes from the prefix, which a Redis Cluster cannot route: use a
single Redis (or one hash tag in the prefix, ``fedcd:{cache}:``, so every key lands in one slot).
"""

from __future__ import annotations

import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

from providers.cache import CacheStoreUnavailable

__all__ = ["RedisCacheStore"]

_PUT = """
local index, key, value = KEYS[1], KEYS[2], ARGV[1]
local ttl_ms, now_ms, max_entries = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('SET', key, value, 'PX', ttl_ms)
redis.call('ZREMRANGEBYSCORE', index, '-inf', now_ms - ttl_ms)
redis.call('ZADD', index, now_ms, key)
local excess = redis.call('ZCARD', index) - max_entries
if excess > 0 then
  local oldest = redis.call('ZPOPMIN', index, excess)
  for i = 1, #oldest, 2 do redis.call('DEL', oldest[i]) end
end
redis.call('PEXPIRE', index, ttl_ms)
return excess
"""


class RedisCacheStore:
    """``url``: a redis:// URL; ``prefix``: the key prefix (one per deployment; tests use one per run)."""

    def __init__(self, url: str, *, prefix: str, max_entries: int, ttl_s: float, timeout_s: float = 1.0) -> None:
        if not prefix:
            raise ValueError("a key prefix is required (keys of other applications must stay untouched)")
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError(f"max_entries must be >= 1 and ttl_s > 0, got {max_entries}, {ttl_s}")
        self.prefix, self.max_entries, self.ttl_s = prefix, max_entries, ttl_s
        # Short socket timeouts: a hung Redis must cost a diagnosis a second, not its deadline.
        self._redis = Redis.from_url(url, decode_responses=True, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._put = self._redis.register_script(_PUT)

    @property
    def index_key(self) -> str:
        return f"{self.prefix}index"

    def entry_key(self, key: str) -> str:
        return f"{self.prefix}e:{key}"

    async def get(self, key: str) -> str | None:
        try:
            value = await self._redis.get(self.entry_key(key))
        except (RedisError, OSError) as exc:
            raise CacheStoreUnavailable(f"redis: {exc}") from exc
        return value if isinstance(value, str) else None

    async def put(self, key: str, value: str) -> None:
        ttl_ms = max(1, round(self.ttl_s * 1000))
        try:
            await self._put(
                keys=[self.index_key, self.entry_key(key)],
                args=[value, ttl_ms, round(time.time() * 1000), self.max_entries],
            )
        except (RedisError, OSError) as exc:
            raise CacheStoreUnavailable(f"redis: {exc}") from exc

    def tag_key(self, tag: str) -> str:
        return f"{self.prefix}t:{tag}"

    async def tag(self, tag: str, key: str) -> None:
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.sadd(self.tag_key(tag), key)
                pipe.pexpire(self.tag_key(tag), max(1, round(self.ttl_s * 1000)))
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise CacheStoreUnavailable(f"redis: {exc}") from exc

    async def forget(self, tag: str) -> int:
        try:
            keys = list(await self._redis.smembers(self.tag_key(tag)))
            if keys:
                await self._redis.delete(*(self.entry_key(k) for k in keys))
                await self._redis.zrem(self.index_key, *(self.entry_key(k) for k in keys))
            await self._redis.delete(self.tag_key(tag))
        except (RedisError, OSError) as exc:
            raise CacheStoreUnavailable(f"redis: {exc}") from exc
        return len(keys)

    async def tagged(self, tag: str) -> int:
        try:
            return int(await self._redis.scard(self.tag_key(tag)))
        except (RedisError, OSError) as exc:
            raise CacheStoreUnavailable(f"redis: {exc}") from exc

    async def size(self) -> int:
        """Entries the index holds (some may have expired since their write)."""
        try:
            return int(await self._redis.zcard(self.index_key))
        except (RedisError, OSError) as exc:
            raise CacheStoreUnavailable(f"redis: {exc}") from exc

    async def aclose(self) -> None:
        await self._redis.aclose()
