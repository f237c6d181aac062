"""The local-fed ablation: variants trained on the train split, scored through the link and by their own item
model, compared with the CDMs by paired intervals, and written as a report with its targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from evaluation.ablation import Variant, run_ablation
from evaluation.ablation_report import write_ablation_report
from evaluation.served import LocalFedTraining
from qmatrix import example_qmatrix, simulate_dina

VARIANTS = (
    Variant("untrained", LocalFedTraining(rounds=0, threads=1)),
    Variant("trained", LocalFedTraining(rounds=4, threads=1)),
    Variant("centralized", LocalFedTraining(rounds=4, clients=1, threads=1)),
    Variant("DP ε=2", LocalFedTraining(rounds=2, epsilon=2.0, threads=1)),
)


def test_ablation_scores_every_variant_on_the_same_responses(tmp_path: Path) -> None:
    # Prepare: SIMULATED DINA students on the example Q-matrix
    data = simulate_dina(example_qmatrix(), n_students=160, seed=5)

    # Execute
    result = run_ablation(data, seed=5, variants=VARIANTS, ncdm=None)
    written = write_ablation_report(result, tmp_path, command="fedcd evaluate --local-fed-ablation")

    # Assert: each variant twice (link, own), the baselines once, every AUC in range
    names = [(r["name"], r["scoring"]) for r in result.rows]
    for variant in VARIANTS:
        assert (variant.name, "link") in names and (variant.name, "own") in names
        assert (variant.name, "forecast") in names  # as /v1/diagnose forecasts items from the model's answer
    assert ("irt", "own") in names and ("dina", "own") in names and ("proportion-correct", "link") in names
    assert all(0.0 <= r["auc"] <= 1.0 for r in result.rows)
    dp = next(r for r in result.rows if r["name"] == "DP ε=2")
    assert dp["dp"] == "student" and 0 < dp["epsilon_spent"] <= 2.0
    untrained = next(r for r in result.rows if r["name"] == "untrained")
    assert untrained["rounds_run"] == 0
    pairs = {(c["row"], c["scoring"], c["reference"]) for c in result.comparisons}
    assert ("trained", "link", "untrained") in pairs and ("trained", "own", "irt") in pairs
    assert ("DP ε=2", "own", "trained") in pairs and ("trained", "link", "centralized") in pairs
    assert all(c["low"] <= c["diff"] <= c["high"] for c in result.comparisons)
    report = (tmp_path / "report.md").read_text()
    assert "## Targets" in report and "training adds" in report and (tmp_path / "ablation.png").stat().st_size > 0
    assert json.loads((tmp_path / "results.json").read_text())["command"] == "fedcd evaluate --local-fed-ablation"
    assert len(written) == 3


def test_evaluate_exposes_local_fed_training_options(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli, ["evaluate", "--dataset", "synthetic", "--protocol", "heldout",
                              "--local-fed-model", "magic", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "higher-order-irt" in bad.output
    assert runner.invoke(cli, ["evaluate", "--local-fed-epsilon", "-1", "--out", str(tmp_path)]).exit_code == 2


def test_dp_training_report_states_the_issue_targets(tmp_path: Path, monkeypatch) -> None:
    # Prepare: the issue-32 variants, made small (SIMULATED students, 2 rounds) so the test is quick
    import dataclasses

    import evaluation.dp_training as dp_training

    small = tuple(Variant(v.name, dataclasses.replace(v.training, rounds=min(v.training.rounds, 2), threads=1,
                                                       model="higher-order-irt"))
                  for v in dp_training.VARIANTS)
    monkeypatch.setattr(dp_training, "VARIANTS", small)

    # Execute
    result = dp_training.main(["--dataset", "synthetic", "--seed", "3", "--out", str(tmp_path)])

    # Assert: every variant scored three ways; the DP rows spent at most their ε; the report computes the targets
    names = {(r["name"], r["scoring"]) for r in result.rows}
    assert {(v.name, s) for v in small for s in ("forecast", "own", "link")} <= names
    for r in result.rows:
        if r.get("dp") == "student":
            assert 0 < r["epsilon_spent"] <= r["epsilon"] + 1e-9
    report = (tmp_path / "report.md").read_text()
    assert "DP ε=2 − untrained (forecast)" in report and "DP ε=2 − non-private (own)" in report
    assert ("met" in report or "missed" in report) and "SIMULATED" in report


def test_dp_training_pairs_name_only_its_rows_and_variants_are_chosen_by_name_or_refused() -> None:
    import argparse

    import evaluation.dp_training as dp_training

    names = {v.name for v in dp_training.VARIANTS}
    assert {n for pair in dp_training.PAIRS for n in pair} <= names  # a pair naming no row would be skipped silently
    parser = argparse.ArgumentParser()
    chosen = dp_training._chosen("untrained,DP ε=2, DP-SGD only", parser)  # a name holding ", " stays whole
    assert [v.name for v in chosen] == ["untrained", "DP ε=2, DP-SGD only"]
    with pytest.raises(SystemExit):
        dp_training._chosen("untrained,DP e=2", parser)  # a typo is refused, not skipped
