"""py-spy samples of the gateway for ``fedcd bench gateway --profile``: where its CPU goes, as text."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["BenchSetupError", "Profile", "py_spy_command", "start_profile"]


class BenchSetupError(RuntimeError):
    """A tool the requested bench needs is missing (py-spy, LiteLLM): the user's to install, not a crash."""


class Profile:
    """A running py-spy recorder; :meth:`stop` returns the summary."""

    def __init__(self, proc: subprocess.Popen[bytes], out: Path) -> None:
        self.proc, self.out = proc, out

    def stop(self) -> str:
        """The profile's own time by library, top frames by own samples and by inclusive samples."""
        self.proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
        self.proc.wait(timeout=60)
        return summarize(self.out.read_text().splitlines())


def py_spy_command() -> str | None:
    """py-spy on PATH or beside this Python (a venv's bin), else None."""
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def start_profile(
    pid: int, work: Path, start: Callable[[str, Sequence[str], dict[str, str]], subprocess.Popen[bytes]]
) -> Profile:
    """Sample process ``pid`` (and its children) with py-spy; ``start`` launches a process the bench owns."""
    command = py_spy_command()
    if command is None:
        raise BenchSetupError("--profile needs py-spy: pip install -e '.[bench]'")
    out = work / "profile.txt"
    # --nonblocking: sample without pausing the gateway (pausing would add latency to what is measured);
    # --gil: only the thread holding the GIL, i.e. where the gateway's Python CPU goes.
    proc = start("py-spy", [command, "record", "--pid", str(pid), "--nonblocking", "--gil", "--format", "raw",
                            "--rate", "250", "--output", str(out), "--subprocesses"], dict(os.environ))
    time.sleep(1.0)
    return Profile(proc, out)


def summarize(lines: Sequence[str]) -> str:
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    by_library: dict[str, int] = {}
    total = 0
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1] if " (" in f else f for f in stack.split(";")]
        if not frames:
            continue
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        library = _library(frames[-1])
        by_library[library] = by_library.get(library, 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n

    def top(table: dict[str, int], k: int) -> list[str]:
        return [f"{100 * v / total:5.1f}%  {name}" for name, v in sorted(table.items(), key=lambda kv: -kv[1])[:k]]

    return "\n".join([f"samples of the thread holding the GIL: {total}", "",
                      "own time by library (the innermost frame's package):", *top(by_library, 20), "",
                      "own time:", *top(own, 25), "", "inclusive:", *top(inclusive, 60)])


def _library(frame: str) -> str:
    """``SocketStream.send (anyio/_backends/_asyncio.py:1474)`` -> ``anyio``; fedcd's own packages by name."""
    path = frame.rpartition(" (")[2].rstrip(")")
    head = path.split("/")[0].split(":")[0]
    return head.removesuffix(".py") or "?"
