"""Waiting for what a test server does in the background (jobs, sweeps): bounded in time, never a check of speed.

The bound is generous on purpose: CI runs on a busy 2-core machine, and a job that takes a minute there instead of
a second is slow, not wrong. A test that means to measure speed belongs in ``fedcd bench``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi.testclient import TestClient

__all__ = ["WAIT_LIMIT_S", "finished_job", "wait_until"]

WAIT_LIMIT_S = 300.0
T = TypeVar("T")


def wait_until(read: Callable[[], T], done: Callable[[T], bool], *, what: str, limit_s: float = WAIT_LIMIT_S,
               poll_s: float = 0.02) -> T:
    """Poll ``read()`` until ``done`` holds for its value, which is returned; an AssertionError after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not done after {limit_s:g} s (last seen: {value!r})")
        time.sleep(poll_s)


def finished_job(client: TestClient, job_id: str, *, headers: dict[str, str] | None = None,
                 path: str = "/v1/jobs/{job_id}", limit_s: float = WAIT_LIMIT_S) -> dict[str, Any]:
    """The job as ``path`` shows it once it has finished (succeeded, failed or cancelled)."""
    return wait_until(
        lambda: client.get(path.format(job_id=job_id), headers=headers).json(),
        lambda job: job.get("status") not in ("queued", "running", "cancelling"),
        what=f"job {job_id}", limit_s=limit_s,
    )
