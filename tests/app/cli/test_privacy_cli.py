"""`fedcd privacy budget`: the numbers docs/privacy.md quotes for the default policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli


@pytest.mark.parametrize("entities,per_day,per_year", [(3, 5, 175_200.0), (6, 2, 140_160.0)])
def test_the_default_policy_in_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entities: int,
                                       per_day: int, per_year: float) -> None:
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path))
    result = CliRunner().invoke(cli, ["privacy", "budget", "--entities", str(entities), "--json"])
    assert result.exit_code == 0, result.output
    numbers = json.loads(result.output)
    assert numbers["epsilon_per_diagnosis"] == 32.0 * entities and numbers["cap_epsilon"] == 480.0
    assert numbers["diagnoses_per_day"] == per_day and numbers["epsilon_per_year"] == per_year
    assert numbers["period"] == "rolling" and numbers["sensitivity"] == "assessed"
    assert numbers["entity_names"] is None  # --entities: a size, not the configured federation
