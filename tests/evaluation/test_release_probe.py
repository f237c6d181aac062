"""python -m evaluation.release_probe: what the DP item release alone keeps, before any training round (issue 32)."""

from __future__ import annotations

from evaluation.release_probe import main


def test_probe_scores_untrained_the_exact_start_and_each_release() -> None:
    # Execute: SIMULATED students; a release with negligible noise and one drowned in it
    results = main(["--dataset", "synthetic", "--seed", "2", "--epsilons", "1000,0.01"])

    # Assert: every row is an AUC; the negligible-noise release keeps the exact start's skill, the drowned one does not
    labels = list(results)
    assert labels[:3] == ["untrained", "non-private warm start", "release at ε 1000 (σ 0.05)"]
    assert len(labels) == 4 and labels[3].startswith("release at ε 0.01 (σ ")
    assert all(0.0 <= v <= 1.0 for v in results.values())
    assert abs(results["release at ε 1000 (σ 0.05)"] - results["non-private warm start"]) < 0.03
