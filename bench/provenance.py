"""Where a bench ran and on what code: the machine's load, this checkout's revision, and another revision's
files (to run its gateway beside this one). Every bench report records the first two."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bench.processes import ROOT
from bench.profiling import BenchSetupError

__all__ = ["checkout", "loadavg", "revision"]


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        return None


def revision() -> str | None:
    """The checkout's commit, marked when tracked files differ from it; ``None`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head} (with uncommitted changes)" if dirty else head


def checkout(revision: str, into: Path) -> Path:
    """The repository's files at ``revision`` (``git archive``), to run its gateway beside this one."""
    into.mkdir(parents=True)
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", revision], capture_output=True,
                                 check=True, timeout=120).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BenchSetupError(f"--baseline {revision}: not a revision of this repository's git history") from exc
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True, timeout=120)
    return into
