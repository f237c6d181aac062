"""The processes a bench (or ``fedcd evaluate --served-via-api``) starts on loopback: a free port, a started
process's readiness, and ending exactly the processes it started."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

__all__ = ["ROOT", "Processes", "free_port", "wait_http"]

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], seconds: float = 120.0) -> None:
    """Until ``url`` answers at all; an error at once if ``proc`` exits first, or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {seconds:.0f} s")


class Processes:
    """Every process the bench starts, ended when it finishes (and nothing else)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir, self.procs = log_dir, []  # type: ignore[var-annotated]

    def start(
        self, name: str, args: Sequence[str], env: dict[str, str], cwd: Path = ROOT
    ) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(list(args), env=env, cwd=cwd, stdout=log, stderr=log)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
