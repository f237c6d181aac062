"""Accountants: known answers (basic sums, RDP/zCDP against dp_accounting directly), state dicts, registry."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from privacy.accountants import (
    Accountant,
    BasicCompositionAccountant,
    RDPAccountant,
    ZCDPAccountant,
    accountant_names,
    make_accountant,
    register_accountant,
)
from privacy.gaussian import analytic_gaussian_sigma
from privacy.mechanisms import ReleaseCost


def test_basic_composition_of_five_half_epsilons_is_two_and_a_half() -> None:
    accountant = BasicCompositionAccountant()
    for _ in range(5):
        accountant.step(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace"))

    assert accountant.spent() == (2.5, 0.0)
    assert len(accountant) == 5
    assert accountant.mechanism() == "basic"


def test_basic_composition_sums_deltas_and_ignores_the_target() -> None:
    accountant = BasicCompositionAccountant()
    for _ in range(3):
        accountant.step(ReleaseCost(epsilon=1.0, delta=1e-6, mechanism="gaussian"))

    epsilon, delta = accountant.spent(delta=1e-9)

    assert epsilon == 3.0
    assert delta == pytest.approx(3e-6, rel=1e-12)


def test_tenths_add_up_exactly() -> None:
    accountant = BasicCompositionAccountant()
    for _ in range(10):
        accountant.step(ReleaseCost(epsilon=0.1, delta=0.0, mechanism="laplace"))

    assert accountant.spent()[0] == 1.0  # math.fsum, not a drifting running sum


@pytest.mark.parametrize("name", ["basic", "rdp", "zcdp"])
def test_nothing_spent_before_any_step(name: str) -> None:
    assert make_accountant(name).spent() == (0.0, 0.0)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_rdp_of_k_gaussian_queries_matches_dp_accounting(k: int) -> None:
    # Prepare: each query is the analytic Gaussian for (ε=1, δ=1e-6); its σ/Δ₂ is scale-free.
    noise_multiplier = analytic_gaussian_sigma(epsilon=1.0, delta=1e-6, sensitivity=1.0)
    direct = RdpAccountant()
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(noise_multiplier), k))
    accountant = RDPAccountant()

    # Execute
    for _ in range(k):
        accountant.step(ReleaseCost(epsilon=1.0, delta=1e-6, mechanism="gaussian"))

    # Assert
    assert accountant.renyi_epsilon(1e-5) == pytest.approx(direct.get_epsilon(1e-5), rel=1e-9)
    np.testing.assert_allclose(accountant.rdp, direct.rdp, rtol=1e-12)
    if k > 1:  # basic composition's k·δ exceeds the target, so the Rényi bound is the answer
        assert accountant.spent(1e-5) == (pytest.approx(direct.get_epsilon(1e-5), rel=1e-9), 1e-5)


def test_rdp_uses_a_given_noise_multiplier() -> None:
    direct = RdpAccountant()
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0), 20))
    accountant = RDPAccountant(target_delta=1e-6)

    for _ in range(20):
        accountant.step(ReleaseCost(epsilon=2.0, delta=0.0, mechanism="gaussian", sigma_over_sensitivity=3.0))

    assert accountant.spent()[0] == pytest.approx(direct.get_epsilon(1e-6), rel=1e-9)


def test_rdp_beats_basic_composition_for_many_gaussian_queries() -> None:
    basic, rdp = BasicCompositionAccountant(), RDPAccountant()
    for _ in range(50):
        for accountant in (basic, rdp):
            accountant.step(ReleaseCost(epsilon=1.0, delta=1e-6, mechanism="gaussian"))

    basic_epsilon, basic_delta = basic.spent()
    rdp_epsilon, rdp_delta = rdp.spent(basic_delta)  # the same total δ

    assert (basic_epsilon, basic_delta) == (50.0, pytest.approx(5e-5))
    assert rdp_delta == basic_delta
    assert rdp_epsilon < basic_epsilon / 3


def test_rdp_of_laplace_queries_matches_dp_accounting_and_never_exceeds_basic() -> None:
    direct = RdpAccountant()
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(1 / 0.5), 50))
    few, many = RDPAccountant(), RDPAccountant()

    for _ in range(5):
        few.step(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace"))
    for _ in range(50):
        many.step(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace"))

    assert few.spent(1e-5) == (2.5, 0.0)  # basic composition is tighter here, and pure
    assert many.spent(1e-5) == (pytest.approx(direct.get_epsilon(1e-5), rel=1e-9), 1e-5)
    assert many.spent(1e-5)[0] < 25.0


def test_rdp_curve_of_other_pure_mechanisms() -> None:
    accountant = RDPAccountant()

    accountant.step(ReleaseCost(epsilon=2.0, delta=0.0, mechanism="duchi"))

    np.testing.assert_allclose(accountant.rdp, np.minimum(2.0, accountant.orders * 2.0**2 / 2))


@pytest.mark.parametrize(
    "step",
    [
        {"epsilon": 1.0, "delta": 1e-6, "mechanism": "laplace"},  # neither Gaussian nor pure
        {"epsilon": 1.0, "mechanism": "gaussian"},  # no δ and no σ
    ],
)
def test_rdp_refuses_what_it_cannot_account_and_keeps_its_history(step: dict) -> None:
    accountant = RDPAccountant()
    accountant.step(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace"))

    with pytest.raises(ValueError):
        accountant.step(ReleaseCost(**{"delta": 0.0, **step}))

    assert len(accountant) == 1
    assert accountant.spent(1e-5) == (0.5, 0.0)


def test_rdp_with_zero_target_delta_is_infinite_for_gaussian_queries() -> None:
    accountant = RDPAccountant()
    accountant.step(ReleaseCost(epsilon=1.0, delta=1e-6, mechanism="gaussian"))

    assert accountant.spent(0.0)[0] == math.inf


def test_zcdp_matches_dp_accounting_and_equals_rdp_for_gaussians() -> None:
    noise_multiplier = 2.0
    direct = RdpAccountant()
    direct.compose(dp_accounting.ZCDpEvent(rho=30 / (2 * noise_multiplier**2)))
    zcdp, rdp = ZCDPAccountant(), RDPAccountant()

    for _ in range(30):
        for accountant in (zcdp, rdp):
            accountant.step(
                ReleaseCost(epsilon=1.0, delta=0.0, mechanism="gaussian", sigma_over_sensitivity=noise_multiplier)
            )

    assert zcdp.rho == pytest.approx(30 / 8)
    assert zcdp.spent(1e-5)[0] == pytest.approx(direct.get_epsilon(1e-5), rel=1e-9)
    assert zcdp.spent(1e-5)[0] == pytest.approx(rdp.spent(1e-5)[0], rel=1e-9)


def test_zcdp_of_pure_queries_is_epsilon_squared_over_two() -> None:
    accountant = ZCDPAccountant()

    for _ in range(4):
        accountant.step(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="piecewise"))

    assert accountant.rho == pytest.approx(4 * 0.125)


@pytest.mark.parametrize("name", ["basic", "rdp", "zcdp"])
def test_state_dict_round_trip(name: str) -> None:
    accountant = make_accountant(name)
    accountant.step(ReleaseCost(epsilon=0.5, delta=1e-6, mechanism="gaussian"))
    accountant.step(ReleaseCost(epsilon=0.25, delta=0.0, mechanism="laplace"))
    accountant.step(ReleaseCost(epsilon=1.0, delta=0.0, mechanism="gaussian", sigma_over_sensitivity=2.5))

    restored = make_accountant(name)
    restored.load_state_dict(accountant.state_dict())

    assert restored.history == accountant.history
    assert restored.spent(1e-5) == accountant.spent(1e-5)


@pytest.mark.parametrize(
    "state",
    [
        {"history": []},
        {"accountant": "basic", "history": [], "extra": 1},
        {"accountant": "rdp", "history": []},
        {"accountant": "basic", "history": {}},
        {"accountant": "basic", "history": [{"epsilon": 1.0}]},
        {
            "accountant": "basic",
            "history": [{"mechanism": "laplace", "epsilon": -1.0, "delta": 0.0, "sigma_over_sensitivity": None}],
        },
    ],
)
def test_load_state_dict_checks_keys_accountant_and_values(state: dict) -> None:
    accountant = BasicCompositionAccountant()
    accountant.step(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace"))

    with pytest.raises(ValueError):
        accountant.load_state_dict(state)

    assert accountant.spent() == (0.5, 0.0)


@pytest.mark.parametrize(
    "step",
    [{"epsilon": 0.0}, {"epsilon": -1.0}, {"epsilon": math.nan}, {"epsilon": math.inf}, {"epsilon": 1.0, "delta": 1.0},
     {"epsilon": 1.0, "mechanism": ""}, {"epsilon": 1.0, "sigma_over_sensitivity": 0.0}],
)
def test_a_release_cost_validates_its_numbers(step: dict) -> None:
    with pytest.raises(ValueError):
        ReleaseCost(**{"delta": 0.0, "mechanism": "laplace", **step})


def test_step_takes_a_release_cost_only() -> None:
    accountant = BasicCompositionAccountant()
    with pytest.raises(TypeError, match="ReleaseCost"):
        accountant.step({"epsilon": 1.0, "delta": 0.0, "mechanism": "laplace"})  # type: ignore[arg-type]
    assert len(accountant) == 0


def test_spent_after_does_not_change_the_accountant() -> None:
    accountant = BasicCompositionAccountant()
    accountant.step(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace"))

    assert accountant.spent_after(ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace"), count=3) == (2.0, 0.0)
    assert accountant.spent() == (0.5, 0.0)


def test_registry_refuses_duplicates_unless_forced() -> None:
    class Dummy(Accountant):
        name = "dummy-test"

        def spent(self, delta: float | None = None) -> tuple[float, float]:
            return float(len(self.history)), 0.0

    register_accountant("dummy-test", Dummy)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_accountant("dummy-test", Dummy)
        register_accountant("dummy-test", Dummy, force=True)
        accountant = make_accountant("dummy-test")
        accountant.step(ReleaseCost(epsilon=3.0, delta=0.0, mechanism="laplace"))
        assert isinstance(accountant, Dummy)
        assert accountant.spent() == (1.0, 0.0)
        assert "dummy-test" in accountant_names()
    finally:
        from privacy import accountants

        accountants._REGISTRY.pop("dummy-test", None)


def test_registry_knows_the_builtin_accountants_and_refuses_strangers() -> None:
    assert {"basic", "rdp", "zcdp"} <= set(accountant_names())
    with pytest.raises(ValueError, match="unknown accountant"):
        make_accountant("moments")
    with pytest.raises(TypeError):
        register_accountant("not-an-accountant", dict)  # type: ignore[arg-type]
