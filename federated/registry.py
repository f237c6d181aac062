"""A signed, versioned model registry in one folder: publish, verify, load, activate, roll back.

Layout::

    <root>/
      keys/signing_key.pem        Ed25519 private key (PKCS8 PEM, mode 0600, made on first publish)
      keys/signing_key.pub.pem    its public key
      versions/v0001/model.pt     the CDModel state_dict (torch.save), seen items included
      versions/v0001/manifest.json
      versions/v0001/manifest.sig base64 Ed25519 signature over the exact bytes of manifest.json
      active/<qmatrix>.json       per Q-matrix: {"qmatrix_id", "version", "activated_at", "previous": [...]}
                                  (:mod:`federated.active`), each replaced atomically

The manifest records the weights file's SHA-256, so the one signature covers both. Loading
checks, in order: the signature (with the trusted public key), that the manifest names the
folder it sits in (a signed manifest cannot be replayed as another version), and the weights
hash; only then are the weights deserialised (``weights_only=True``). Anything that fails is
refused with :class:`SignatureInvalid`, never loaded.

Models are kept **per Q-matrix**: every manifest names the ``qmatrix_id`` it was trained for,
and each Q-matrix has its own active version and rollback history. Version numbers are one
sequence for the whole registry.

Versions are numbered ``v0001``, ``v0002``, ... (one more than the highest present); a
version folder is written under a temporary name and renamed into place, so readers never
see half a version and two publishers cannot take the same number. Verification uses
``public_key_path`` when given (pin it outside the registry folder to make the signature
mean more than a checksum), else the public key beside the private key.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from federated.active import ActivePointers, Stamp, utc_now
from federated.model import CDModel
from federated.models import DiagnosisModel, build_model
from federated.signing import ModelNotFound, RegistryError, SignatureInvalid, SigningKeys, key_id

__all__ = ["FORMAT", "LoadedModel", "ModelNotFound", "ModelRegistry", "RegistryError", "SignatureInvalid", "model_key"]


TENANT_PREFIX = "tenant:"  # a tenant's own model's key; no Q-matrix id holds ':' (the API's id pattern refuses it)


def model_key(qmatrix_id: str, tenant: str | None = None) -> str:
    """Whose active model a pointer names: a tenant's own model of its Q-matrix (trained from its upload, served to
    it alone), or — no tenant — an operator's model of the Q-matrix, served to every tenant that uses its id."""
    return qmatrix_id if tenant is None else f"{TENANT_PREFIX}{tenant}/{qmatrix_id}"

FORMAT = "fedcd-model/1"
_VERSION = re.compile(r"^v(\d{4,})$")
_WEIGHTS, _MANIFEST, _SIGNATURE = "model.pt", "manifest.json", "manifest.sig"


@dataclass(frozen=True)
class LoadedModel:
    version: str
    model: DiagnosisModel
    manifest: dict[str, Any]
    signature_verified: bool = True  # a LoadedModel only exists after verification


