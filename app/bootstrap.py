"""First-start work: the dev API key and the default local-fed model."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from app.auth import KeyStore
from app.settings import Settings

__all__ = ["DEV_KEY_FILE", "DEV_TENANT", "dev_key_path", "ensure_dev_key", "read_dev_key", "train_default_model"]

log = logging.getLogger("fedcd")

DEV_TENANT = "dev"
DEV_KEY_FILE = "dev-api-key"

# Dev keys this process created (file path -> key): the only ones it may show. A key is shown once, at the start
# that creates it; every later start names the file instead, so the key never reaches a log (`docker logs`) again.
_created: dict[Path, str] = {}


def dev_key_path(state_dir: Path) -> Path:
    """Where the first start saves the dev admin key (mode 0600)."""
    return Path(state_dir) / DEV_KEY_FILE


def ensure_dev_key(keys: KeyStore, state_dir: Path) -> str | None:
    """When no API key exists at all: create tenant ``dev`` with an admin key, saved (0600) in the state dir.

    Returns the new key (or ``None`` when keys already existed). Only the key id is logged; the key itself
    is shown once, by whoever started the server (``read_dev_key``). Later starts log where the key is
    stored, never the key. Should the file not be written (a crash right after the key is stored), the
    operator creates a key with ``fedcd keys create``; the unknown dev key can be revoked with ``fedcd keys revoke``.
    """
    path = dev_key_path(state_dir)
    if keys.any_exists():
        if path.is_file():
            log.info("the admin key of tenant '%s' is stored in %s (mode 0600); it is shown only at the start that "
                     "creates it", DEV_TENANT, path)
        return None
    new = keys.create(tenant=DEV_TENANT, role="admin", created_by="first-start")
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(new.api_key + "\n")
    os.replace(tmp, path)
    _created[path.resolve()] = new.api_key
    log.warning("first start: created tenant '%s' with admin key %s, saved in %s (mode 0600); create real keys "
                "with `fedcd keys create --tenant NAME`", DEV_TENANT, new.key_id, path)
    return new.api_key


def read_dev_key(state_dir: Path) -> str | None:
    """The dev admin key if this process created it (the first start), to show it once; else ``None``.

    Later starts show only where it is (:func:`dev_key_path`): the file stays readable by its owner.
    """
    path = dev_key_path(state_dir)
    key = _created.get(path.resolve())
    if key is None or not path.is_file() or path.read_text().strip() != key:
        return None
    return key


async def train_default_model(settings: Settings) -> None:
    """First start: train the small default local-fed model on SIMULATED students if none is published."""
    from federated import default_model_if_missing

    start = time.perf_counter()
    log.info("checking the federated-trained model registry at %s", settings.registry_dir)
    version = await asyncio.to_thread(default_model_if_missing, settings.registry_dir, key_path=settings.model_signing_key)
    if version is not None:
        log.info("first start: trained and published the default local-fed model %s on SIMULATED students in %.1f s",
                 version, time.perf_counter() - start)
