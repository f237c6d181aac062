"""The node ClientApp of a real federation, in process: it reads only its own CSV, sends only its update,
and refuses runs it must not join (no student-level DP, too large an ε, another Q-matrix)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import flwr.compat.common.recorddict_compat as compat
import numpy as np
import pytest
import torch
from flwr.app import Message
from flwr.common import parameters_to_ndarrays

from federated import CDModel, FedConfig, FedResult, StudentDP, get_parameters
from federated.flower import (
    CDClient,
    FlowerConfig,
    LocalGrid,
    NodeClient,
    check_run,
    client_settings,
    make_node_client_app,
    run_config,
    run_grid,
    write_server_run,
)
from federated.publish import publish_federated
from qmatrix import QMatrix, qmatrix_fingerprint, save_qmatrix
from tests.federated.conftest import Prepared
from tests.federated.flower_apps.runs import institutions

STUDENT_DP = FedConfig(rounds=2, dp="student", epsilon_budget=8.0,
                       student_dp=StudentDP(noise_multiplier=1.0, clip_norm=1.0, sample_rate=0.2, steps=3))


class RecordingGrid(LocalGrid):
    """A LocalGrid that keeps every reply the server receives."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.replies: list[Message] = []

    def _deliver(self, message: Message) -> Message:
        reply = super()._deliver(message)
        self.replies.append(copy.deepcopy(reply))
        return reply


def _nodes(tmp: Path, sim: Prepared, n: int = 3, qmatrix: QMatrix | None = None) -> list[dict[str, object]]:
    """``n`` node folders, each with its own responses CSV (a share of the training students) and Q-matrix."""
    students = {s.student_id: s for s in sim.dataset.students}
    configs = []
    for k, part in enumerate(institutions(sim, n)):
        folder = tmp / f"node-{k}"
        folder.mkdir(parents=True)
        lines = ["student_id,item_id,correct"]
        for sid in part.student_ids:
            lines += [f"{sid},{r.item_id},{int(r.score)}" for r in students[sid].responses]
        (folder / "responses.csv").write_text("\n".join(lines) + "\n")
        save_qmatrix(qmatrix or sim.dataset.qmatrix, folder / "qmatrix.json")
        configs.append({"data-path": str(folder / "responses.csv"), "qmatrix-path": str(folder / "qmatrix.json")})
    return configs


def _grid(tmp: Path, sim: Prepared, fed: FedConfig, nodes: list[dict[str, object]], secagg: bool = False) -> RecordingGrid:
    q = sim.dataset.qmatrix
    write_server_run(tmp / "data", config=FlowerConfig(fed=fed, secagg=secagg), model=CDModel(
        q.concepts, generator=torch.Generator().manual_seed(0)), evaluation=sim.test, seed=1, n_clients=len(nodes),
        qmatrix_sha256=qmatrix_fingerprint(q))
    return RecordingGrid(make_node_client_app(), nodes, run_config=run_config(tmp / "data", tmp / "out"))


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secagg+"])
def test_nodes_train_from_their_own_csv_and_reply_with_nothing_but_the_update(sim: Prepared, tmp_path: Path,
                                                                             secagg: bool) -> None:
    # Prepare
    grid = _grid(tmp_path, sim, STUDENT_DP, _nodes(tmp_path, sim), secagg=secagg)
    model = CDModel(sim.dataset.qmatrix.concepts)
    shapes = sorted(tuple(p.shape) for p in model.parameters())

    # Execute
    result = run_grid(grid)

    # Assert: it trained, every node took part, and a reply carries only arrays of the model's shapes
    assert [r.sampled_clients for r in result.history] == [(1, 2, 3)] * 2 and result.history[-1].auc > 0.7
    assert result.history[-1].epsilon == pytest.approx(result.accountant.get_epsilon(STUDENT_DP.delta))
    replies = [r for r in grid.replies if r.has_content() and r.content.array_records]
    assert replies and not [r for r in grid.replies if r.has_error()]
    for reply in replies if not secagg else []:
        fitres = compat.recorddict_to_fitres(reply.content, keep_input=True)
        assert fitres.metrics == {} and fitres.num_examples == 1
        assert sorted(tuple(a.shape) for a in parameters_to_ndarrays(fitres.parameters)) == shapes
    for reply in replies:  # under SecAgg+ the masked vector travels instead: still no metrics, no student data
        texts = repr(reply.content.config_records) + repr(reply.content.metric_records)
        assert not [sid for sid in sim.train.student_ids if sid in texts] and "loss" not in texts


