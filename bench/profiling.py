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
    pid: int, work: Path, start: Callable[[str, Sequence[str], dict[str, str]], subprocess.Popen[bytes]],
    *, name: str = "profile",
) -> Profile:
    """Sample process ``pid`` (and its children) with py-spy into ``work/<name>.txt``; ``start`` launches a process
    the bench owns."""
    command = py_spy_command()
    if command is None:
        raise BenchSetupError("--profile needs py-spy: pip install -e '.[bench]'")
    out = work / f"{name}.txt"
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
    by_concern: dict[str, int] = {}
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
        concern = concern_of(frames)
        by_concern[concern] = by_concern.get(concern, 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n

    def top(table: dict[str, int], k: int) -> list[str]:
        return [f"{100 * v / total:5.1f}%  {name}" for name, v in sorted(table.items(), key=lambda kv: -kv[1])[:k]]

    return "\n".join([f"samples of the thread holding the GIL: {total}", "",
                      "by concern (a sample goes to the first concern its stack matches, in this order):",
                      *top(by_concern, len(_CONCERNS) + 1), "",
                      "own time by library (the innermost frame's package):", *top(by_library, 20), "",
                      "own time:", *top(own, 25), "", "inclusive:", *top(inclusive, 60)])


def _path(frame: str) -> str:
    return frame.rpartition(" (")[2].rstrip(")")


# (concern, any frame of the stack under one of these paths) — fedcd's own concerns first, so that the SQL under the
# ledger counts as the ledger and the pydantic under the SDK as the entity call.
_CONCERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ledger (charge, release: its SQL and worker threads)", ("privacy/ledger/",)),
    ("usage records (one insert per diagnosis)", ("app/services/usage.py", "app/storage/usage.py")),
    ("rate limiter", ("app/ratelimit.py",)),
    ("metrics", ("app/metrics.py", "prometheus_client/")),
    ("logging", ("logging/",)),
    ("auth: API key and tenant", ("app/auth.py", "app/keys")),
    ("entity calls: official SDK and its HTTP client", ("openai/", "groq/", "anthropic/", "httpx", "httpcore")),
    ("entity calls: fedcd's wrappers, prompts, parsing", ("providers/",)),
    ("diagnosis maths (aggregation, noise, posterior)", ("diagnosis/", "privacy/")),
    ("request and response models (pydantic, JSON)", ("app/schemas/", "app/services/answers.py", "pydantic",
                                                       "json/", "fastapi/encoders.py", "fastapi/_compat")),
)
_INNERMOST: tuple[tuple[str, tuple[str, ...]], ...] = (  # the rest, by the innermost frame's library
    ("HTTP server and framework (uvicorn, starlette, fastapi)", ("uvicorn/", "starlette/", "fastapi/", "h11/",
                                                                 "httptools/")),
    ("event loop and threads (asyncio, anyio)", ("asyncio/", "anyio/", "concurrent/", "threading", "selectors",
                                                 "uvloop/")),
)


def concern_of(frames: Sequence[str]) -> str:
    """The concern a sample's stack belongs to (see ``_CONCERNS``), else the innermost frame's kind, else other."""
    paths = [_path(f) for f in frames]
    for concern, prefixes in _CONCERNS:
        if any(path.startswith(prefixes) for path in paths):
            return concern
    for concern, prefixes in _INNERMOST:
        if paths and paths[-1].startswith(prefixes):
            return concern
    if any(path.startswith("app/") for path in paths):
        return "other gateway code (planning, services, storage)"
    return "other (idle process frames, imports)"


def _library(frame: str) -> str:
    """``SocketStream.send (anyio/_backends/_asyncio.py:1474)`` -> ``anyio``; fedcd's own packages by name."""
    path = frame.rpartition(" (")[2].rstrip(")")
    head = path.split("/")[0].split(":")[0]
    return head.removesuffix(".py") or "?"
