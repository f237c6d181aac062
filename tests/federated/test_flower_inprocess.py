"""The in-process Flower engine: same aggregates as federated.inprocess, DP modes, budget stop, history marker."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from federated import FedConfig, LocalConfig, StudentDP, epsilon_for, get_parameters, run_fedavg
from federated.flower import FlowerConfig, FlowerRoundRecord, FlowerTraining, read_history, run_inprocess, train_flower
from tests.federated.conftest import Prepared
from tests.federated.flower_apps.runs import institutions, new_model, write


@pytest.mark.parametrize("fed", [
    FedConfig(rounds=3, local=LocalConfig(epochs=1)),
    FedConfig(rounds=3, client_sample_rate=0.5, dp="client", noise_multiplier=1.0, clip_norm=0.05),
], ids=["fedavg", "client-dp"])
def test_flower_strategies_give_the_same_aggregates_as_the_reference_driver(sim: Prepared, tmp_path: Path,
                                                                           fed: FedConfig) -> None:
    # Prepare
    data_dir = write(tmp_path, sim, FlowerConfig(fed=fed, keep="last"), n=4, seed=2)  # the reference keeps the last

    # Execute
    flower = run_inprocess(data_dir, tmp_path / "out")
    reference = run_fedavg(new_model(sim), institutions(sim, 4), sim.test, config=fed, rng=np.random.default_rng(2))

    # Assert: same sampled clients, same models, same epsilon
    assert [r.sampled_clients for r in flower.history] == [r.sampled_clients for r in reference.history]
    for got, want in zip(get_parameters(flower.model), get_parameters(reference.model), strict=True):
        assert np.allclose(got, want, atol=1e-5)
    assert [r.auc for r in flower.history] == pytest.approx([r.auc for r in reference.history], abs=1e-4)
    assert [r.epsilon for r in flower.history] == pytest.approx([r.epsilon for r in reference.history])


def test_history_marker_and_progress_callback_record_every_round(sim: Prepared, tmp_path: Path) -> None:
    # Prepare
    data_dir = write(tmp_path, sim, FlowerConfig(fed=FedConfig(rounds=2)))
    seen: list[FlowerRoundRecord] = []

    # Execute
    result = run_inprocess(data_dir, tmp_path / "out", on_round=seen.append)

    # Assert
    marker = read_history(tmp_path / "out")
    assert marker["status"] == "completed" and marker["rounds"] == result.history == seen
    assert [r.round for r in seen] == [1, 2] and all(r.failures == 0 and r.bytes_sent > 0 for r in seen)
    assert set(seen[0].pre_clip_norms) == {0, 1, 2}
    assert (tmp_path / "out" / "model.pt").exists()


def test_hard_stop_before_the_round_that_would_exceed_the_budget(sim: Prepared, tmp_path: Path) -> None:
    # Prepare: a budget between epsilon after 2 and after 3 rounds
    after2, after3 = (epsilon_for([(0.8, 0.5, k)], delta=1e-5) for k in (2, 3))
    fed = FedConfig(rounds=10, client_sample_rate=0.5, dp="client", noise_multiplier=0.8, clip_norm=0.1,
                    epsilon_budget=(after2 + after3) / 2)

    # Execute
    result = run_inprocess(write(tmp_path, sim, FlowerConfig(fed=fed)), tmp_path / "out")

    # Assert
    assert len(result.history) == 2 and "round 3" in (result.stop_reason or "")
    assert result.accountant is not None and result.accountant.get_epsilon(1e-5) == pytest.approx(after2)
    assert read_history(tmp_path / "out")["status"] == "stopped"


def test_client_level_noise_is_released_and_charged_when_no_institution_is_sampled(sim: Prepared,
                                                                                  tmp_path: Path) -> None:
    # Prepare
    fed = FedConfig(rounds=2, client_sample_rate=0.01, dp="client", noise_multiplier=1.0, clip_norm=0.1)
    before = get_parameters(new_model(sim))

    # Execute
    result = run_inprocess(write(tmp_path, sim, FlowerConfig(fed=fed)), tmp_path / "out")

    # Assert
    assert all(r.sampled_clients == () and r.bytes_sent == 0 for r in result.history)
    assert not all(np.array_equal(a, b) for a, b in zip(before, get_parameters(result.model), strict=True))
    assert result.accountant is not None and len(result.accountant) == 2


def test_student_level_dp_inside_each_client_is_charged_per_local_step(sim: Prepared, tmp_path: Path) -> None:
    # Prepare
    student = StudentDP(noise_multiplier=1.0, clip_norm=1.0, sample_rate=0.2, steps=4)
    fed = FedConfig(rounds=2, dp="student", student_dp=student, local=LocalConfig(lr=0.02))

    # Execute
    result = run_inprocess(write(tmp_path, sim, FlowerConfig(fed=fed, aggregation="median")), tmp_path / "out")

    # Assert
    assert result.history[-1].epsilon == pytest.approx(epsilon_for([(1.0, 0.2, 8)], delta=1e-5))
    assert all(r.student_norm_median is not None and r.student_norm_median > 0 for r in result.history)
    assert 0.5 < result.history[-1].auc <= 1.0


def test_fedprox_sends_its_proximal_term_to_the_clients(sim: Prepared, tmp_path: Path) -> None:
    # Execute: the same run with FedAvg and with a strong FedProx pull toward the global model
    fed = FedConfig(rounds=2, local=LocalConfig(epochs=2))
    plain = run_inprocess(write(tmp_path / "a", sim, FlowerConfig(fed=fed)), tmp_path / "a" / "out")
    prox = run_inprocess(write(tmp_path / "b", sim, FlowerConfig(fed=fed, aggregation="fedprox", proximal_mu=5.0)),
                         tmp_path / "b" / "out")

    # Assert: the proximal term shrinks every client's update
    for r_plain, r_prox in zip(plain.history, prox.history, strict=True):
        assert max(r_prox.pre_clip_norms.values()) < min(r_plain.pre_clip_norms.values())
    assert prox.history[-1].auc > 0.75


def test_train_flower_calibrates_noise_so_the_planned_rounds_fit_the_budget(sim: Prepared, tmp_path: Path) -> None:
    # Prepare
    base = FlowerConfig(fed=FedConfig(client_sample_rate=0.5, clip_norm=0.1))

    # Execute
    plan = FlowerTraining(clients=4, rounds=3, dp="client", epsilon=2.0, partition="dirichlet", alpha=1.0,
                          model_kind="higher-order-irt")
    result = train_flower(dataset=sim.dataset, plan=plan, out_dir=tmp_path, config=base)

    # Assert
    assert len(result.history) == 3 and result.stop_reason is None
    assert 1.8 < (result.history[-1].epsilon or 0.0) <= 2.0
    assert read_history(tmp_path)["status"] == "completed"


def test_flower_averages_v2_item_parameters_over_the_clients_that_saw_them(sim: Prepared, tmp_path: Path) -> None:
    # Prepare: local-fed v2 on students who each answered a random ~half of the bank, so a client's
    # responses per item are not proportional to its size and per-item weighting changes the average
    from federated import encode_dataset, iid_partition
    from federated.candidates import warm_start
    from federated.flower import write_run
    from federated.models import new_model as build_v2
    from qmatrix import Dataset, StudentResponses

    rng = np.random.default_rng(3)
    students = [StudentResponses(student_id=s.student_id,
                                 responses=tuple(r for r in s.responses if rng.random() < 0.5) or s.responses[:1])
                for s in sim.dataset.students]
    q = sim.dataset.qmatrix
    model = build_v2("higher-order-irt", q, seed=0)
    data = encode_dataset(Dataset(name="half", qmatrix=q, students=students, simulated=True),
                          table=model.item_table(q))
    train, test = data.subset(np.arange(0, 240)), data.subset(np.arange(240, len(data)))
    clients = [train.subset(p) for p in iid_partition(len(train), n_clients=3, rng=np.random.default_rng(1))]
    fed = FedConfig(rounds=2, local=LocalConfig(epochs=1))
    write_run(tmp_path / "data", config=FlowerConfig(fed=fed), model=model, clients=clients, evaluation=test, seed=2)

    # Execute
    flower = run_inprocess(tmp_path / "data", tmp_path / "out")
    reference_model = build_v2("higher-order-irt", q, seed=0)
    # run_fedavg is the bare round loop: the warm start both trainers make first (no DP) is applied here
    warm_start(reference_model, clients, table=data.features.numpy())
    reference = run_fedavg(reference_model, clients, test, config=fed, rng=np.random.default_rng(2))

    # Assert: the same per-item averages as the in-process engine
    for got, want in zip(get_parameters(flower.model), get_parameters(reference.model), strict=True):
        assert np.allclose(got, want, atol=1e-5)
