"""First start: the dev admin key is shown once, when it is created; later starts say where it is, never what."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

import app.bootstrap as bootstrap
from app.auth import KeyStore
from app.bootstrap import dev_key_path, ensure_dev_key, read_dev_key
from app.db import Database
from tests.app.gateway_processes import free_port, gateway_process


def test_the_key_is_shown_only_by_the_start_that_creates_it(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    keys = KeyStore(Database(f"sqlite:///{tmp_path / 'k.db'}").sessions)
    state = tmp_path / "state"

    # Execute: the first start creates it ...
    with caplog.at_level(logging.INFO, logger="fedcd"):
        created = ensure_dev_key(keys, state)
    first_log, shown_first = caplog.text, read_dev_key(state)
    caplog.clear()
    # ... a later start (a new process: nothing created in it) finds keys already there
    monkeypatch.setattr(bootstrap, "_created", {})
    with caplog.at_level(logging.INFO, logger="fedcd"):
        again = ensure_dev_key(keys, state)
    later_log, shown_later = caplog.text, read_dev_key(state)

    # Assert: saved 0600; shown to the first start only; no log line ever holds the key
    path = dev_key_path(state)
    assert created is not None and path.read_text().strip() == created
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert shown_first == created and again is None and shown_later is None
    assert created not in first_log and created not in later_log
    assert str(path) in later_log and "stored in" in later_log


def test_no_key_file_no_key_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A server whose keys were made with `fedcd keys create`: no dev key, nothing to show or point at
    keys = KeyStore(Database(f"sqlite:///{tmp_path / 'k.db'}").sessions)
    keys.create(tenant="school", role="admin")
    assert ensure_dev_key(keys, tmp_path) is None and read_dev_key(tmp_path) is None
    assert not dev_key_path(tmp_path).exists()


def test_fedcd_serve_prints_the_key_at_the_first_start_only(tmp_path: Path) -> None:
    # Prepare: two starts of `fedcd serve` on one state dir (what `docker logs` keeps)
    env = {"FEDCD_STATE_DIR": str(tmp_path / "state"), "FEDCD_TRAIN_DEFAULT_MODEL": "false", "PYTHONUNBUFFERED": "1",
           "FEDCD_ENTITIES": json.dumps([{"name": "sim:confident", "kind": "simulated", "simulated_style": "confident",
                                          "seed": 1}])}
    logs = [tmp_path / "first.log", tmp_path / "second.log"]

    # Execute
    for log in logs:
        with gateway_process(free_port(), env, log=log):
            pass
    first, second = (log.read_text(errors="replace") for log in logs)
    key = dev_key_path(tmp_path / "state").read_text().strip()

    # Assert: the first start shows the key (a ready-to-paste curl); the second says where it is, not what
    assert key in first and "Admin key of tenant 'dev'" in first
    assert key not in second and str(dev_key_path(tmp_path / "state")) in second
