"""The anchored release (privacy/anchored.py): its guarantee, its post-processing and what it buys."""

from __future__ import annotations

import numpy as np
import pytest

from privacy import PiecewiseMechanism, mechanism_for_request, mechanism_from_description
from privacy.anchored import SHARE_GRID, AnchoredPiecewiseMechanism, expected_error


def _anchored(epsilon: float, d: int) -> AnchoredPiecewiseMechanism:
    mechanism = mechanism_for_request(name="anchored_piecewise", epsilon=epsilon, mode="assessed",
                                      n_concepts_total=110, n_concepts_assessed=d)
    assert isinstance(mechanism, AnchoredPiecewiseMechanism)
    return mechanism


def test_one_release_is_charged_once_at_the_whole_epsilon() -> None:
    m = _anchored(32.0, 30)
    cost = m.charge()
    assert (cost.epsilon, cost.delta, cost.mechanism) == (32.0, 0.0, "anchored_piecewise")
    # the two parts' ε add up to the charge (basic composition)
    assert m.anchor is not None
    assert m.anchor.epsilon + m.details.epsilon == pytest.approx(32.0)
    assert m.details.dimension == 30 and m.anchor.dimension == 1


def test_the_release_is_post_processing_of_the_two_parts_draws() -> None:
    """privatize == combine(anchor's draw, details' draw) with the same generator: nothing but the two
    ε-LDP releases and public parameters reaches the output, so the guarantee is their composition."""
    m = _anchored(32.0, 30)
    values = {f"c{k}": 0.02 + 0.03 * k for k in range(30)}
    released = m.privatize(values, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    assert m.anchor is not None
    anchor = m.anchor.privatize({"mean": float(np.mean(list(values.values())))}, rng)["mean"]
    reports = m.details.privatize(values, rng)
    expected = m.combine(anchor, np.array([reports[k] for k in values]))
    assert list(released) == list(values)
    assert np.allclose([released[k] for k in values], expected)
    assert all(0.0 <= v <= 1.0 for v in released.values())


def test_the_share_is_chosen_from_public_parameters() -> None:
    assert _anchored(8.0, 1).share == 0.0  # one concept: one release at the whole ε beats two halves
    many = _anchored(32.0, 60)
    assert many.share in SHARE_GRID and many.share > 0.0  # ~0.5 ε per concept: the anchor pays
    # the chosen share minimises the stated expected error over the grid
    errors = {s: expected_error(*many._parts(s), 60, many.prior_spread) for s in SHARE_GRID}
    assert errors[many.share] == min(errors.values())
    # a share given explicitly is kept
    assert AnchoredPiecewiseMechanism(epsilon=8.0, dimension=5, anchor_share=0.3).share == 0.3


def test_noisy_details_fall_back_to_the_anchor_and_precise_ones_are_kept() -> None:
    reports = np.array([0.1, 0.9, 0.4, 0.6])
    noisy = AnchoredPiecewiseMechanism(epsilon=0.4, dimension=4, anchor_share=0.5)  # ε 0.05 per concept
    out = noisy.combine(0.5, reports)
    assert np.ptp(out) < 0.01  # every concept reads (nearly) the pooled mean
    precise = AnchoredPiecewiseMechanism(epsilon=400.0, dimension=4, anchor_share=0.5)
    out = precise.combine(0.5, reports)
    assert np.allclose(out, reports, atol=0.01)


def test_it_beats_the_plain_split_where_each_concept_gets_little() -> None:
    rng = np.random.default_rng(3)
    anchored, plain = _anchored(32.0, 30), PiecewiseMechanism(epsilon=32.0, dimension=30)
    err_a, err_p = [], []
    for _ in range(200):
        x = np.clip(rng.uniform(0.2, 0.8) + rng.normal(0.0, 0.2, 30), 0.0, 1.0)
        values = {f"c{k}": float(v) for k, v in enumerate(x)}
        for mechanism, errors in ((anchored, err_a), (plain, err_p)):
            out = mechanism.privatize(values, rng)
            errors.extend((np.array([out[k] for k in values]) - x) ** 2)
    rmse_a, rmse_p = float(np.sqrt(np.mean(err_a))), float(np.sqrt(np.mean(err_p)))
    assert rmse_a < 0.4 * rmse_p, (rmse_a, rmse_p)
    assert rmse_a < 0.3


def test_description_round_trip_and_kernel() -> None:
    m = _anchored(32.0, 30)
    again = mechanism_from_description(m.describe())
    assert again.describe() == m.describe()
    kernel = m.likelihood(0.1)
    grid = np.linspace(0.0, 1.0, 11)
    assert np.all(np.isfinite(kernel.loglik(np.array([0.0, 0.3, 1.0]), grid)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"prior_spread": 0.0}, "prior_spread"), ({"prior_spread": 1.5}, "prior_spread"),
     ({"anchor_share": 1.0}, "anchor_share"), ({"anchor_share": -0.1}, "anchor_share")],
)
def test_bad_parameters_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AnchoredPiecewiseMechanism(epsilon=8.0, dimension=4, **kwargs)


def test_more_values_than_the_budget_covers_are_refused() -> None:
    with pytest.raises(ValueError, match="exceed dimension"):
        AnchoredPiecewiseMechanism(epsilon=8.0, dimension=2).privatize({"a": 0.1, "b": 0.2, "c": 0.3},
                                                                       np.random.default_rng(0))
    assert AnchoredPiecewiseMechanism(epsilon=8.0, dimension=2).privatize({}, np.random.default_rng(0)) == {}
