"""Real gateway processes for the scale-out tests: start ``fedcd serve`` with given settings, wait, stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["free_port", "gateway_process", "start_gateway", "stop_gateway"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_gateway(port: int, env: Mapping[str, str], *, workers: int = 1, log: Path | None = None) -> subprocess.Popen[bytes]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "FEDCD_DEFAULT_CALIBRATION": "false", "FEDCD_LOCAL_FED": "false",
            "FEDCD_PRELOAD_MODELS": "false", **env}
    for key, value in full.items():
        if isinstance(value, list | dict):  # pragma: no cover - callers pass strings
            full[key] = json.dumps(value)
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--workers", str(workers)],
        env=full, cwd=ROOT, stdout=out, stderr=out,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the gateway exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the gateway did not start in 90 s")


def stop_gateway(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def gateway_process(port: int, env: Mapping[str, str], **kwargs: object) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_gateway(port, env, **kwargs)  # type: ignore[arg-type]
    try:
        yield proc
    finally:
        stop_gateway(proc)
