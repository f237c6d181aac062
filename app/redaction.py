"""Keeping student identifiers out of logs and error texts.

Where a log line or a job error must refer to a student, it uses :meth:`Redactor.student`, an
HMAC-SHA-256 of (tenant, student id) under a server secret kept in the state dir (created once,
mode 0600). The same student gives the same reference in every line, so an operator can follow
one student through the logs, but the reference cannot be turned back into the id — not even
by trying candidate ids — without the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

__all__ = ["Redactor", "load_or_create_secret"]


def load_or_create_secret(path: Path) -> bytes:
    """The secret at ``path``; created atomically (O_EXCL, 0600) by whichever process comes first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        for _ in range(100):  # another process is writing it: wait for the bytes
            data = path.read_bytes()
            if len(data) >= 32:
                return data
            time.sleep(0.01)
        raise RuntimeError(f"{path} exists but holds no secret") from None
    secret = secrets.token_bytes(32)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret)
        fh.flush()
        os.fsync(fh.fileno())
    return secret


class Redactor:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> Redactor:
        return cls(load_or_create_secret(state_dir / "server-secret"))

    def student(self, tenant: str, student_id: str) -> str:
        digest = hmac.new(self._secret, f"{tenant}\x00{student_id}".encode(), hashlib.sha256).hexdigest()
        return f"stu_{digest[:16]}"
