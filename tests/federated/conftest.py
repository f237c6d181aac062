"""Shared fixtures: small SIMULATED DINA data, FrcSub when present, and one trained model.

Torch runs single-threaded here: the models are tiny, so extra threads only add contention
(on a busy 2-core runner, 2 threads made training 3x slower and DP-SGD 20x slower).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from federated import CDModel, LocalConfig, ResponseTensors, encode_dataset, split_student_indices, train_local
from qmatrix import Dataset, DatasetNotFound, example_qmatrix, load_frcsub, simulate_dina


@pytest.fixture(autouse=True, scope="session")
def _single_thread_torch() -> None:
    torch.set_num_threads(1)


@dataclass(frozen=True)
class Prepared:
    dataset: Dataset
    train: ResponseTensors
    test: ResponseTensors
    test_ids: tuple[str, ...]


def prepare(dataset: Dataset, *, seed: int = 0) -> Prepared:
    data = encode_dataset(dataset)
    split = split_student_indices(len(data), rng=np.random.default_rng(seed), validation=0.0, test=0.25)
    test = data.subset(split.test)
    return Prepared(dataset=dataset, train=data.subset(split.train), test=test, test_ids=test.student_ids)


@pytest.fixture(scope="session")
def sim() -> Prepared:
    """SIMULATED: 600 DINA students on the example Q-matrix (12 items, 6 concepts)."""
    return prepare(simulate_dina(example_qmatrix(), n_students=600, slip=0.05, guess=0.1, seed=3))


@pytest.fixture(scope="session")
def frcsub() -> Prepared:
    try:
        return prepare(load_frcsub())
    except DatasetNotFound as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def trained(sim: Prepared) -> CDModel:
    """A model trained centrally on the simulated training students (shared, do not mutate)."""
    model = CDModel(sim.dataset.qmatrix.concepts, generator=torch.Generator().manual_seed(0))
    train_local(model, sim.train, config=LocalConfig(epochs=20), generator=torch.Generator().manual_seed(1))
    return model
