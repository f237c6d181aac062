"""The non-DP warm start on Flower (federated.flower.warm_start): a plain Flower run starts round 1 from the same
weights as the in-process trainer; runs that must not reveal or trust plain per-item sums ask for none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import NDArrays, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat

import federated.candidates as candidates
import federated.flower.train as flower_train
from federated.data import encode_dataset
from federated.flower import (FlowerConfig, FlowerTraining, LocalGrid, make_client_app, run_config, run_grid,
                              train_flower)
from federated.flower.engine import _task_identity
from federated.flower.warm_start import MESSAGE_TYPE, ItemSumsMod, SumsInputs
from federated.inprocess import FedConfig, FedResult
from federated.local import get_parameters
from federated.models import new_model
from federated.train import TrainingConfig, train_federated
from qmatrix import Dataset, example_qmatrix, simulate_dina

KIND, SEED = "higher-order-irt", 2


@pytest.fixture(scope="module")
def small() -> Dataset:
    """SIMULATED: 300 DINA students on the example Q-matrix."""
    return simulate_dina(example_qmatrix(), n_students=300, slip=0.05, guess=0.1, seed=11)


def _flower_start(small: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: FlowerConfig
                  ) -> tuple[NDArrays, list[str]]:
    """The global weights every client receives in round 1 of a Flower run (checked equal across clients), and the
    types of the messages the clients were sent."""
    received: dict[int, NDArrays] = {}
    types: list[str] = []

    def first_round(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type == "train" and int(msg.metadata.group_id) == 1:
            fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
            received[int(context.node_config["partition-id"])] = parameters_to_ndarrays(fitins.parameters)
        return call_next(msg, context)

    class Recording(LocalGrid):  # every message a client is sent
        def _deliver(self, message: Message) -> Message:
            types.append(message.metadata.message_type)
            return super()._deliver(message)

    def run(data_dir: Path, out_dir: Path, on_round: object = None) -> FedResult:
        nodes = [{"partition-id": i, "num-partitions": 3} for i in range(3)]
        return run_grid(Recording(make_client_app([first_round]), nodes, run_config=run_config(data_dir, out_dir)))

    monkeypatch.setattr(flower_train, "run_inprocess", run)
    plan = FlowerTraining(clients=3, rounds=1, seed=SEED, model_kind=KIND, aggregation=config.aggregation)
    train_flower(dataset=small, plan=plan, out_dir=tmp_path, config=config)
    starts = list(received.values())
    assert len(starts) == 3 and all(_equal(s, starts[0]) for s in starts[1:])
    return starts[0], types


def _equal(a: NDArrays, b: NDArrays) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_plain_flower_run_starts_from_the_in_process_trainers_warm_start(
        small: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: the in-process trainer's weights right after its non-DP warm start (the same seed, split and clients)
    trainer: list[NDArrays] = []
    real = candidates.warm_start

    def recording(model, clients, *, table):  # type: ignore[no-untyped-def]
        real(model, clients, table=table)
        trainer.append(get_parameters(model))

    monkeypatch.setattr(candidates, "warm_start", recording)
    train_federated(dataset=small, registry=tmp_path / "registry", config=TrainingConfig(
        clients=3, rounds=1, seed=SEED, local_epochs=1, model_kind=KIND))

    # Execute: the Flower in-process engine on the same dataset and seed
    flower, types = _flower_start(small, tmp_path / "flower", monkeypatch, FlowerConfig())

    # Assert: both start round 1 from the same weights, which are not the seeded initial ones (the start moved)
    assert len(trainer) == 1 and _equal(flower, trainer[0])
    assert not _equal(flower, get_parameters(new_model(KIND, small.qmatrix, seed=SEED)))
    assert types.count(MESSAGE_TYPE) == 3  # one question to each node, before round 1


@pytest.mark.parametrize("config", [FlowerConfig(aggregation="trimmed_mean"),
                                    FlowerConfig(fed=FedConfig(rounds=0))], ids=["robust", "no-rounds"])
def test_runs_that_do_not_trust_plain_sums_ask_for_none(small: Dataset, config: FlowerConfig) -> None:
    # Assert: a robust rule ignores client-claimed counts (a poisoning client could claim any sums); DP and SecAgg+
    # never reveal them; rounds=0 is the untrained model
    assert not config.warm_starts
    assert not FlowerConfig(fed=FedConfig(dp="client")).warm_starts and not FlowerConfig(secagg=True).warm_starts
    assert FlowerConfig().warm_starts

    # Execute: a client of such a run is asked anyway
    model = new_model(KIND, small.qmatrix, seed=0)
    data = encode_dataset(small, table=model.item_table(small.qmatrix))
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})

    def call_next(msg: Message, ctx: Context) -> Message:
        return Message(RecordDict(), reply_to=msg)

    with _task_identity(run_id=1):
        ask = Message(RecordDict(), 1, MESSAGE_TYPE)
        with pytest.raises(PermissionError, match="plain per-item sums"):
            ItemSumsMod(lambda _: SumsInputs(config.warm_starts, model, data))(ask, context, call_next)
        reply = ItemSumsMod(lambda _: SumsInputs(True, model, data))(ask, context, call_next)

    # Assert: a run that warm-starts gets exactly the two vectors the in-process warm start pools
    got = reply.content.array_records["sums"].to_numpy_ndarrays()
    want = model.item_sums(data.features, data.item_index, data.observed, data.scores)
    assert _equal(got, list(want))


def test_a_robust_flower_run_starts_from_the_seeded_weights(small: Dataset, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    start, types = _flower_start(small, tmp_path, monkeypatch, FlowerConfig(aggregation="trimmed_mean"))
    assert MESSAGE_TYPE not in types and _equal(start, get_parameters(new_model(KIND, small.qmatrix, seed=SEED)))


def test_a_node_whose_sums_no_students_give_is_left_out_not_fatal() -> None:
    from types import SimpleNamespace

    from federated.flower.warm_start import _sums

    def reply(*arrays: object, key: str = "sums") -> SimpleNamespace:
        record = SimpleNamespace(to_numpy_ndarrays=lambda: list(arrays))
        return SimpleNamespace(content=SimpleNamespace(array_records={key: record}),
                               metadata=SimpleNamespace(src_node_id=7))

    good = _sums(reply(np.array([1.0, 0.0, 2.0]), np.array([2.0, 1.0, 2.0])), 3)  # type: ignore[arg-type]
    assert good is not None and good[0].tolist() == [1.0, 0.0, 2.0]
    for bad in (reply(np.array([np.nan, 0, 0]), np.ones(3)), reply(np.ones(2), np.ones(2)),
                reply(np.array([3.0, 0, 0]), np.ones(3)), reply(np.ones(3), np.ones(3), key="other"),
                reply(np.array([-1.0, 0, 0]), np.ones(3))):
        assert _sums(bad, 3) is None  # type: ignore[arg-type]
