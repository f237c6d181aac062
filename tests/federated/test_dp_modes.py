"""The federated DP modes as types (federated.modes): the registry, what each mode reveals, how it weighs updates."""

from __future__ import annotations

import numpy as np
import pytest

from federated import FedConfig, LocalResult, StudentDP
from federated.flower.config import FlowerConfig
from federated.modes import DP_MODES, ClientLevelDP, DPMode, NoDP, StudentLevelDP, calibrate, dp_mode

STUDENT = StudentDP(noise_multiplier=1.0, clip_norm=1.0, sample_rate=0.2, steps=3)


def _result(update: float, n_students: int, rows: list[float]) -> LocalResult:
    return LocalResult(update=[np.array([update]), np.array(rows)], loss=0.5, n_students=n_students, steps=1,
                       row_weights={1: np.array([1.0, 0.0])})


def test_the_registry_maps_each_name_to_its_mode_and_back() -> None:
    # Execute / Assert: the manifest's dp_mode is the name the mode was looked up by
    assert {name: type(mode) for name, mode in DP_MODES.items()} == {
        "none": NoDP, "student": StudentLevelDP, "client": ClientLevelDP}
    assert all(dp_mode(name).name == name for name in DP_MODES)
    assert dp_mode(ClientLevelDP()) == ClientLevelDP() != StudentLevelDP()
    with pytest.raises(ValueError, match="dp must be 'none', 'student' or 'client', got 'secure'"):
        dp_mode("secure")


def test_a_config_takes_a_name_or_a_mode_and_holds_the_mode() -> None:
    # Execute
    by_name = FedConfig(dp="student", student_dp=STUDENT)
    by_type = FedConfig(dp=StudentLevelDP(), student_dp=STUDENT)

    # Assert
    assert by_name == by_type and isinstance(by_name.dp, StudentLevelDP)
    assert isinstance(FedConfig().dp, NoDP)


def test_only_no_dp_reveals_counts_answered_items_and_training_loss() -> None:
    # Assert: under DP nothing outside the accounting leaves (module docstring of federated.modes)
    for mode in DP_MODES.values():
        revealed = (mode.reveals_counts, mode.reveals_answered_items, mode.reveals_train_loss)
        assert revealed == ((True,) * 3 if isinstance(mode, NoDP) else (False,) * 3), mode
        assert mode.private is not isinstance(mode, NoDP)
    assert [m.name for m in DP_MODES.values() if m.noise_at_clients] == ["student"]
    assert [m.name for m in DP_MODES.values() if m.noise_at_server] == ["client"]
    assert [m.name for m in DP_MODES.values() if m.releases_item_sums] == ["student"]


def test_no_dp_weighs_by_client_size_and_student_dp_weighs_equally() -> None:
    # Prepare: two clients, one three times the other's size; per-item rows only the first client answered
    results = [_result(1.0, 1, [2.0, 5.0]), _result(5.0, 3, [4.0, 7.0])]
    like = [np.zeros(1), np.zeros(2)]
    rng = np.random.default_rng(0)

    # Execute
    plain, _ = NoDP().aggregate(results, n_clients=2, fed=FedConfig(), rng=rng, like=like)
    private, _ = StudentLevelDP().aggregate(results, n_clients=2, fed=FedConfig(dp="student", student_dp=STUDENT),
                                            rng=rng, like=like)

    # Assert: counts weigh only without DP; each item's rows by the clients that answered it, also only then
    np.testing.assert_allclose(plain[0], [4.0])
    np.testing.assert_allclose(plain[1], [(2.0 + 4.0) / 2, 0.0])
    np.testing.assert_allclose(private[0], [3.0])
    np.testing.assert_allclose(private[1], [3.0, 6.0])


def test_client_dp_clips_noises_and_divides_by_the_expected_count() -> None:
    # Prepare
    fed = FedConfig(dp="client", noise_multiplier=1e-9, clip_norm=1.0, client_sample_rate=0.5)
    results = [_result(10.0, 1, [0.0, 0.0])]

    # Execute
    update, norms = ClientLevelDP().aggregate(results, n_clients=4, fed=fed, rng=np.random.default_rng(0),
                                              like=[np.zeros(1), np.zeros(2)])

    # Assert: clipped to norm 1, summed, divided by q N = 2 (not by the one client sampled); the norm logged
    assert update is not None and norms == {0: pytest.approx(10.0)}
    np.testing.assert_allclose(update[0], [0.5], atol=1e-6)


def test_each_mode_charges_its_own_mechanism() -> None:
    # Prepare
    client = FedConfig(dp="client", noise_multiplier=2.0, client_sample_rate=0.3)
    student = FedConfig(dp="student", student_dp=STUDENT)

    # Assert
    assert FedConfig().round_mechanism() is None
    assert client.round_mechanism() == (2.0, 0.3, 1)
    assert student.round_mechanism() == (1.0, 0.2, 3)
    assert calibrate(FedConfig(rounds=4), epsilon=1.0) == FedConfig(rounds=4)  # no DP: nothing to calibrate
    tighter = calibrate(FedConfig(rounds=4, dp="client", epsilon_budget=1.0), epsilon=1.0, candidates=2)
    looser = calibrate(FedConfig(rounds=4, dp="client", epsilon_budget=1.0), epsilon=1.0)
    assert tighter.noise_multiplier > looser.noise_multiplier > 0  # two candidates compose: more noise


def test_a_flower_config_round_trips_its_mode_by_name() -> None:
    # Prepare
    config = FlowerConfig(fed=FedConfig(dp="student", student_dp=STUDENT, epsilon_budget=3.0))

    # Execute
    data = config.to_dict()

    # Assert: the run folder holds the name; the other process gets the same mode back
    assert data["fed"]["dp"] == "student"
    assert FlowerConfig.from_dict(data) == config and isinstance(FlowerConfig.from_dict(data).fed.dp, DPMode)
