"""train_federated (dataset -> gated, signed registry version), robust aggregation, and the default model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from federated import FedConfig, LocalConfig, RoundRecord, encode_dataset, iid_partition, run_fedavg
from federated import split_student_indices
from federated.gate import GatePolicy
from federated.models import DEFAULT_KIND, new_model
from federated.registry import ModelRegistry
from federated.publish import PublishOptions
from federated.train import (TrainingConfig, coordinate_median, default_model_if_missing, train_federated, trimmed_mean,
                             warm_start)
from qmatrix import Dataset, example_qmatrix, simulate_dina


@pytest.fixture(scope="module")
def small() -> Dataset:
    """SIMULATED: 300 DINA students on the example Q-matrix."""
    return simulate_dina(example_qmatrix(), n_students=300, slip=0.05, guess=0.1, seed=11)


def test_trimmed_mean_and_median_known_answers() -> None:
    updates = [[np.array([1.0, 10.0])], [np.array([2.0, 20.0])], [np.array([3.0, 30.0])], [np.array([100.0, -50.0])]]
    np.testing.assert_allclose(coordinate_median(updates)[0], [2.5, 15.0])
    np.testing.assert_allclose(trimmed_mean(updates, trim=0.25)[0], [2.5, 15.0])
    np.testing.assert_allclose(trimmed_mean(updates, trim=0.0)[0], [26.5, 2.5])
    np.testing.assert_allclose(trimmed_mean(updates[:2], trim=0.45)[0], [1.5, 15.0])  # never trims everything
    with pytest.raises(ValueError):
        trimmed_mean(updates, trim=0.5)


def test_publishes_a_signed_version_with_history(small: Dataset, tmp_path: Path) -> None:
    # Prepare
    seen: list[RoundRecord] = []

    # Execute
    result = train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(clients=3, rounds=3, seed=1),
                             progress=seen.append)

    # Assert: both candidate kinds trained (progress saw each one's rounds), the better one published
    assert result.published and result.version == "v0001" and result.decision.accepted
    assert [r.round for r in result.history] == [1, 2, 3] and len(seen) == 6
    assert result.history in (seen[:3], seen[3:])
    for record in result.history:
        assert record.train_loss > 0 and 0.5 < record.auc <= 1 and record.epsilon is None and record.bytes_sent > 0
    loaded = ModelRegistry(tmp_path).load()
    manifest = loaded.manifest
    assert loaded.signature_verified and manifest == result.manifest
    assert manifest["rounds"] == 3 and manifest["dp_mode"] == "none" and manifest["epsilon"] is None
    # the served weights are the best round's: the held-out AUC measured on the published model is that round's
    assert manifest["heldout_metrics"]["auc"] == pytest.approx(max(r.auc for r in result.history))
    selection = manifest["model_selection"]
    scores = {c["kind"]: c["heldout_auc"] for c in selection["candidates"]}
    assert set(scores) == {"higher-order-irt", "irt-2pl"} and selection["chosen"] == max(scores, key=scores.get)
    assert loaded.manifest["config"]["model"]["kind"] == selection["chosen"] == result.selection["chosen"]
    assert manifest["heldout_metrics"]["true_mastery_mae"] < 0.5 and manifest["data"]["simulated"] is True
    assert manifest["qmatrix_id"] == small.qmatrix.id and len(manifest["items"]) == len(small.qmatrix.items)
    assert manifest["config"]["training"]["aggregation"] == "fedavg" and len(manifest["history"]) == 3
    assert loaded.model.seen_item_ids == set(small.qmatrix.item_ids)


def test_rounds_match_one_run_fedavg_call(small: Dataset, tmp_path: Path) -> None:
    # Prepare: the same seeded split, partition and model as train_federated builds.
    rng = np.random.default_rng(4)
    model = new_model(DEFAULT_KIND, small.qmatrix, seed=4)
    data = encode_dataset(small, table=model.item_table(small.qmatrix))
    split = split_student_indices(len(data), rng=rng, validation=0.0, test=0.2)
    train, evaluation = data.subset(split.train), data.subset(split.test)
    shards = [train.subset(p) for p in iid_partition(len(train), n_clients=3, rng=rng)]
    warm_start(model, shards, table=data.features.numpy())  # round 0 without DP, as train_federated runs it
    config = FedConfig(rounds=3, local=LocalConfig(epochs=2))

    # Execute
    reference = run_fedavg(model, shards, evaluation, config=config, rng=rng)
    result = train_federated(dataset=small, registry=tmp_path,
                             config=TrainingConfig(rounds=3, seed=4, model_kind=DEFAULT_KIND))

    # Assert
    assert [r.auc for r in result.history] == [r.auc for r in reference.history]
    assert [r.bytes_sent for r in result.history] == [r.bytes_sent for r in reference.history]


def test_client_dp_spends_at_most_the_budget(small: Dataset, tmp_path: Path) -> None:
    result = train_federated(dataset=small, registry=tmp_path,
                             config=TrainingConfig(rounds=3, dp="client", epsilon=4.0, seed=2, model_kind=DEFAULT_KIND))
    epsilons = [r.epsilon for r in result.history]
    assert len(epsilons) == 3 and epsilons == sorted(epsilons) and 0 < epsilons[-1] <= 4.0
    manifest = result.manifest
    assert manifest["epsilon"] == epsilons[-1] and manifest["delta"] == 1e-5 and manifest["dp_mode"] == "client"
    assert manifest["config"]["training"]["noise_multiplier"] > 0 and result.stop_reason is None


def test_student_dp_is_calibrated_to_the_budget(small: Dataset, tmp_path: Path) -> None:
    result = train_federated(dataset=small, registry=tmp_path,
                             config=TrainingConfig(rounds=2, dp="student", epsilon=6.0, seed=2, local_epochs=1,
                                                   student_sample_rate=0.25))
    assert result.published and 0 < result.history[-1].epsilon <= 6.0
    assert result.manifest["config"]["training"]["steps_per_round"] == 4
    assert result.history[-1].student_norm_median is not None


def test_hard_epsilon_stop_works_through_train_federated(small: Dataset, tmp_path: Path) -> None:
    # Execute: a fixed noise multiplier far too small for 10 rounds within epsilon 3 (about 4 fit).
    result = train_federated(dataset=small, registry=tmp_path,
                             config=TrainingConfig(rounds=10, dp="client", epsilon=3.0, noise_multiplier=3.0, seed=3))

    # Assert
    assert 0 < len(result.history) < 10 and result.stop_reason.startswith(f"round {len(result.history) + 1} would")
    assert result.history[-1].epsilon <= 3.0
    assert result.manifest["rounds"] == len(result.history) and result.manifest["stop_reason"] == result.stop_reason


def test_nothing_is_published_when_no_round_fits_the_budget(small: Dataset, tmp_path: Path) -> None:
    result = train_federated(dataset=small, registry=tmp_path,
                             config=TrainingConfig(rounds=3, dp="client", epsilon=0.01, noise_multiplier=0.5, seed=3))
    assert not result.published and not result.history and "no round ran" in result.decision.reasons[0]
    assert ModelRegistry(tmp_path).versions() == []


def test_gate_refusal_keeps_the_active_model_and_force_publishes(small: Dataset, tmp_path: Path) -> None:
    # Prepare
    first = train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(rounds=2, seed=0))
    strict = GatePolicy(max_canary_shift=0.0)

    # Execute
    refused = train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(rounds=2, seed=1),
                              publish=PublishOptions(gate=strict))
    forced = train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(rounds=2, seed=1),
                             publish=PublishOptions(gate=strict, force=True))

    # Assert
    assert not refused.published and refused.manifest is None and "canary" in refused.decision.reasons[0]
    assert forced.version == "v0002" and forced.manifest["forced"] is True and forced.manifest["gate"]["forced"]
    assert ModelRegistry(tmp_path).active_version() == "v0002" and first.version == "v0001"


@pytest.mark.parametrize("aggregation", ["median", "trimmed_mean", "fedprox"])
def test_other_aggregations_train(small: Dataset, tmp_path: Path, aggregation: str) -> None:
    result = train_federated(dataset=small, registry=tmp_path,
                             config=TrainingConfig(clients=4, rounds=2, aggregation=aggregation,  # type: ignore[arg-type]
                                                   partition="dirichlet", alpha=1.0, seed=0))
    assert result.published and result.history[-1].auc > 0.6
    assert result.manifest["config"]["training"]["aggregation"] == aggregation


def test_invalid_combinations_are_refused(small: Dataset, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="client-level DP"):
        train_federated(dataset=small, registry=tmp_path,
                        config=TrainingConfig(dp="client", epsilon=1.0, aggregation="median"))
    with pytest.raises(ValueError, match="needs an epsilon"):
        train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(dp="student"))
    with pytest.raises(ValueError, match="aggregation must be one of"):
        train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(aggregation="krum"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition"):
        train_federated(dataset=small, registry=tmp_path, config=TrainingConfig(partition="by-school"))  # type: ignore[arg-type]


def test_default_model_is_trained_once(tmp_path: Path) -> None:
    # Execute
    version = default_model_if_missing(tmp_path, seed=0)
    again = default_model_if_missing(tmp_path, seed=0)

    # Assert
    assert version == "v0001" and again is None
    manifest = ModelRegistry(tmp_path).load().manifest
    assert manifest["data"]["simulated"] and manifest["dp_mode"] == "none" and manifest["rounds"] == 20
    assert manifest["qmatrix_id"] == example_qmatrix().id and manifest["heldout_metrics"]["auc"] > 0.65


def test_training_comparison_reports_every_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from federated.benchmark import compare_training, write_comparison
    from qmatrix import example_qmatrix, simulate_dina

    data = simulate_dina(example_qmatrix(), n_students=150, seed=2)
    result = compare_training(data, clients=2, rounds=1, epsilons=(8.0,), seed=0)
    assert [r["name"] for r in result.rows] == ["centralized", "federated", "federated-dp(ε=8)"]
    assert result.rows[0]["clients"] == 1 and result.rows[2]["epsilon_spent"] <= 8.0
    paths = write_comparison([result], tmp_path, command="fedcd bench federated ...")
    assert "held-out AUC" in paths[1].read_text()


def test_candidates_under_dp_compose_within_the_budget(small: Dataset, tmp_path: Path) -> None:
    # Execute: two candidate kinds trained with client-level DP on the same students
    result = train_federated(dataset=small, registry=tmp_path,
                             config=TrainingConfig(rounds=2, dp="client", epsilon=4.0, seed=2))

    # Assert: the noise covers both runs together; the manifest's ε is both runs composed, not the chosen one's
    manifest = result.manifest
    candidates = manifest["model_selection"]["candidates"]
    assert [c["rounds_run"] for c in candidates] == [2, 2]
    assert manifest["epsilon"] == result.epsilon and 0 < manifest["epsilon"] <= 4.0
    assert manifest["epsilon"] >= max(r.epsilon for r in result.history)
    assert "costs no privacy" in manifest["model_selection"]["rule"]


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown model kind"):
        TrainingConfig(model_kind="rasch")


def test_best_round_restores_the_best_weights() -> None:
    # Prepare: a model whose weights change every "round", with held-out AUCs that peak at round 2
    import torch

    from federated.inprocess import RoundRecord as Record
    from federated.rounds import BestRound

    model = new_model(DEFAULT_KIND, example_qmatrix(), seed=0)
    best, weights = BestRound(model), {}

    # Execute
    for number, auc in enumerate([0.70, 0.75, 0.72, float("nan")], start=1):
        with torch.no_grad():
            model.feature_b.fill_(float(number))
        model.mark_seen({f"item-{number}"})
        weights[number] = model.feature_b.detach().clone()
        best(Record(round=number, sampled_clients=(0,), train_loss=0.5, eval_loss=0.5, auc=auc, epsilon=None,
                    bytes_sent=1, seconds=0.0))
    served = best.restore()

    # Assert: round 2's parameters and seen items are back, not the last round's
    assert served == 2 and torch.equal(model.feature_b, weights[2])
    assert model.seen_item_ids == {"item-1", "item-2"}