def jsonable(value: Any) -> Any:
    """Plain JSON values: NaN/inf become None, tuples lists, numpy scalars floats/ints."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ModelRegistry:
    def __init__(
        self, root: str | Path, *, key_path: str | Path | None = None, public_key_path: str | Path | None = None
    ) -> None:
        self.root = Path(root)
        self.keys = SigningKeys(Path(key_path) if key_path else self.root / "keys" / "signing_key.pem",
                                Path(public_key_path) if public_key_path else None)
        self.key_path, self.public_key_path = self.keys.key_path, self.keys.public_key_path
        self.pointers = ActivePointers(self.root, qmatrix_of=self._qmatrix_of)

    # --- keys (federated.signing) ----------------------------------------------------
    def _private_key(self) -> Ed25519PrivateKey:
        return self.keys.private_key()

    def public_key(self) -> Ed25519PublicKey:
        return self.keys.public_key()

    # --- reading -------------------------------------------------------------------
    def _dir(self, version: str) -> Path:
        if not _VERSION.match(version):
            raise ModelNotFound(f"'{version}' is not a version id (expected v0001, v0002, ...)")
        path = self.root / "versions" / version
        if not path.is_dir():
            raise ModelNotFound(f"no model version {version} in {self.root}")
        return path

    def versions(self) -> list[str]:
        """Version ids present, oldest first (whether or not they verify)."""
        folder = self.root / "versions"
        if not folder.is_dir():
            return []
        found = [p.name for p in folder.iterdir() if p.is_dir() and _VERSION.match(p.name)]
        return sorted(found, key=lambda v: int(v[1:]))

    def _qmatrix_of(self, version: str) -> str | None:
        """The Q-matrix a version's manifest names (unverified: only to route a pointer)."""
        try:
            manifest = json.loads((self._dir(version) / _MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError, ModelNotFound):
            return None
        value = manifest.get("qmatrix_id") if isinstance(manifest, dict) else None
        tenant = manifest.get("tenant") if isinstance(manifest, dict) else None
        return model_key(str(value), str(tenant) if tenant else None) if value else None

    def _pointer(self, qmatrix_id: str) -> dict[str, Any] | None:
        try:
            return self.pointers.get(qmatrix_id)
        except OSError as exc:
            raise RegistryError(str(exc)) from exc

    def active_versions(self) -> dict[str, str]:
        """Q-matrix id -> its active version, for every Q-matrix that has one."""
        try:
            return {q: str(state["version"]) for q, state in self.pointers.all().items()}
        except OSError as exc:
            raise RegistryError(str(exc)) from exc

    def _resolve(self, qmatrix_id: str | None) -> str | None:
        """``qmatrix_id``, or the only Q-matrix with an active model (None if none; several must be named)."""
        if qmatrix_id is not None:
            return qmatrix_id
        active = self.active_versions()
        if len(active) > 1:
            raise RegistryError(f"models are active for several Q-matrices ({', '.join(sorted(active))}); name one")
        return next(iter(active), None)

    def active_version(self, qmatrix_id: str | None = None) -> str | None:
        """The active version for ``qmatrix_id`` (default: the only Q-matrix with one), or None."""
        qmatrix_id = self._resolve(qmatrix_id)
        state = self._pointer(qmatrix_id) if qmatrix_id is not None else None
        return str(state["version"]) if state else None

    def pointer_stamp(self, qmatrix_id: str) -> Stamp:
        """Cheap change marker of ``qmatrix_id``'s active pointer (see :mod:`federated.active`)."""
        return self.pointers.stamp(qmatrix_id)

    def verify(self, version: str) -> dict[str, Any]:
        """The version's manifest, after checking its signature and weights hash (else SignatureInvalid)."""
        manifest, _ = self._verified(version)
        return manifest

    def _verified(self, version: str) -> tuple[dict[str, Any], bytes]:
        folder = self._dir(version)
        try:
            manifest_bytes = (folder / _MANIFEST).read_bytes()
            signature = base64.b64decode((folder / _SIGNATURE).read_bytes().strip(), validate=True)
        except (OSError, ValueError) as exc:
            raise SignatureInvalid(f"model {version}: manifest or signature missing or unreadable ({exc})") from exc
        public_key = self.public_key()
        try:
            public_key.verify(signature, manifest_bytes)
        except InvalidSignature:
            raise SignatureInvalid(
                f"model {version}: the manifest signature does not verify with key {key_id(public_key)}; "
                "the manifest was modified or signed by another key. Refusing to load it."
            ) from None
        manifest = json.loads(manifest_bytes)
        if manifest.get("version") != version or manifest.get("format") != FORMAT:
            raise SignatureInvalid(f"model {version}: the signed manifest is for {manifest.get('version')!r} "
                                   f"({manifest.get('format')!r}); refusing a manifest moved between versions")
        try:
            weights = (folder / manifest["weights"]["file"]).read_bytes()
        except OSError as exc:
            raise SignatureInvalid(f"model {version}: weights file unreadable ({exc})") from exc
        digest = hashlib.sha256(weights).hexdigest()
        if digest != manifest["weights"]["sha256"]:
            raise SignatureInvalid(f"model {version}: weights SHA-256 {digest[:16]}... does not match the signed "
                                   f"manifest ({manifest['weights']['sha256'][:16]}...); the weights were modified. "
                                   "Refusing to load them.")
        return manifest, weights

    def load(self, version: str | None = None, *, qmatrix_id: str | None = None) -> LoadedModel:
        """Verify, then load ``version`` (default: the one active for ``qmatrix_id``)."""
        version = version or self.active_version(qmatrix_id)
        if version is None:
            where = f" for Q-matrix '{qmatrix_id}'" if qmatrix_id is not None else ""
            raise ModelNotFound(f"no active model{where} in {self.root}; train one first (fedcd train, "
                                "fedcd federation coordinator)")
        manifest, weights = self._verified(version)
        model = build_model(manifest["config"]["model"])
        state = torch.load(io.BytesIO(weights), map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        model.eval()
        return LoadedModel(version=version, model=model, manifest=manifest)

    def list_versions(self, qmatrix_id: str | None = None) -> list[dict[str, Any]]:
        """One summary per version (of ``qmatrix_id``, or all), oldest first; a version that fails
        verification says why."""
        active, out = set(self.active_versions().values()), []
        for version in self.versions():
            owner = self._qmatrix_of(version)
            if qmatrix_id is not None and owner != qmatrix_id:
                continue
            row: dict[str, Any] = {"version": version, "qmatrix_id": owner, "active": version in active,
                                   "verified": False}
            try:
                m = self.verify(version)
                row.update(verified=True, created_at=m.get("created_at"), rounds=m.get("rounds"),
                           dp_mode=m.get("dp_mode"), epsilon=m.get("epsilon"), forced=m.get("forced"),
                           auc=(m.get("heldout_metrics") or {}).get("auc"))
            except RegistryError as exc:
                row["error"] = str(exc)
            out.append(row)
        return out

    # --- writing -------------------------------------------------------------------
    def publish(
        self, model: CDModel, *, manifest: dict[str, Any], activate: bool = True
    ) -> tuple[str, dict[str, Any]]:
        """Sign and store ``model`` as the next version; ``manifest`` holds the caller's fields
        (rounds, epsilon, delta, dp_mode, heldout_metrics, config.training, qmatrix_id, ...).

        ``manifest["qmatrix_id"]`` is required: the version becomes (with ``activate``) the
        active model of that Q-matrix only. Returns (version, the full signed manifest). The
        registry fills in format, version, created_at, weights (file, sha256, bytes), key_id,
        concepts and config.model.
        """
        if not isinstance(manifest.get("qmatrix_id"), str) or not manifest["qmatrix_id"]:
            raise RegistryError("a model is published for one Q-matrix: the manifest needs 'qmatrix_id'")
        key = self._private_key()
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        weights = buffer.getvalue()
        versions_dir = self.root / "versions"
        versions_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            existing = self.versions()
            version = f"v{(int(existing[-1][1:]) + 1 if existing else 1):04d}"
            full = jsonable({
                **manifest, "format": FORMAT, "version": version, "created_at": utc_now(),
                "concepts": list(model.concepts), "config": {**manifest.get("config", {}), "model": model.config()},
                "weights": {"file": _WEIGHTS, "sha256": hashlib.sha256(weights).hexdigest(), "bytes": len(weights)},
                "key_id": key_id(key.public_key()),
            })
            body = (json.dumps(full, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()
            tmp = Path(tempfile.mkdtemp(dir=versions_dir, prefix=".tmp-"))
            try:
                (tmp / _WEIGHTS).write_bytes(weights)
                (tmp / _MANIFEST).write_bytes(body)
                (tmp / _SIGNATURE).write_bytes(base64.b64encode(key.sign(body)) + b"\n")
                os.chmod(tmp, 0o755)
                try:
                    os.rename(tmp, versions_dir / version)
                except OSError:  # another publisher took this number: try the next
                    continue
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            if activate:
                self.activate(version)
            return version, full
        raise RegistryError(f"could not allocate a version id in {versions_dir}")

    def activate(self, version: str, *, _remember_current: bool = True) -> None:
        """Make ``version`` the active model of the Q-matrix it was trained for, after verifying it
        (a bad version never becomes active)."""
        manifest = self.verify(version)
        qmatrix_id = model_key(str(manifest["qmatrix_id"]), manifest.get("tenant") or None)
        state = self._pointer(qmatrix_id) or {}
        current = state.get("version")
        previous = [v for v in state.get("previous", []) if v != version]
        if _remember_current and current and current != version:
            previous.append(current)
        self.pointers.set(qmatrix_id, version=version, previous=previous)

    def rollback(self, version: str | None = None, *, qmatrix_id: str | None = None) -> str:
        """Make ``version`` active again for its Q-matrix (default: undo, back to the version active
        before the current one of ``qmatrix_id``, or of the only Q-matrix with an active model).

        The target is verified first; a version that fails verification, or that was trained
        for another Q-matrix than ``qmatrix_id``, is refused and the active pointer is left as it was.
        """
        if version is not None:
            manifest = self.verify(version)
            owner = model_key(str(manifest.get("qmatrix_id")), manifest.get("tenant") or None)
            if qmatrix_id is not None and owner != qmatrix_id:
                raise RegistryError(f"{version} was trained for Q-matrix '{owner}', not '{qmatrix_id}'")
            self.activate(version)
            return version
        resolved = self._resolve(qmatrix_id)
        previous = (self._pointer(resolved) or {}).get("previous", []) if resolved is not None else []
        if not previous:
            raise ModelNotFound("no earlier active version to roll back to; name one (e.g. v0001)")
        self.activate(str(previous[-1]), _remember_current=False)
        return str(previous[-1])
