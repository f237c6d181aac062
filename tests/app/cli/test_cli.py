"""The `fedcd diagnose` command runs the same pipeline in-process and prints a table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from qmatrix import example_qmatrix, save_qmatrix

runner = CliRunner()

SMOLLM2_ONLY = json.dumps(
    [
        {
            "name": "smollm2",
            "kind": "llamacpp",
            "packaged_model": "smollm2",
            "model": "SmolLM2-135M-Instruct",
            "structured_output": "json_object",
            "concurrency": 1,
            "max_tokens": 256,
        }
    ]
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    qpath = tmp_path / "q.json"
    save_qmatrix(example_qmatrix(), qpath)
    responses = tmp_path / "responses.csv"
    responses.write_text("student_id,item_id,correct\nann,q01,1\nann,q03,0\nbob,q10,1\n")
    return qpath, responses


@pytest.mark.llm
def test_diagnose_prints_a_table_per_student(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCD_ENTITIES", SMOLLM2_ONLY)
    qpath, responses = files
    result = runner.invoke(cli, ["diagnose", "--qmatrix", str(qpath), "--responses", str(responses), "--epsilon", "2", "--show-entities"])
    assert result.exit_code == 0, result.output
    assert "student ann" in result.output and "student bob" in result.output
    assert "Add and subtract fractions" in result.output and "smollm2" in result.output


@pytest.mark.llm
def test_diagnose_json_output(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCD_ENTITIES", SMOLLM2_ONLY)
    qpath, responses = files
    result = runner.invoke(cli, ["diagnose", "--qmatrix", str(qpath), "--responses", str(responses), "--no-noise", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [r["student_id"] for r in out] == ["ann", "bob"]
    assert out[0]["privacy"]["mechanism"] == "none"
    assert set(out[1]["concepts"]) == {"Solve two-step linear equations"}


def test_unknown_items_are_refused_before_any_entity_is_asked(files: tuple[Path, Path], tmp_path: Path) -> None:
    qpath, _ = files
    bad = tmp_path / "bad.csv"
    bad.write_text("student_id,item_id,correct\nann,nope,1\n")
    result = runner.invoke(cli, ["diagnose", "--qmatrix", str(qpath), "--responses", str(bad)])
    assert result.exit_code == 2
    assert "nope" in result.output


def test_bad_options_are_refused(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    qpath, responses = files
    result = runner.invoke(cli, ["diagnose", "--qmatrix", str(qpath), "--responses", str(responses), "--epsilon", "0"])
    assert result.exit_code == 2 and "epsilon" in result.output
    monkeypatch.setenv("FEDCD_ENTITIES", SMOLLM2_ONLY)
    result = runner.invoke(cli, ["diagnose", "--qmatrix", str(qpath), "--responses", str(responses), "--entities", "ghost"])
    assert result.exit_code == 2 and "ghost" in result.output


SIMULATED_TIERS = json.dumps([
    {"name": "sim:local", "kind": "simulated", "simulated_style": "specialist", "tier": 0},
    {"name": "sim:paid", "kind": "simulated", "simulated_style": "confident"},  # tier 1 by default
])


def test_diagnose_federation_selective_asks_the_paid_tier_only_when_unsure(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDCD_ENTITIES", SIMULATED_TIERS)
    monkeypatch.setenv("FEDCD_LOCAL_FED", "false")  # only the two declared tiers (local-fed would be tier 0)
    qpath, responses = files
    args = ["diagnose", "--qmatrix", str(qpath), "--responses", str(responses), "--no-noise", "--json"]
    for threshold, asked in (("1.0", [["sim:local"]] * 2), ("0.01", [["sim:local", "sim:paid"]] * 2)):
        monkeypatch.setenv("FEDCD_SELECTIVE_THRESHOLD", threshold)
        result = runner.invoke(cli, [*args, "--federation", "selective"])
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert [[e["name"] for e in r["entities"]] for r in out] == asked
        assert all(r["federation"]["mode"] == "selective" for r in out)
    bad = runner.invoke(cli, [*args, "--federation", "some"])
    assert bad.exit_code == 2 and "federation" in bad.output
