"""Shared builders for the Flower tests: SIMULATED institutions from the ``sim`` fixture, run folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from federated import CDModel, ResponseTensors, iid_partition
from federated.flower import FlowerConfig, write_run
from tests.federated.conftest import Prepared


def institutions(prepared: Prepared, n: int, seed: int = 1) -> list[ResponseTensors]:
    """``n`` SIMULATED institutions: an IID split of the training students."""
    parts = iid_partition(len(prepared.train), n_clients=n, rng=np.random.default_rng(seed))
    return [prepared.train.subset(p) for p in parts]


def new_model(prepared: Prepared) -> CDModel:
    return CDModel(prepared.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))


def write(tmp: Path, prepared: Prepared, config: FlowerConfig, *, n: int = 3, seed: int = 2) -> Path:
    """Write a run folder for ``n`` institutions under ``tmp``; return its data dir."""
    write_run(tmp / "data", config=config, model=new_model(prepared), clients=institutions(prepared, n),
              evaluation=prepared.test, seed=seed)
    return tmp / "data"
