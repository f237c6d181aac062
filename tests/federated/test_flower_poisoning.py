"""Model poisoning: one SIMULATED institution scales its update x50 (clipping off, then on)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from federated import FedConfig, LocalConfig, get_parameters, l2_norm
from federated.flower import FlowerConfig, make_client_app, run_inprocess
from federated.inprocess import FedResult
from tests.federated.conftest import Prepared
from tests.federated.flower_apps.mods import scale_update
from tests.federated.flower_apps.runs import write

N_CLIENTS, ROUNDS, CLIP = 5, 5, 0.5


def _run(tmp: Path, prepared: Prepared, *, aggregation: str, attack: bool, clip: bool = False,
         rounds: int = ROUNDS) -> FedResult:
    fed = FedConfig(rounds=rounds, local=LocalConfig(epochs=2), clip_norm=CLIP)
    config = FlowerConfig(fed=fed, aggregation=aggregation, clip_updates=clip)  # type: ignore[arg-type]
    name = f"{aggregation}-{attack}-{clip}-{rounds}"
    app = make_client_app([scale_update(0, 50.0)] if attack else [])
    return run_inprocess(write(tmp / name, prepared, config, n=N_CLIENTS), tmp / name / "out", client_app=app)


@pytest.fixture(scope="module")
def honest_auc(sim: Prepared, tmp_path_factory: pytest.TempPathFactory) -> float:
    return _run(tmp_path_factory.mktemp("honest"), sim, aggregation="fedavg", attack=False).history[-1].auc


@pytest.mark.parametrize("aggregation", ["trimmed_mean", "median"])
def test_robust_aggregation_keeps_held_out_auc_of_the_honest_run(sim: Prepared, tmp_path: Path, honest_auc: float,
                                                                 aggregation: str) -> None:
    attacked = _run(tmp_path, sim, aggregation=aggregation, attack=True)
    assert abs(attacked.history[-1].auc - honest_auc) < 0.01


def test_plain_fedavg_is_damaged_by_one_scaled_update(sim: Prepared, tmp_path: Path, honest_auc: float) -> None:
    attacked = _run(tmp_path, sim, aggregation="fedavg", attack=True)
    assert attacked.history[-1].auc < honest_auc - 0.01
    assert attacked.history[0].pre_clip_norms[0] > 20 * attacked.history[0].pre_clip_norms[1]  # logged per client


def test_clipping_bounds_the_damage_of_the_scaled_update(sim: Prepared, tmp_path: Path, honest_auc: float) -> None:
    # Execute
    attacked = _run(tmp_path, sim, aggregation="fedavg", attack=True, clip=True)
    one_attacked = _run(tmp_path, sim, aggregation="fedavg", attack=True, clip=True, rounds=1)
    one_honest = _run(tmp_path, sim, aggregation="fedavg", attack=False, clip=True, rounds=1)

    # Assert: the attacker moves the mean by at most 2C / N, whatever its scale
    shift = l2_norm([a - b for a, b in zip(get_parameters(one_attacked.model), get_parameters(one_honest.model),
                                           strict=True)])
    assert shift <= 2 * CLIP / N_CLIENTS + 1e-5
    assert one_attacked.history[0].pre_clip_norms[0] > 20 * CLIP  # the scaled norm is still logged
    assert abs(attacked.history[-1].auc - honest_auc) < 0.02
    assert np.isfinite(attacked.history[-1].eval_loss)
