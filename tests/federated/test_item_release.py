"""The per-item sums released under student-level DP (federated.item_release): the sensitivity the noise is
calibrated to, what the warm start makes of the release, the per-item parameters DP-SGD leaves alone, and the
guarantee per student reproduced by dp_accounting from the signed manifest alone (issue 32)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from federated.data import encode_dataset
from federated.item_release import ItemGroups, _scaled_sums, private_warm_start, release_item_sums
from federated.local import LocalConfig, StudentDP, train_local
from federated.models import new_model
from federated.registry import ModelRegistry
from federated.train import TrainingConfig, train_federated
from qmatrix import Dataset, example_qmatrix, simulate_dina


@pytest.fixture(scope="module")
def small() -> Dataset:
    """SIMULATED: 300 DINA students on the example Q-matrix."""
    return simulate_dina(example_qmatrix(), n_students=300, slip=0.05, guess=0.1, seed=11)


def _noiseless(students: np.ndarray, cells: np.ndarray, scores: np.ndarray, n_students: int, n_cells: int
               ) -> np.ndarray:
    return np.concatenate(_scaled_sums(students, cells, scores, n_students, n_cells))


def test_one_student_moves_each_level_by_at_most_one_over_root_two() -> None:
    # Prepare: students with 1 to 60 responses, some items answered twice
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=40)
    students = np.repeat(np.arange(40), lengths)
    cells = rng.integers(0, 25, size=len(students))
    scores = rng.random(len(students))
    full = _noiseless(students, cells, scores, 40, 25)

    for leaver in range(40):
        # Execute: the same sums without one student
        keep = students != leaver
        without = _noiseless(students[keep], cells[keep], scores[keep], 40, 25)

        # Assert: every student contributes exactly 1/√2 at each level (all are scaled, none only clipped)
        assert np.linalg.norm(full - without) == pytest.approx(1 / np.sqrt(2), rel=1e-9)


def test_release_adds_the_stated_noise_and_keeps_the_signal(small: Dataset) -> None:
    # Prepare
    model = new_model("higher-order-irt", small.qmatrix, seed=0)
    data = encode_dataset(small, table=model.item_table(small.qmatrix))
    groups = ItemGroups.of(model, data.features.numpy())

    # Execute: many releases of the same data
    draws = [release_item_sums(model, data, groups, noise_multiplier=2.0, generator=torch.Generator().manual_seed(s))
             for s in range(200)]

    # Assert: the noise has the calibrated spread (on the scores and on the misses; the responses carry both); its
    # mean is the scaled sums, whose ratio is the proportion correct
    counts = np.stack([d.count for d in draws])
    scores = np.stack([d.correct for d in draws])
    assert scores.std(0)[1:].mean() == pytest.approx(2.0, rel=0.1)
    assert (counts - scores).std(0)[1:].mean() == pytest.approx(2.0, rel=0.1)
    assert counts.std(0)[1:].mean() == pytest.approx(2.0 * np.sqrt(2), rel=0.1)
    correct = np.stack([d.correct for d in draws]).mean(0)
    raw_correct, raw_count = model.item_sums(data.features, data.item_index, data.observed, data.scores)
    answered = raw_count[1:] > 0
    np.testing.assert_allclose((correct / counts.mean(0))[1:][answered], (raw_correct / raw_count)[1:][answered],
                               atol=0.08)
    assert all(d.noise_sd == 2.0 for d in draws)
    with pytest.raises(ValueError):
        release_item_sums(model, data, groups, noise_multiplier=0.0, generator=torch.Generator())


def test_warm_start_orders_items_by_easiness_and_keeps_unreadable_ones_at_their_group(small: Dataset) -> None:
    # Prepare
    model = new_model("higher-order-irt", small.qmatrix, seed=0)
    table = model.item_table(small.qmatrix)
    data = encode_dataset(small, table=table)
    groups = ItemGroups.of(model, table)
    raw_correct, raw_count = model.item_sums(data.features, data.item_index, data.observed, data.scores)

    # Execute: a faint release (large ε) and one drowned in noise
    clear, drowned = (release_item_sums(model, data, groups, noise_multiplier=s, generator=torch.Generator().manual_seed(1))
                      for s in (0.01, 1e4))
    private_warm_start(model, table, groups, clear, students=len(data))
    _, easiness = model.item_parameters(torch.as_tensor(table))
    noisy_model = new_model("higher-order-irt", small.qmatrix, seed=0)
    private_warm_start(noisy_model, table, groups, drowned, students=len(data))

    # Assert: the faint release orders the items as their proportions correct do; the drowned one moves no item off
    # its group's fitted value far (the per-item parts stay near 0: the prior outweighs a drowned estimate)
    proportion = raw_correct[1:] / raw_count[1:]
    rows = table[:, -1].astype(int)
    order = np.corrcoef(np.argsort(np.argsort(easiness.detach().numpy())),
                        np.argsort(np.argsort(proportion[rows - 1])))[0, 1]
    assert order > 0.95
    drowned_delta = noisy_model.item_delta[1:, 1].abs()
    assert drowned_delta.max().item() < 0.5 and drowned_delta.mean().item() < 0.15
    assert model.item_delta[1:, 1].abs().mean().item() > 2 * drowned_delta.mean().item()


def test_frozen_parameters_get_no_update_and_no_noise(small: Dataset) -> None:
    # Prepare
    model = new_model("higher-order-irt", small.qmatrix, seed=0)
    data = encode_dataset(small, table=model.item_table(small.qmatrix))
    before = model.item_delta.detach().clone()
    dp = StudentDP(noise_multiplier=1.0, clip_norm=0.5, sample_rate=0.2, steps=3, frozen=("item_delta",))

    # Execute
    result = train_local(model, data, config=LocalConfig(), generator=torch.Generator().manual_seed(0), dp=dp)

    # Assert: the per-item parameters are exactly where they were; the others moved
    assert torch.equal(model.item_delta.detach(), before)
    moved = [float(np.abs(u).max()) for u, (name, _) in zip(result.update, model.named_parameters()) if name != "item_delta"]
    assert max(moved) > 0
    with pytest.raises(ValueError, match="lacks"):
        train_local(model, data, config=LocalConfig(), generator=torch.Generator(),
                    dp=StudentDP(noise_multiplier=1.0, clip_norm=0.5, sample_rate=0.2, steps=1, frozen=("nope",)))


def test_the_manifest_alone_reproduces_the_guarantee_per_student(small: Dataset, tmp_path: Path) -> None:
    # Execute: student-level DP with the item release (the default share)
    config = TrainingConfig(rounds=2, dp="student", epsilon=3.0, seed=2, local_epochs=1, student_sample_rate=0.25)
    result = train_federated(dataset=small, registry=tmp_path, config=config)
    manifest = ModelRegistry(tmp_path).load().manifest

    # Assert: the release is stated, charged first, and dp_accounting recomputes the manifest's ε from its events
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    accounting = manifest["privacy_accounting"]
    release = manifest["config"]["training"]["item_release"]
    events = accounting["events"]
    assert events[0] == {"noise_multiplier": release["noise_multiplier"], "sample_rate": 1.0, "steps": 1}
    assert sum(e["steps"] for e in events[1:]) == 2 * 2 * 4  # two kinds, two rounds, four steps per round
    accountant = pld_privacy_accountant.PLDAccountant(
        value_discretization_interval=accounting["value_discretization_interval"])
    accountant.compose(dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
            e["sample_rate"], dp_accounting.GaussianDpEvent(e["noise_multiplier"])), e["steps"]) for e in events]))
    recomputed = accountant.get_epsilon(accounting["delta"])
    assert recomputed == pytest.approx(accounting["epsilon"], rel=1e-6) and recomputed <= 3.0
    assert manifest["epsilon"] == pytest.approx(recomputed, rel=1e-6)
    assert result.epsilon == pytest.approx(recomputed, rel=1e-6)


def test_share_zero_trains_everything_by_dp_sgd(small: Dataset, tmp_path: Path) -> None:
    config = TrainingConfig(rounds=1, dp="student", epsilon=3.0, seed=2, local_epochs=1, student_sample_rate=0.25,
                            item_release_share=0.0, model_kind="higher-order-irt")
    result = train_federated(dataset=small, registry=tmp_path, config=config)
    assert result.manifest["config"]["training"]["item_release"] is None
    assert [e["sample_rate"] for e in result.manifest["privacy_accounting"]["events"]] == [0.25]
    with pytest.raises(ValueError, match="item_release_share"):
        TrainingConfig(dp="student", epsilon=1.0, item_release_share=1.0)


def test_the_release_start_competes_as_round_zero(small: Dataset, tmp_path: Path) -> None:
    # Execute: a budget so small that every DP-SGD round is mostly noise
    config = TrainingConfig(rounds=2, dp="student", epsilon=0.5, seed=4, local_epochs=1, student_sample_rate=0.25,
                            model_kind="higher-order-irt")
    result = train_federated(dataset=small, registry=tmp_path, config=config)

    # Assert: the start's held-out AUC is recorded and the served round is the best of round 0 and the rounds
    candidate = result.selection["candidates"][0]
    rounds = {r.round: r.auc for r in result.history}
    served = candidate["served_round"]
    start = candidate["start_heldout_auc"]
    assert start is not None and served in (0, *rounds)
    assert candidate["heldout_auc"] == pytest.approx(max(start, *rounds.values()))
    assert (served == 0) == (start >= max(rounds.values()))


def test_a_run_of_no_rounds_is_the_untrained_model_and_releases_nothing(small: Dataset, tmp_path: Path) -> None:
    # Prepare: rounds=0 is how the evaluation builds the untrained model; under student DP it must not spend ε on a
    # release it never starts from (Flower makes none at rounds=0 either: federated.flower.config.releases_item_sums)
    from federated.publish import PublishOptions

    private = TrainingConfig(rounds=0, dp="student", epsilon=3.0, seed=2, model_kind="higher-order-irt")
    plain = TrainingConfig(rounds=0, seed=2, model_kind="higher-order-irt")

    # Execute
    dp_run = train_federated(dataset=small, registry=tmp_path / "dp", config=private,
                             publish=PublishOptions(force=True))
    untrained = train_federated(dataset=small, registry=tmp_path / "plain", config=plain,
                                publish=PublishOptions(force=True))

    # Assert: nothing released, nothing charged, and the weights are the seeded start's, as without DP
    assert dp_run.manifest["config"]["training"]["item_release"] is None
    assert dp_run.manifest["privacy_accounting"]["events"] == [] and dp_run.manifest["epsilon"] is None
    assert dp_run.epsilon is None and dp_run.history == []
    start = ModelRegistry(tmp_path / "plain").load().model.state_dict()
    for name, value in ModelRegistry(tmp_path / "dp").load().model.state_dict().items():
        assert torch.equal(value, start[name]) if isinstance(value, torch.Tensor) else value == start[name], name
    assert untrained.history == [] and not private.releases_item_sums
