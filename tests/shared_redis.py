"""A Redis key prefix of a test's own, every key under it deleted after.

The server is the machine's Redis at 127.0.0.1:6379 (``FEDCD_TEST_REDIS_URL`` overrides it). Where it
cannot be reached the tests skip — except in CI (``CI=true``), where they fail: CI must never pass without
having run them.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest
import redis

__all__ = ["REDIS_URL", "fresh_prefix"]

REDIS_URL = os.environ.get("FEDCD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@contextlib.contextmanager
def fresh_prefix() -> Iterator[str]:
    """Yield ``fedcd-test:<random>:``; delete every key under it afterwards."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        client.close()
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Redis is required in CI and is unavailable at {REDIS_URL}: {exc}")
        pytest.skip(f"Redis unavailable at {REDIS_URL}: {exc}")
    prefix = f"fedcd-test:{uuid.uuid4().hex}:"
    try:
        yield prefix
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
