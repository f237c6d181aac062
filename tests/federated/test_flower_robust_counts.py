"""Client-claimed counts (issue 30): trusted only by plain FedAvg/FedProx without DP or SecAgg+.

Without DP, a FedAvg client sends its student count and, after its update, its responses per item, so each item's
parameters are averaged over the clients that saw it. A client can claim any counts; with trimmed mean or median
they must not override the robust rule (one client claiming a billion responses per item would otherwise set every
item's parameters), and clients do not send them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import SimpleClientManager
from flwr.server.compat.grid_client_proxy import GridClientProxy

from federated import FedConfig, encode_dataset, get_parameters
from federated.flower import CDClient, FlowerConfig, build_strategy
from federated.models import DEFAULT_KIND, new_model
from qmatrix import example_qmatrix, simulate_dina

GLOBAL = [np.zeros((2, 2), np.float32), np.zeros(3, np.float32)]  # parameter 1: one row per item
HONEST = [1.0, 2.0, 3.0, 1.5]
ATTACK = 500.0


def _reply(node_id: int, value: float, *, responses: float, students: int) -> tuple:
    """A client's fit reply: its update, then (row_weighted) its claimed responses to each of the 3 items."""
    update = [np.full((2, 2), value, np.float32), np.full(3, value, np.float32)]
    counts = np.full(3, responses, np.float32)
    metrics = {"partition_id": node_id - 101, "loss": 0.5, "row_weighted": "1"}
    proxy = GridClientProxy(node_id=node_id, grid=None, run_id=1)  # type: ignore[arg-type]
    return proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([*update, counts]), students, metrics)


def _aggregate(aggregation: str) -> list[np.ndarray]:
    strategy, updates, _ = build_strategy(FlowerConfig(aggregation=aggregation),  # type: ignore[arg-type]
                                          n_clients=5, rng=np.random.default_rng(0))
    manager = SimpleClientManager()
    for node_id in range(101, 106):
        manager.register(GridClientProxy(node_id=node_id, grid=None, run_id=1))  # type: ignore[arg-type]
    strategy.configure_fit(1, ndarrays_to_parameters(GLOBAL), manager)
    results = [_reply(101 + i, v, responses=10.0, students=10) for i, v in enumerate(HONEST)]
    results.append(_reply(105, ATTACK, responses=1e9, students=10**9))  # the attacker claims enormous counts
    parameters, _ = updates.aggregate_fit(1, results, [])
    return parameters_to_ndarrays(parameters)


@pytest.mark.parametrize(("aggregation", "expected"), [
    ("median", float(np.median([*HONEST, ATTACK]))),
    ("trimmed_mean", (1.5 + 2.0 + 3.0) / 3),  # beta 0.2 of five drops the lowest and the highest
])
def test_robust_rules_ignore_claimed_counts(aggregation: str, expected: float) -> None:
    new = _aggregate(aggregation)
    assert np.allclose(new[0], expected) and np.allclose(new[1], expected)  # per-item rows included


def test_fedavg_still_weights_by_claimed_counts() -> None:
    new = _aggregate("fedavg")
    assert new[0][0, 0] > ATTACK - 0.01 and new[1][0] > ATTACK - 0.01  # plain averaging trusts them, as documented


@pytest.mark.parametrize(("aggregation", "sends"), [("fedavg", True), ("fedprox", True), ("trimmed_mean", False),
                                                    ("median", False)])
def test_clients_send_counts_only_for_plain_averaging(aggregation: str, sends: bool) -> None:
    # Prepare: one SIMULATED institution with the default (per-item) model
    qmatrix = example_qmatrix()
    dataset = simulate_dina(qmatrix, n_students=40, seed=5)
    model = new_model(DEFAULT_KIND, qmatrix, seed=0)
    data = encode_dataset(dataset, table=model.item_table(qmatrix))
    config = FlowerConfig(fed=FedConfig(rounds=1), aggregation=aggregation)  # type: ignore[arg-type]
    client = CDClient(model, data, config=config, partition_id=0)
    torch.manual_seed(0)

    # Execute
    update, count, metrics = client.fit(get_parameters(model), {"seed": 1})

    # Assert
    n_params = len(get_parameters(model))
    assert (len(update) > n_params) is sends and ("row_weighted" in metrics) is sends
    assert count == (40 if sends else 1)
    assert config.equal_weights is not sends
