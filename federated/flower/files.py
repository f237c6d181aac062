"""The files a Flower run reads: one folder, so apps in other processes see the same run.

Layout of a run's data folder::

    settings.json      FlowerConfig, model architecture, seed, number of clients
    initial.pt         the global model's starting weights (state_dict)
    client-<i>.pt      partition i: the students institution i holds, and nothing else
    evaluation.pt      held-out students the server evaluates on

Each ClientApp opens only its own ``client-<i>.pt`` (``i`` from its node config
``partition-id``), which is how a real institution would hold only its own students.
Tensors are loaded with ``weights_only=True``: these files never execute code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from federated.data import ResponseTensors
from federated.flower.config import FlowerConfig
from federated.model import CDModel

__all__ = ["RunSettings", "load_partition", "load_settings", "write_run"]

_FIELDS = ("features", "item_index", "scores", "observed")


@dataclass(frozen=True)
class RunSettings:
    config: FlowerConfig
    model: dict[str, Any]  # CDModel.config()
    seed: int
    n_clients: int
    data_dir: Path

    def new_model(self) -> CDModel:
        """The global model at its starting weights."""
        model = CDModel(self.model["concepts"], text_dim=self.model["text_dim"], hidden=self.model["hidden"],
                        interaction=self.model["interaction"])
        model.load_state_dict(torch.load(self.data_dir / "initial.pt", weights_only=True))
        return model


def _save(path: Path, data: ResponseTensors) -> None:
    torch.save({"student_ids": list(data.student_ids), "item_ids": list(data.item_ids),
                **{name: getattr(data, name) for name in _FIELDS}}, path)


@lru_cache(maxsize=64)
def _load(path: str, mtime_ns: int) -> ResponseTensors:
    raw = torch.load(path, weights_only=True)
    return ResponseTensors(student_ids=tuple(raw["student_ids"]), item_ids=tuple(raw["item_ids"]),
                           **{name: raw[name] for name in _FIELDS})


def write_run(data_dir: Path, *, config: FlowerConfig, model: CDModel, clients: Sequence[ResponseTensors],
              evaluation: ResponseTensors, seed: int) -> RunSettings:
    """Write everything a run needs into ``data_dir`` (created); return the settings read back."""
    if not clients:
        raise ValueError("need at least one client")
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    for i, client in enumerate(clients):
        _save(data_dir / f"client-{i}.pt", client)
    _save(data_dir / "evaluation.pt", evaluation)
    torch.save(model.state_dict(), data_dir / "initial.pt")
    settings = {"config": config.to_dict(), "model": model.config(), "seed": int(seed), "n_clients": len(clients)}
    (data_dir / "settings.json").write_text(json.dumps(settings, indent=2))
    return load_settings(data_dir)


def load_settings(data_dir: Path | str) -> RunSettings:
    data_dir = Path(data_dir)
    raw = json.loads((data_dir / "settings.json").read_text())
    return RunSettings(config=FlowerConfig.from_dict(raw["config"]), model=raw["model"], seed=int(raw["seed"]),
                       n_clients=int(raw["n_clients"]), data_dir=data_dir)


def load_partition(data_dir: Path | str, name: str | int) -> ResponseTensors:
    """``client-<i>.pt`` for an int, else ``<name>.pt`` (e.g. ``"evaluation"``); cached per process."""
    path = Path(data_dir) / (f"client-{name}.pt" if isinstance(name, int) else f"{name}.pt")
    return _load(str(path), path.stat().st_mtime_ns)
