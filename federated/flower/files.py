"""The files a Flower run reads: one folder, so apps in other processes see the same run.

Layout of a run's data folder::

    settings.json      FlowerConfig, model architecture, seed, number of clients (min to start)
    initial.pt         the global model's starting weights (state_dict)
    client-<i>.pt      SIMULATION only: partition i, the students institution i holds
    evaluation.pt      held-out students the server evaluates on

In simulation each ClientApp opens only its own ``client-<i>.pt`` (``i`` from its node
config ``partition-id``). In a real federation (``fedcd federation``) the folder lives on
the coordinator and holds no client partition: the ServerApp reads it, and every node reads
only its own CSV (:mod:`federated.flower.node`).

What a ClientApp needs of the settings (FlowerConfig, model architecture, Q-matrix
fingerprint) travels in the run config instead (:func:`run_config`, key ``fedcd-run``),
so a node never needs the coordinator's folder.
Tensors are loaded with ``weights_only=True``: these files never execute code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from federated.data import ResponseTensors
from federated.flower.config import FlowerConfig
from federated.model import CDModel
from federated.models import DiagnosisModel, build_model

__all__ = ["ClientSettings", "RunSettings", "client_settings", "load_partition", "load_settings", "run_config",
           "write_run", "write_server_run"]

_FIELDS = ("features", "item_index", "scores", "observed")


@dataclass(frozen=True)
class RunSettings:
    config: FlowerConfig
    model: dict[str, Any]  # CDModel.config()
    seed: int
    n_clients: int  # the nodes the run expects
    data_dir: Path
    min_clients: int  # fewer may start the run after the node wait (a real federation); = n_clients in simulation
    qmatrix_sha256: str | None = None  # nodes train only on the same Q-matrix (federated.flower.node)
    train_students: int | None = None  # SIMULATION: the clients' students (public); a federation's are unknown

    def new_model(self) -> DiagnosisModel:
        """The global model at its starting weights."""
        model = build_model(self.model)
        model.load_state_dict(torch.load(self.data_dir / "initial.pt", weights_only=True))
        return model


@dataclass(frozen=True)
class ClientSettings:
    """What a ClientApp learns of the run, from the run config alone."""

    config: FlowerConfig
    model: dict[str, Any]  # CDModel.config()
    qmatrix_sha256: str | None

    def new_model(self) -> DiagnosisModel:
        """The architecture; the weights arrive with every training message."""
        return build_model(self.model)


def _save(path: Path, data: ResponseTensors) -> None:
    torch.save({"student_ids": list(data.student_ids), "item_ids": list(data.item_ids),
                **{name: getattr(data, name) for name in _FIELDS}}, path)


@lru_cache(maxsize=64)
def _load(path: str, mtime_ns: int) -> ResponseTensors:
    raw = torch.load(path, weights_only=True)
    return ResponseTensors(student_ids=tuple(raw["student_ids"]), item_ids=tuple(raw["item_ids"]),
                           **{name: raw[name] for name in _FIELDS})


def write_server_run(data_dir: Path, *, config: FlowerConfig, model: CDModel, evaluation: ResponseTensors,
                     seed: int, n_clients: int, min_clients: int | None = None,
                     qmatrix_sha256: str | None = None) -> RunSettings:
    """What the ServerApp reads (settings, starting weights, held-out students); no client data."""
    min_clients = n_clients if min_clients is None else min_clients
    if not 1 <= min_clients <= n_clients:
        raise ValueError(f"need 1 <= min_clients <= n_clients, got {min_clients}, {n_clients}")
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    _save(data_dir / "evaluation.pt", evaluation)
    torch.save(model.state_dict(), data_dir / "initial.pt")
    settings = {"config": config.to_dict(), "model": model.config(), "seed": int(seed), "n_clients": n_clients,
                "min_clients": min_clients, "qmatrix_sha256": qmatrix_sha256}
    (data_dir / "settings.json").write_text(json.dumps(settings, indent=2))
    return load_settings(data_dir)


def write_run(data_dir: Path, *, config: FlowerConfig, model: CDModel, clients: Sequence[ResponseTensors],
              evaluation: ResponseTensors, seed: int) -> RunSettings:
    """SIMULATION: everything a run needs, client partitions included, into ``data_dir`` (created)."""
    if not clients:
        raise ValueError("need at least one client")
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    for i, client in enumerate(clients):
        _save(data_dir / f"client-{i}.pt", client)
    write_server_run(data_dir, config=config, model=model, evaluation=evaluation, seed=seed, n_clients=len(clients))
    # in simulation the training students' number is public (the manifest's train_students); the DP item release's
    # warm start reads it (a federation's coordinator does not know it)
    settings = json.loads((data_dir / "settings.json").read_text())
    settings["train_students"] = sum(len(c) for c in clients)
    (data_dir / "settings.json").write_text(json.dumps(settings, indent=2))
    return load_settings(data_dir)


def load_settings(data_dir: Path | str) -> RunSettings:
    data_dir = Path(data_dir)
    raw = json.loads((data_dir / "settings.json").read_text())
    n_clients = int(raw["n_clients"])
    return RunSettings(config=FlowerConfig.from_dict(raw["config"]), model=raw["model"], seed=int(raw["seed"]),
                       n_clients=n_clients, data_dir=data_dir, min_clients=int(raw.get("min_clients", n_clients)),
                       qmatrix_sha256=raw.get("qmatrix_sha256"), train_students=raw.get("train_students"))


def run_config(data_dir: Path | str, out_dir: Path | str) -> dict[str, str]:
    """The run config of a run written to ``data_dir``: where the ServerApp reads and writes, and
    (``fedcd-run``, JSON) what every ClientApp needs to know of the run."""
    settings = load_settings(data_dir)
    shared = {"config": settings.config.to_dict(), "model": settings.model, "qmatrix_sha256": settings.qmatrix_sha256}
    return {"data-dir": str(data_dir), "out-dir": str(out_dir), "fedcd-run": json.dumps(shared, sort_keys=True)}


def client_settings(config: Mapping[str, Any]) -> ClientSettings:
    """Parse the ``fedcd-run`` entry of a run config (:func:`run_config`)."""
    if "fedcd-run" not in config:
        raise ValueError("the run config has no 'fedcd-run' entry: this is not a fedcd run")
    raw = json.loads(str(config["fedcd-run"]))
    return ClientSettings(config=FlowerConfig.from_dict(raw["config"]), model=dict(raw["model"]),
                          qmatrix_sha256=raw.get("qmatrix_sha256"))


def load_partition(data_dir: Path | str, name: str | int) -> ResponseTensors:
    """``client-<i>.pt`` for an int, else ``<name>.pt`` (e.g. ``"evaluation"``); cached per process."""
    path = Path(data_dir) / (f"client-{name}.pt" if isinstance(name, int) else f"{name}.pt")
    return _load(str(path), path.stat().st_mtime_ns)
