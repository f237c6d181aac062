"""SecAgg+ (Flower's SecAggPlusWorkflow + secaggplus_mod), run in process: sums, dropouts, DP, refusals."""

from __future__ import annotations

from pathlib import Path

import flwr.compat.common.recorddict_compat as compat
import numpy as np
import pytest
from flwr.app import Message
from flwr.app.message_type import MessageType
from flwr.common import FitIns, ndarrays_to_parameters

from federated import FedConfig, LocalConfig, get_parameters
from federated.flower import FlowerConfig, LocalGrid, make_client_app, run_inprocess
from federated.flower.engine import _task_identity
from federated.flower.files import run_config
from tests.federated.conftest import Prepared
from tests.federated.flower_apps.mods import drop_out, record_updates
from tests.federated.flower_apps.runs import new_model, write

QUANTUM = 1e-5  # SecAgg+ quantises into 2**22 levels over [-8, 8]: steps of ~4e-6


def test_secagg_sum_equals_the_plain_sum_when_one_institution_drops_out(sim: Prepared, tmp_path: Path) -> None:
    # Prepare: three institutions, the second crashes while training
    data_dir = write(tmp_path, sim, FlowerConfig(fed=FedConfig(rounds=1), secagg=True), n=3)
    sent: dict = {}
    app = make_client_app([drop_out(1, rounds={1}), record_updates(sent)])

    # Execute
    result = run_inprocess(data_dir, tmp_path / "out", client_app=app)

    # Assert: the survivors' masks cancel and the dropout's are recovered from key shares
    assert sorted(sent) == [(1, 0), (1, 2)]
    record = result.history[0]
    assert record.sampled_clients == (0, 2) and record.failures == 1
    initial = get_parameters(new_model(sim))
    plain = [g + (a + b) / 2 for g, a, b in zip(initial, sent[(1, 0)], sent[(1, 2)], strict=True)]
    for got, want in zip(get_parameters(result.model), plain, strict=True):
        assert np.allclose(got, want, atol=QUANTUM)
    assert max(float(np.abs(a - b).max()) for a, b in zip(sent[(1, 0)], sent[(1, 2)], strict=True)) > 100 * QUANTUM


@pytest.mark.parametrize("fed", [
    FedConfig(rounds=2, local=LocalConfig(epochs=1)),
    FedConfig(rounds=2, client_sample_rate=0.7, dp="client", noise_multiplier=1.0, clip_norm=0.05),
], ids=["fedavg", "client-dp"])
def test_secagg_gives_the_same_model_as_plain_aggregation(sim: Prepared, tmp_path: Path, fed: FedConfig) -> None:
    # Prepare: equal-sized institutions, so equal weights equal FedAvg's size weights
    plain_dir = write(tmp_path / "plain", sim, FlowerConfig(fed=fed), n=3)
    secure_dir = write(tmp_path / "secure", sim, FlowerConfig(fed=fed, secagg=True), n=3)

    # Execute
    plain = run_inprocess(plain_dir, tmp_path / "plain" / "out")
    secure = run_inprocess(secure_dir, tmp_path / "secure" / "out")

    # Assert: with DP the clients clip (server cannot), and report their pre-clip norms
    for got, want in zip(get_parameters(secure.model), get_parameters(plain.model), strict=True):
        assert np.allclose(got, want, atol=QUANTUM)
    for a, b in zip(secure.history, plain.history, strict=True):
        assert a.sampled_clients == b.sampled_clients
        assert a.pre_clip_norms == pytest.approx(b.pre_clip_norms, rel=1e-5)
        assert a.epsilon == b.epsilon


@pytest.mark.parametrize("secagg", [True, False])
def test_a_secagg_client_refuses_to_send_its_update_in_the_clear(sim: Prepared, tmp_path: Path,
                                                                 secagg: bool) -> None:
    # Prepare: a plain train message, to a client of a run with and without SecAgg+
    data_dir = write(tmp_path, sim, FlowerConfig(fed=FedConfig(rounds=1), secagg=secagg), n=2)
    grid = LocalGrid(make_client_app(), [{"partition-id": 0}], run_config=run_config(data_dir, ""))
    fitins = FitIns(ndarrays_to_parameters(get_parameters(new_model(sim))), {"seed": 1})

    # Execute
    with _task_identity(run_id=1):
        message = Message(compat.fitins_to_recorddict(fitins, True), dst_node_id=1, message_type=MessageType.TRAIN)
        (reply,) = grid.send_and_receive([message])

    # Assert
    if secagg:
        assert reply.has_error() and "secaggplus_configs" in (reply.error.reason or "")
    else:
        assert reply.has_content() and compat.recorddict_to_fitres(reply.content, False).num_examples > 0