def _refusal(tmp: Path, sim: Prepared, fed: FedConfig, *, qmatrix: QMatrix | None = None,
             max_epsilon: float | None = None) -> tuple[str, FedResult]:
    nodes = _nodes(tmp, sim, n=1, qmatrix=qmatrix)
    if max_epsilon is not None:
        nodes[0]["max-epsilon"] = max_epsilon
    grid = _grid(tmp, sim, fed, nodes)
    result = run_grid(grid)  # the only node refuses every round: a failure, and nothing to aggregate
    errors = [r.error.reason for r in grid.replies if r.has_error()]
    assert errors and not [r for r in grid.replies if r.has_content()]
    assert all(r.failures == 1 and r.bytes_sent == 0 for r in result.history)
    return errors[0], result


def test_a_node_refuses_a_run_without_student_level_dp_and_nothing_is_published(sim: Prepared,
                                                                                tmp_path: Path) -> None:
    # Execute
    reason, result = _refusal(tmp_path, sim, FedConfig(rounds=1))
    heldout = [s for s in sim.dataset.students if s.student_id in set(sim.test_ids)]
    published = publish_federated(result, qmatrix=sim.dataset.qmatrix, heldout=heldout, registry=tmp_path / "reg",
                                  options={"dp": "none"}, federation={"nodes": 1})

    # Assert: the untrained model is not published
    assert "only with student-level DP-SGD" in reason
    assert not published.published and published.decision.reasons == ("no client contributed an update in any round",)


def test_a_node_refuses_a_larger_epsilon_than_it_accepts(sim: Prepared, tmp_path: Path) -> None:
    reason, _ = _refusal(tmp_path, sim, STUDENT_DP, max_epsilon=4.0)
    assert "ε budget 8.0 exceeds this node's limit 4.0" in reason


def test_a_node_refuses_another_qmatrix(sim: Prepared, tmp_path: Path) -> None:
    q = sim.dataset.qmatrix
    edited = QMatrix(id=q.id, concepts=q.concepts, items=(dataclasses.replace(q.items[0], text="changed"),
                                                          *q.items[1:]))
    reason, _ = _refusal(tmp_path, sim, STUDENT_DP, qmatrix=edited)
    assert "Q-matrix differs" in reason


def test_a_node_draws_its_dp_noise_from_its_own_randomness_not_the_server_seed(sim: Prepared) -> None:
    # Prepare: the same global weights and the same server-drawn seed, twice
    data, model = institutions(sim, 1)[0], CDModel(sim.dataset.qmatrix.concepts)
    weights, config = get_parameters(model), FlowerConfig(fed=STUDENT_DP)

    def update(client_type: type[CDClient]) -> list:
        client = client_type(CDModel(sim.dataset.qmatrix.concepts), data, config=config)
        return client.fit(weights, {"seed": 7})[0]

    # Execute / Assert: a simulated client reproduces (same seed, same noise); a node does not
    assert all(np.array_equal(a, b) for a, b in zip(update(CDClient), update(CDClient), strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(update(NodeClient), update(NodeClient), strict=True))


def test_check_run_accepts_the_run_it_should(sim: Prepared, tmp_path: Path) -> None:
    grid = _grid(tmp_path, sim, STUDENT_DP, _nodes(tmp_path, sim, n=1))
    run = client_settings(grid.run_config)
    check_run(run, fingerprint=qmatrix_fingerprint(sim.dataset.qmatrix), max_epsilon=8.0)
