"""`fedcd bench healthz` at a tiny size: it runs (a real gateway on loopback, real uploads), and reports
percentiles. No latency value is asserted: that is what the bench is for (issue 20, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from app.cli import cli
from bench.healthz import latency_summary, qmatrix_csv

KEYS = {"probes", "errors", "p50_ms", "p95_ms", "p99_ms", "max_ms"}


def test_fedcd_bench_healthz_runs_and_reports_percentiles(tmp_path: Path) -> None:
    # Execute
    result = CliRunner().invoke(cli, ["bench", "healthz", "--items", "300", "--concepts", "12", "--uploads", "3",
                                      "--concurrency", "2", "--idle-probes", "5", "--max-seconds", "120",
                                      "--out", str(tmp_path)])

    # Assert: both phases measured, every upload stored, and the report names the percentiles and the command
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "results.json").read_text())
    idle, loaded = data["idle"], data["during_uploads"]
    assert KEYS <= set(idle) and KEYS <= set(loaded)
    assert idle["probes"] == 5 and idle["errors"] == 0 and loaded["probes"] >= 1 and loaded["errors"] == 0
    for phase in (idle, loaded):
        assert 0 < phase["p50_ms"] <= phase["p95_ms"] <= phase["p99_ms"] <= phase["max_ms"]
    assert data["uploads"] == {**data["uploads"], "sent": 3, "statuses": {"201": 3}, "abandoned_threads": 0}
    report = (tmp_path / "README.md").read_text()
    assert "| p50 ms | p95 ms | p99 ms | max ms |" in report and "while uploads are in flight" in report
    assert "fedcd bench healthz --items 300 --concepts 12 --uploads 3" in report


def test_the_summary_is_nearest_rank_and_empty_safe() -> None:
    summary = latency_summary([i / 1000 for i in range(1, 101)], errors=2)
    assert summary == {"probes": 100, "errors": 2, "p50_ms": 51.0, "p95_ms": 95.0, "p99_ms": 99.0, "max_ms": 100.0}
    assert latency_summary([]) == {"probes": 0, "errors": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None,
                                   "max_ms": None}


def test_the_upload_is_a_wide_qmatrix_csv() -> None:
    lines = qmatrix_csv(4, 2).splitlines()
    assert lines[0] == "item_id,text,c000,c001" and len(lines) == 5
    assert all(line.endswith(",1,1") for line in lines[1:])  # fewer concepts than 3: every item has them all
