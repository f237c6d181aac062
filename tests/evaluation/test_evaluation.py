"""The evaluation harness: splits, protocols, rows and the report files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from app.cli import cli
from qmatrix.catalog import load_dataset
from evaluation.link import fit_link
from evaluation.protocols import EvaluationConfig, evaluate
from evaluation.simulation import dina_oracle
from providers.simulated import simulated_family

FIXED_NAMES = {"simple-ensemble", "fed-nodp-rc", "fed-dp-norc", "gaussian-dp", "full", "irt", "dina", "proportion-correct"}


def test_link_recovers_a_known_logistic_relation() -> None:
    rng = np.random.default_rng(0)
    m = rng.random(5000)
    y = rng.random(5000) < 1 / (1 + np.exp(-(4 * m - 2)))
    link = fit_link(m, y)
    assert link.a == pytest.approx(4, abs=0.4) and link.b == pytest.approx(-2, abs=0.25)


def test_dina_oracle_by_hand_on_one_item() -> None:
    # One item needing concept A only; slip 0.1, guess 0.2, prior ½: P(A | correct) = 0.9/(0.9+0.2)
    from qmatrix import QMatrix

    q = QMatrix.from_matrix(id="t", concepts=["A", "B"], item_ids=["i", "j"], matrix=[[1, 0], [0, 1]])
    post = dina_oracle(q, np.array([[1.0, 0.0]]), slip=0.1, guess=0.2)
    assert post[0, 0] == pytest.approx(0.9 / 1.1) and post[0, 1] == pytest.approx(0.1 / 0.9)


@pytest.mark.parametrize("protocol", ["paper", "heldout", "simulated"])
async def test_protocols_produce_the_fixed_rows(protocol: str) -> None:
    data = load_dataset("synthetic", synthetic_students=120, seed=1)
    config = EvaluationConfig(protocol=protocol, epsilons=[1.0], seed=1, n_simulated=120)
    result = await evaluate(data, simulated_family(), config)
    names = {r.name for r in result.rows}
    assert FIXED_NAMES <= names
    assert {"single:sim:confident", "single:sim:conservative", "single:sim:specialist"} <= names
    assert result.split["test"] > 0 and all(r.n > 0 for r in result.rows)
    if protocol == "heldout":
        assert all(0.0 <= r.auc <= 1.0 for r in result.rows if r.auc is not None)
    else:
        assert all(0.0 <= r.mae <= 1.0 for r in result.rows)
    if protocol == "paper":  # the paper's truth is this estimator: MAE exactly 0
        assert next(r for r in result.rows if r.name == "proportion-correct").mae == 0.0
    if protocol == "simulated":
        oracle = {r.generator: r.mae for r in result.rows if r.name == "oracle"}
        assert set(oracle) == {"dina", "irt"}
        dina_rows = [r for r in result.rows if r.generator == "dina" and r.name != "oracle"]
        assert min(r.mae for r in dina_rows) >= oracle["dina"] - 0.05  # nothing beats the ceiling by much
    assert any("SIMULATED" in note for note in result.notes)


async def test_noise_hurts_on_average_and_calibration_helps_without_noise() -> None:
    data = load_dataset("synthetic", synthetic_students=300, seed=2)
    result = await evaluate(data, simulated_family(), EvaluationConfig(protocol="paper", epsilons=[0.5], seed=2))
    row = {(r.name, r.epsilon): r for r in result.rows}
    assert row[("fed-dp-norc", 0.5)].mae > row[("simple-ensemble", None)].mae
    assert row[("fed-nodp-rc", None)].mae < row[("simple-ensemble", None)].mae


def test_evaluate_command_writes_results_report_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        cli, ["evaluate", "--dataset", "synthetic", "--protocol", "paper", "--epsilons", "1,inf", "--out", str(out), "--max-students", "100"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert set(data) >= {"dataset", "protocol", "n_students", "seed", "rows"}
    assert set(data["rows"][0]) >= {"name", "epsilon", "mae", "rmse", "auc", "acc", "ece", "n"}
    report = (out / "report.md").read_text()
    assert "Table 2" in report and "Table 3" in report and "Table 4" in report and "fedcd evaluate" in report
    for png in ("privacy_utility.png", "reliability.png", "concept_error_heatmap.png"):
        assert (out / png).stat().st_size > 1000


def test_evaluate_command_refuses_bad_options(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["evaluate", "--protocol", "magic"]).exit_code == 2
    assert runner.invoke(cli, ["evaluate", "--dataset", str(tmp_path)]).exit_code == 2
    assert runner.invoke(cli, ["evaluate", "--dataset", "synthetic", "--entities", "ghost"]).exit_code == 2
    assert runner.invoke(cli, ["evaluate", "--dataset", "synthetic", "--epsilons", "-1"]).exit_code == 2


def test_privacy_frontier_command_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "frontier"
    result = CliRunner().invoke(cli, ["evaluate", "--privacy-frontier", "--datasets", "synthetic", "--epsilons", "1,8",
                                      "--mechanisms", "laplace,piecewise", "--repeats", "1", "--n-simulated", "80", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "frontier.json").is_file() and (out / "frontier_mae.png").stat().st_size > 1000
    assert "--privacy-frontier" in (out / "report.md").read_text()
    bad = CliRunner().invoke(cli, ["evaluate", "--privacy-frontier", "--mechanisms", "magic", "--out", str(out)])
    assert bad.exit_code == 2


def test_the_served_rows_follow_the_server_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: a server whose defaults differ from the shipped ones.
    monkeypatch.setenv("FEDCD_DEFAULT_EPSILON", "16")
    monkeypatch.setenv("FEDCD_DEFAULT_MECHANISM", "duchi")
    monkeypatch.setenv("FEDCD_SENSITIVITY", "assessed")
    out = tmp_path / "served"
    # Execute
    result = CliRunner().invoke(cli, ["evaluate", "--dataset", "synthetic", "--protocol", "heldout", "--epsilons", "2,inf",
                                      "--max-students", "100", "--out", str(out)])
    # Assert: the served row is privatized as that server would privatize, and the report says how it compares.
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    served = [r for r in data["rows"] if r["name"] == "served"]
    assert {(r["epsilon"], r["mechanism"]) for r in served} == {(16.0, "duchi"), (None, "none")}
    assert data["served"]["config"]["noise"] == {"mechanism": "duchi", "epsilon": 16.0, "sensitivity": "assessed"}
    assert data["significance"] and "ncdm" in {r["name"] for r in data["rows"]}
    report = (out / "report.md").read_text()
    assert "Significance" in report and "Targets" in report and "--ncdm-batch-size" in report
    assert ("`FEDCD_DEFAULT_MECHANISM=duchi FEDCD_DEFAULT_EPSILON=16.0 FEDCD_SENSITIVITY=assessed "
            "FEDCD_DEFAULT_CALIBRATION_METHOD=stacking fedcd evaluate") in report  # reproducible whatever the defaults
