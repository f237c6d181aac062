"""Submitting a run to a SuperLink, following it, and reading back what the ServerApp wrote.

Both deployment paths use these: the local simulation (:func:`federated.flower.train_flower`
with ``deployment=True``) and a real federation (:mod:`federated.flower.coordinator`).
Progress comes from ``history.json``, which the ServerApp rewrites after every round;
the final status from ``flwr ls`` (``flwr run`` exits 0 even when the run failed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from federated.accountant import PrivacyAccountant
from federated.flower.deployment import SuperLink
from federated.flower.files import load_settings
from federated.flower.server import FlowerResult, FlowerRoundRecord, read_history

__all__ = ["follow_run", "read_result"]

Progress = Callable[[FlowerRoundRecord], None]


def follow_run(link: SuperLink, app_dir: Path, out_dir: Path, *, progress: Progress | None = None,
               timeout_s: float = 3600.0) -> tuple[int, dict[str, Any]]:
    """Submit ``app_dir``, report each finished round to ``progress``, wait for the end; return
    (run id, the status ``flwr ls`` reports). ``run-status.json`` in ``out_dir`` keeps the status;
    a run that did not end ``finished:completed`` raises ``RuntimeError`` with its log's tail."""
    run_id, proc = link.submit(app_dir)
    deadline, reported = time.monotonic() + timeout_s, 0
    while True:
        done = proc.poll() is not None
        if progress is not None and (out_dir / "history.json").exists():
            rounds = read_history(out_dir)["rounds"]
            for record in rounds[reported:]:
                progress(record)
            reported = len(rounds)
        if done:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Flower run did not finish within {timeout_s:.0f} s")
        time.sleep(0.5)
    status = link.status(run_id)
    (out_dir / "run-status.json").write_text(json.dumps(status, indent=1))
    if status.get("status") != "finished:completed":
        log = link.processes.log("run.log")[-4000:]
        raise RuntimeError(f"Flower run {run_id} ended as {status.get('status')!r}:\n{log}")
    return run_id, status


def read_result(out_dir: Path, data_dir: Path) -> FlowerResult:
    """The model, history and accountant a finished run left in ``out_dir``."""
    history = read_history(out_dir)
    model = load_settings(data_dir).new_model()
    model.load_state_dict(torch.load(out_dir / "model.pt", weights_only=True))
    accountant = None
    if (out_dir / "accountant.json").exists():
        accountant = PrivacyAccountant()
        accountant.load_state_dict(json.loads((out_dir / "accountant.json").read_text()))
    return FlowerResult(model=model, history=list(history["rounds"]), stop_reason=history["stop_reason"],
                        accountant=accountant, served_round=history.get("served_round"),
                        start_auc=history.get("start_auc"), item_release=history.get("item_release"))
