"""FlowerConfig: refused combinations (secure vs robust aggregation), round trip, and train_flower's early refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from federated import FedConfig, LocalConfig, StudentDP
from federated.flower import FlowerConfig, FlowerTraining, train_flower
from tests.federated.conftest import Prepared


@pytest.mark.parametrize("aggregation", ["trimmed_mean", "median"])
def test_secure_aggregation_with_robust_aggregation_is_refused(aggregation: str) -> None:
    with pytest.raises(ValueError, match="secure aggregation cannot be combined") as excinfo:
        FlowerConfig(secagg=True, aggregation=aggregation)  # type: ignore[arg-type]
    assert "hides each client's update" in str(excinfo.value) and "inspect" in str(excinfo.value)


@pytest.mark.parametrize("aggregation", ["fedavg", "fedprox"])
def test_secure_aggregation_with_averaging_is_accepted(aggregation: str) -> None:
    assert FlowerConfig(secagg=True, aggregation=aggregation).secagg  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [
    dict(aggregation="krum"),
    dict(aggregation="median", fed=FedConfig(dp="client")),  # noise calibrated to a sum
    dict(aggregation="fedprox", proximal_mu=0.0),
    dict(trim_beta=0.5),
    dict(secagg_threshold=0.0),
    dict(secagg_timeout=-1.0),
])
def test_invalid_configurations_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        FlowerConfig(**kwargs)


def test_student_dp_composes_with_robust_aggregation() -> None:
    student = StudentDP(noise_multiplier=1.0, clip_norm=1.0, sample_rate=0.2, steps=3)
    config = FlowerConfig(fed=FedConfig(dp="student", student_dp=student), aggregation="median")
    assert config.equal_weights and not config.clips and not config.client_noise


def test_config_round_trips_through_a_plain_dict() -> None:
    student = StudentDP(noise_multiplier=1.3, clip_norm=0.5, sample_rate=0.1, steps=4)
    config = FlowerConfig(fed=FedConfig(rounds=7, dp="student", student_dp=student, epsilon_budget=3.0,
                                        local=LocalConfig(epochs=2, lr=0.05)),
                          aggregation="fedprox", proximal_mu=0.1, secagg=True, secagg_timeout=30.0)
    assert FlowerConfig.from_dict(config.to_dict()) == config


def test_train_flower_refuses_before_writing_anything(sim: Prepared, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="secure aggregation"):
        train_flower(dataset=sim.dataset, plan=FlowerTraining(clients=3, rounds=1, secagg=True, aggregation="median"),
                     out_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_train_flower_refuses_an_epsilon_without_dp(sim: Prepared, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        train_flower(dataset=sim.dataset, plan=FlowerTraining(clients=3, rounds=1, epsilon=1.0), out_dir=tmp_path)
