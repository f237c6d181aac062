"""The privacy accountant: known answers, RDP vs. PLD, budget checks and noise calibration."""

from __future__ import annotations

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from federated import MECHANISM, PrivacyAccountant, epsilon_for, noise_multiplier_for


def _reference_pld(q: float, sigma: float, steps: int, delta: float) -> float:
    """dp_accounting used directly (finer discretisation than the accountant's default)."""
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return accountant.get_epsilon(delta)


def test_known_answer_q01_sigma12_150_steps() -> None:
    # Prepare
    accountant = PrivacyAccountant()

    # Execute: 150 separate steps, as a training loop would record them
    for _ in range(150):
        accountant.step(noise_multiplier=1.2, sample_rate=0.1)
    epsilon = accountant.get_epsilon(1e-5)

    # Assert
    reference = _reference_pld(0.1, 1.2, 150, 1e-5)
    assert reference == pytest.approx(6.2, abs=0.05)
    assert epsilon == pytest.approx(reference, rel=1e-3)
    assert epsilon >= reference - 1e-9  # coarser pessimistic discretisation: never below
    assert len(accountant) == 150 and accountant.mechanism() == MECHANISM


def test_rdp_is_looser_than_pld() -> None:
    accountant = PrivacyAccountant()
    accountant.step(noise_multiplier=1.2, sample_rate=0.1, steps=150)
    assert accountant.get_epsilon_rdp(1e-5) >= accountant.get_epsilon(1e-5)
    assert accountant.get_epsilon_rdp(1e-5) < 1.5 * accountant.get_epsilon(1e-5)


def test_history_records_steps_and_mixed_histories_compose() -> None:
    accountant = PrivacyAccountant()
    accountant.step(noise_multiplier=1.0, sample_rate=0.2, steps=10)
    accountant.step(noise_multiplier=2.0, sample_rate=0.05)
    assert accountant.history == [(1.0, 0.2, 10), (2.0, 0.05, 1)]
    both = accountant.get_epsilon(1e-5)
    assert both > epsilon_for([(1.0, 0.2, 10)], delta=1e-5) > 0
    assert PrivacyAccountant().get_epsilon(1e-5) == 0.0


def test_epsilon_grows_with_steps_and_falls_with_noise() -> None:
    e = [epsilon_for([(s, 0.1, n)], delta=1e-5) for s, n in [(1.0, 10), (1.0, 100), (2.0, 100)]]
    assert e[0] < e[1] and e[2] < e[1]


def test_would_exceed_answers_before_the_step_without_recording_it() -> None:
    # Prepare: spend most of a budget
    accountant = PrivacyAccountant()
    accountant.step(noise_multiplier=1.2, sample_rate=0.1, steps=140)
    spent = accountant.get_epsilon(1e-5)

    # Execute / Assert
    kwargs = dict(noise_multiplier=1.2, sample_rate=0.1, delta=1e-5)
    assert not accountant.would_exceed(epsilon_budget=spent + 1.0, steps=1, **kwargs)
    assert accountant.would_exceed(epsilon_budget=spent + 0.01, steps=10, **kwargs)
    assert len(accountant) == 140


def test_noise_multiplier_for_hits_but_never_overshoots_the_target() -> None:
    for target in (1.0, 6.2):
        sigma = noise_multiplier_for(target_epsilon=target, delta=1e-5, sample_rate=0.1, steps=150)
        assert epsilon_for([(sigma, 0.1, 150)], delta=1e-5) <= target
        assert epsilon_for([(sigma / 1.03, 0.1, 150)], delta=1e-5) > target
    sigma = noise_multiplier_for(target_epsilon=6.2, delta=1e-5, sample_rate=0.1, steps=150)
    assert sigma == pytest.approx(1.2, rel=0.02)


def test_state_dict_round_trip_and_mechanism_check() -> None:
    accountant = PrivacyAccountant()
    accountant.step(noise_multiplier=1.1, sample_rate=0.3, steps=4)
    restored = PrivacyAccountant()
    restored.load_state_dict(accountant.state_dict())
    assert restored.history == accountant.history
    with pytest.raises(ValueError, match="mechanism"):
        restored.load_state_dict({**accountant.state_dict(), "mechanism": "laplace"})


@pytest.mark.parametrize("kwargs", [
    dict(noise_multiplier=0.0, sample_rate=0.1),
    dict(noise_multiplier=1.0, sample_rate=1.5),
    dict(noise_multiplier=1.0, sample_rate=0.1, steps=-1),
])
def test_invalid_steps_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        PrivacyAccountant().step(**kwargs)
