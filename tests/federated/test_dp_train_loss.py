"""Under DP the training students' loss is outside the privacy accounting, so nothing released carries it
(issue 30): not the signed manifest, not the round records a progress callback (the CLI table) or a Flower
``history.json`` sees. Without DP it stays, for the operator to watch training."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from federated import FedConfig, RoundRecord
from federated.registry import ModelRegistry
from federated.rounds import run_rounds
from federated.train import TrainingConfig, train_federated
from qmatrix import Dataset, example_qmatrix, simulate_dina


@pytest.fixture(scope="module")
def small() -> Dataset:
    """SIMULATED: 300 DINA students on the example Q-matrix (as tests/federated/test_train.py)."""
    return simulate_dina(example_qmatrix(), n_students=300, slip=0.05, guess=0.1, seed=11)


@pytest.mark.parametrize("config", [
    TrainingConfig(rounds=2, dp="client", epsilon=4.0, seed=2),
    TrainingConfig(rounds=1, dp="student", epsilon=6.0, seed=2, local_epochs=1, student_sample_rate=0.25),
], ids=["client-dp", "student-dp"])
def test_dp_training_publishes_no_train_loss(small: Dataset, tmp_path: Path, config: TrainingConfig) -> None:
    # Execute
    seen: list[RoundRecord] = []
    result = train_federated(dataset=small, registry=tmp_path, config=config, progress=seen.append)

    # Assert: the signed manifest (as stored and as returned) has no train_loss; the records carry none either
    assert result.published
    stored = ModelRegistry(tmp_path).load().manifest
    for manifest in (stored, result.manifest):
        assert manifest["dp_mode"] == config.dp.name and manifest["history"]
        assert all("train_loss" not in row for row in manifest["history"])
        assert all("auc" in row and "epsilon" in row for row in manifest["history"])
    assert seen and all(math.isnan(r.train_loss) for r in seen)
    assert all(math.isnan(r.train_loss) for r in result.history)


def test_training_without_dp_keeps_train_loss(small: Dataset, tmp_path: Path) -> None:
    result = train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(rounds=2, seed=2))
    manifest = ModelRegistry(tmp_path).load().manifest
    assert manifest["dp_mode"] == "none"
    assert [row["train_loss"] for row in manifest["history"]] == pytest.approx([r.train_loss for r in result.history])
    assert all(row["train_loss"] > 0 for row in manifest["history"])


@pytest.mark.parametrize(("dp", "kept"), [("none", True), ("client", False)])
def test_the_shared_round_loop_drops_train_loss_under_dp(dp: str, kept: bool) -> None:
    # Prepare: the loop every engine (in-process, Flower simulation, a federation's ServerApp) runs
    config = FedConfig(rounds=2, dp=dp, noise_multiplier=1.0, clip_norm=0.1)  # type: ignore[arg-type]
    record = RoundRecord(round=0, sampled_clients=(0,), train_loss=0.42, eval_loss=0.5, auc=0.7, epsilon=None,
                         bytes_sent=8, seconds=0.0)
    seen: list[RoundRecord] = []

    # Execute
    history, _, _ = run_rounds(config, lambda _: record, on_round=seen.append)

    # Assert
    assert len(history) == 2 and seen == history
    assert all((r.train_loss == 0.42) if kept else math.isnan(r.train_loss) for r in history)
