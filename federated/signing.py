"""The registry's Ed25519 signing key and its errors: the key is made 0600 on first use and refused if others
can read it; verification uses the public key (pinned outside the registry folder when given)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from federated.active import atomic_write

__all__ = ["ModelNotFound", "RegistryError", "SignatureInvalid", "SigningKeys", "key_id"]


class RegistryError(Exception):
    """A registry operation failed; the message says which version and why."""


class ModelNotFound(RegistryError):
    """No such version, or no active version yet."""


class SignatureInvalid(RegistryError):
    """A signature, key or hash check failed: the version is refused, not loaded."""


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


class SigningKeys:
    """The private key at ``key_path`` and its public key (default: beside it, ``<stem>.pub.pem``)."""

    def __init__(self, key_path: Path, public_key_path: Path | None = None) -> None:
        self.key_path = Path(key_path)
        self.public_key_path = public_key_path or self.key_path.with_name(self.key_path.stem + ".pub.pem")

    def private_key(self) -> Ed25519PrivateKey:
        """Load the signing key, creating it (0600) on first use; refuse one others can read."""
        if not self.key_path.exists():
            self.key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            pem = Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            fd, tmp = tempfile.mkstemp(dir=self.key_path.parent, prefix=".key.")  # created 0600
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(pem)
                with contextlib.suppress(FileExistsError):  # link = create-if-absent: concurrent first uses agree
                    os.link(tmp, self.key_path)
            finally:
                Path(tmp).unlink(missing_ok=True)
        mode = self.key_path.stat().st_mode & 0o777
        if mode & 0o077:
            raise RegistryError(f"signing key {self.key_path} has mode {mode:o}; it must be private (chmod 600)")
        key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise RegistryError(f"{self.key_path} is not an Ed25519 private key")
        if not self.public_key_path.exists():
            self.public_key_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.public_key_path, key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return key

    def public_key(self) -> Ed25519PublicKey:
        if not self.public_key_path.exists():
            raise SignatureInvalid(f"no public key at {self.public_key_path}: cannot verify any model")
        key = serialization.load_pem_public_key(self.public_key_path.read_bytes())
        if not isinstance(key, Ed25519PublicKey):
            raise SignatureInvalid(f"{self.public_key_path} is not an Ed25519 public key")
        return key
