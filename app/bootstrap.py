"""First-start work: the dev API key and the default local-fed model."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

from app.auth import KeyStore
from app.settings import Settings

__all__ = ["DEV_KEY_FILE", "DEV_TENANT", "ensure_dev_key", "read_dev_key", "train_default_model"]

log = logging.getLogger("fedcd")

DEV_TENANT = "dev"
DEV_KEY_FILE = "dev-api-key"


def ensure_dev_key(keys: KeyStore, state_dir: Path) -> str | None:
    """When no API key exists at all: create tenant ``dev`` with an admin key, saved (0600) in the state dir.

    Returns the new key (or ``None`` when keys already existed). Should the file not be
    written (a crash right after the key is stored), the operator creates a key with
    ``fedcd keys create``; the unknown dev key can be revoked with ``fedcd keys revoke``.
    """
    if keys.any_exists():
        return None
    new = keys.create(tenant=DEV_TENANT, role="admin", created_by="first-start")
    path = state_dir / DEV_KEY_FILE
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(new.api_key + "\n")
    os.replace(tmp, path)
    log.warning("first start: created tenant '%s' with admin key %s, saved in %s (mode 0600); create real keys "
                "with `fedcd keys create --tenant NAME`", DEV_TENANT, new.key_id, path)
    return new.api_key


def read_dev_key(state_dir: Path) -> str | None:
    path = state_dir / DEV_KEY_FILE
    return path.read_text().strip() if path.is_file() else None


async def train_default_model(settings: Settings) -> None:
    """First start: train the small default local-fed model on SIMULATED students if none is published."""
    from federated import default_model_if_missing

    start = time.perf_counter()
    log.info("checking the federated-trained model registry at %s", settings.registry_dir)
    version = await asyncio.to_thread(default_model_if_missing, settings.registry_dir, key_path=settings.model_signing_key)
    if version is not None:
        log.info("first start: trained and published the default local-fed model %s on SIMULATED students in %.1f s",
                 version, time.perf_counter() - start)
