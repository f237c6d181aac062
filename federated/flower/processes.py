"""Flower's processes, started and ended cleanly: environment, ports, and whole process trees.

What it takes to run Flower 1.42's deployment engine without a network or Ray:

* ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` (and the SuperLink flag): otherwise
  every run tries ``uv sync`` against the package index. The apps import ``federated``
  from this environment; ``PYTHONPATH`` names the project root so they find it.
* ``FLWR_TELEMETRY_ENABLED=0``, ``FLWR_DISABLE_UPDATE_CHECK=1``, and ``FLWR_HOME`` in a
  folder of our own, whose ``config.toml`` names the SuperLink connection.
* SuperLink and SuperNodes start ``flower-superexec`` children, which start a process per
  app run. :class:`ProcessTree` starts each child in a session of its own, collects the
  whole tree when closing, ends every process in it by PID, and checks that none survives.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["FLOWER_BIN", "ProcessTree", "flower_env", "free_port", "wait_for_port"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FLOWER_BIN = Path(sys.executable).parent  # flower-superlink, flower-supernode, flwr: beside this Python


def flower_env(home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for every Flower process: offline, no telemetry, our own FLWR_HOME."""
    base = dict(os.environ if base is None else base)
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), base.get("PYTHONPATH", "")) if p)
    bins = os.pathsep.join(p for p in (str(FLOWER_BIN), base.get("PATH", "")) if p)  # they spawn flower-superexec
    return {**base, "PATH": bins, "PYTHONPATH": path, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen[bytes], host: str = "127.0.0.1") -> None:
    """Return once something listens on ``host:port``; raise if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        if proc.poll() is not None:
            raise RuntimeError(f"the process listening on {port} exited with {proc.returncode}; see its log")
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout:.0f} s")


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, session id, state) for every process visible in /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            table[int(entry.name)] = (int(fields[1]), int(fields[3]), fields[0])
    return table


def _tree(roots: Sequence[int]) -> tuple[set[int], set[int]]:
    """All live descendants of ``roots`` (included) and their session ids."""
    table = _processes()
    found, todo = set(), [r for r in roots if r in table]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(child for child, (ppid, _, _) in table.items() if ppid == pid)
    return found, {table[p][1] for p in found if p in table}


class ProcessTree:
    """Child processes, each leading a session of its own, and everything they start."""

    def __init__(self, env: Mapping[str, str], log_dir: Path) -> None:
        self.env, self.log_dir = dict(env), Path(log_dir)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._sessions: set[int] = set()

    def spawn(self, args: Sequence[str], log_name: str) -> subprocess.Popen[bytes]:
        """Start ``args`` with stdout and stderr in ``<log_dir>/<log_name>``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / log_name).open("wb") as log:
            proc = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        self._sessions.add(proc.pid)  # start_new_session: the child leads its own session
        return proc

    def log(self, log_name: str) -> str:
        path = self.log_dir / log_name
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self, timeout: float = 15.0) -> None:
        """End every process started here, and their descendants, by PID; check none survives."""
        pids, sessions = _tree([p.pid for p in self.procs])
        self._sessions |= sessions
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.survivors():
                for proc in self.procs:
                    proc.poll()
                time.sleep(0.1)
            if not self.survivors():
                break
            pids = self.survivors()
        for proc in self.procs:
            proc.poll()
        if self.survivors():
            raise RuntimeError(f"Flower processes survived: {sorted(self.survivors())}")

    def survivors(self) -> set[int]:
        """Live (non-zombie) processes in any session a process started here leads."""
        return {pid for pid, (_, sid, state) in _processes().items() if sid in self._sessions and state != "Z"}
