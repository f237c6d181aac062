"""Which model version is active, per Q-matrix: one small pointer file each, replaced atomically.

Layout (inside a :class:`~federated.registry.ModelRegistry` folder)::

    active/<name>.json    {"qmatrix_id", "version", "activated_at", "previous": [...]}

``<name>`` is the Q-matrix id percent-encoded (dots too, so no id can name ``..`` or a
path), or ``sha256-<hex>`` for ids too long for a file name. One file per Q-matrix means
publishing for one Q-matrix never rewrites another's pointer, and a reader can tell from
the file's identity (inode, size, mtime) alone whether anything changed: the gateway checks
that on every request and loads a new version without a restart.

Registries written before models were kept per Q-matrix have one ``active.json``; it is
read as the pointer of the Q-matrix its version was trained for, and replaced by that
Q-matrix's pointer file on the next activation.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["NO_POINTER", "ActivePointers", "Stamp", "atomic_write", "utc_now"]

LEGACY = "active.json"
Stamp = tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]
NO_POINTER: Stamp = (None, None)  # the stamp of a Q-matrix with no pointer file and no legacy active.json


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync, then rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _file_name(qmatrix_id: str) -> str:
    name = quote(qmatrix_id, safe="-_").replace(".", "%2E")
    return name if len(name) <= 200 else "sha256-" + hashlib.sha256(qmatrix_id.encode()).hexdigest()


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _read(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise OSError(f"{path} is unreadable: {exc}") from exc
    return state if isinstance(state, dict) and state.get("version") else None


class ActivePointers:
    """Read and write the per-Q-matrix active pointers of one registry folder.

    ``qmatrix_of(version)`` names the Q-matrix a version was trained for; it routes a
    legacy ``active.json`` to its Q-matrix.
    """

    def __init__(self, root: Path, *, qmatrix_of: Callable[[str], str | None]) -> None:
        self.root, self.folder, self._qmatrix_of = Path(root), Path(root) / "active", qmatrix_of

    def _legacy(self) -> tuple[str, dict[str, Any]] | None:
        state = _read(self.root / LEGACY)
        if state is None:
            return None
        qmatrix_id = self._qmatrix_of(str(state["version"]))
        return (qmatrix_id, state) if qmatrix_id else None

    def get(self, qmatrix_id: str) -> dict[str, Any] | None:
        """The pointer of ``qmatrix_id`` ({"version", "previous", ...}), or None when none is active."""
        state = _read(self.folder / f"{_file_name(qmatrix_id)}.json")
        if state is not None:
            return state
        legacy = self._legacy()
        return legacy[1] if legacy is not None and legacy[0] == qmatrix_id else None

    def all(self) -> dict[str, dict[str, Any]]:
        """Every Q-matrix with an active version -> its pointer."""
        found: dict[str, dict[str, Any]] = {}
        legacy = self._legacy()
        if legacy is not None:
            found[legacy[0]] = legacy[1]
        if self.folder.is_dir():
            for path in sorted(self.folder.glob("*.json")):
                state = _read(path)
                if state is not None and isinstance(state.get("qmatrix_id"), str):
                    found[state["qmatrix_id"]] = state
        return found

    def set(self, qmatrix_id: str, *, version: str, previous: list[str]) -> None:
        """Point ``qmatrix_id`` at ``version`` (atomic); retire a legacy ``active.json`` that pointed at it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        data = {"qmatrix_id": qmatrix_id, "version": version, "activated_at": utc_now(), "previous": previous[-50:]}
        atomic_write(self.folder / f"{_file_name(qmatrix_id)}.json", (json.dumps(data, indent=2) + "\n").encode())
        legacy = self._legacy()
        if legacy is not None and legacy[0] == qmatrix_id:
            (self.root / LEGACY).unlink(missing_ok=True)

    def stamp(self, qmatrix_id: str) -> Stamp:
        """Changes whenever the pointer of ``qmatrix_id`` may have changed (cheap: two stat calls)."""
        return _identity(self.folder / f"{_file_name(qmatrix_id)}.json"), _identity(self.root / LEGACY)
