"""Processes a federation test started, found by the marker in their environment."""

from __future__ import annotations

from pathlib import Path

__all__ = ["marked_processes"]


def marked_processes(marker: str) -> list[int]:
    """Live processes whose environment carries this test's marker (everything it started, and their children)."""
    needle, found = f"FEDCD_TEST_MARKER={marker}".encode(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0") and \
                        (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
