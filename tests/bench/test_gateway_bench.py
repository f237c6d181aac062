"""`fedcd bench gateway` end to end at a tiny size (real stub servers, real gateways of this checkout and of the
previous commit, loopback only), and its report's comparison and target verdicts on known numbers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import BenchSetupError, GatewayBenchConfig, run_gateway_bench, write_gateway_report
from bench.report import write_gateway_report as write_report

ROOT = Path(__file__).resolve().parents[2]


def _has_previous_commit() -> bool:
    if shutil.which("git") is None:
        return False
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", "HEAD~1"], capture_output=True)
    return found.returncode == 0


def test_the_bench_runs_every_scenario_and_writes_its_report(tmp_path: Path) -> None:
    baseline = "HEAD~1" if _has_previous_commit() else None
    config = GatewayBenchConfig(
        entities=2, stub_latency_ms=5.0, requests_c1=10, requests_cmax=10, concurrency=3, batches=2, batch_size=2,
        repeats=10, big_items=50, sdk_calls=10, max_seconds=60.0, baseline=baseline,
    )
    data = run_gateway_bench(config)
    fedcd = [r for r in data["results"] if r["target"] == "fedcd"]
    assert len(fedcd) == 5 and all(r["ok"] == r["requests"] and r["errors"] == 0 for r in fedcd), fedcd
    assert all(r["cpu_ms_per_request"] > 0 and r["p50_ms"] > 0 for r in fedcd)
    assert [r["target"] for r in data["results"]].count("sdk") == 1
    if baseline:
        assert sum(r["target"] == f"fedcd@{baseline}" for r in data["results"]) == 5
    paths = write_gateway_report(data, tmp_path, command="fedcd bench gateway …")
    report = (tmp_path / "report.md").read_text()
    assert "## Targets (issue 12)" in report and {p.name for p in paths} >= {"results.json", "report.md"}
    assert ("take turns on each scenario" in report) == bool(baseline)  # the two gateways alternate
    assert json.loads((tmp_path / "results.json").read_text())["config"]["entities"] == 2


def _row(target: str, name: str, cpu: float, *, concurrency: int = 1, added: float = 5.0, rps: float = 10.0,
         per: str = "diagnosis") -> dict[str, Any]:
    return {"target": target, "name": name, "ok": 10, "requests": 10, "p50_ms": 55.0, "p90_ms": 60.0,
            "p99_ms": 70.0, "added_p50_ms": added, "throughput_rps": rps, "cpu_ms_per_request": cpu, "per": per,
            "concurrency": concurrency}


def test_the_report_compares_with_the_baseline_and_states_each_target(tmp_path: Path) -> None:
    config = {"entities": 3, "stub_latency_ms": 50.0, "workers": 1, "ledger": True, "database_url": None,
              "big_items": 2000, "baseline": "v0"}
    rows = [
        _row("fedcd", "diagnosis, 12-item Q-matrix, c=1", 12.0, added=6.0),
        _row("fedcd", "diagnosis, 12-item Q-matrix, c=50", 12.0, concurrency=50, rps=90.0),
        _row("fedcd", "diagnosis, 2000-item Q-matrix, c=1", 14.0),
        _row("fedcd", "identical request again (repeat path), c=1", 2.5),
        _row("fedcd@v0", "diagnosis, 12-item Q-matrix, c=1", 36.0),
        _row("sdk", "one entity call", 2.0, per="call"),
        _row("litellm", "one pass-through call, c=1", 30.0, per="call"),
    ]
    write_report({"config": config, "machine": {"cpus": 2, "python": "3.11"}, "results": rows}, tmp_path, command="x")
    report = (tmp_path / "report.md").read_text()
    assert "| diagnosis, 12-item Q-matrix, c=1 | 36.00 | 12.00 | 0.33 |" in report
    verdicts = {line.split(" | ")[0].lstrip("| "): line.rsplit(" | ", 1)[1].rstrip(" |")
                for line in report.splitlines() if line.count(" | ") == 4 and not line.startswith("| target")}
    assert verdicts["CPU per diagnosis (ledger on)"] == "met"
    assert verdicts["CPU outside the entity calls"] == "missed by 3"  # 12 − 3 × 2 = 6 > 3
    assert verdicts["flat in Q-matrix size (2000 vs 12 items)"].startswith("missed by 0.0667")
    assert verdicts["throughput per worker"] == "met"
    assert verdicts["repeat path"] == "missed by 0.5"
    assert verdicts["fedcd's diagnosis below LiteLLM's one call"] == "met"


@pytest.mark.parametrize("option", [["--profile"], ["--compare-litellm", "--litellm-command", "/nonexistent/litellm"]])
def test_a_missing_tool_is_a_clear_error_not_a_traceback(option: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    if option == ["--profile"]:
        monkeypatch.setattr("bench.gateway.py_spy_command", lambda: None)
    result = CliRunner().invoke(cli, ["bench", "gateway", "--requests", "10", "--requests-concurrent", "10",
                                      "--concurrency", "2", "--out", "/tmp/unused-bench", *option])
    assert result.exit_code == 2, result.output
    assert "py-spy" in result.output or "litellm" in result.output.lower()


def test_a_scenario_is_split_into_near_equal_turns_for_two_gateways() -> None:
    from bench.gateway import _chunks

    assert _chunks(10, 4) == [3, 3, 2, 2] and _chunks(3, 4) == [1, 1, 1] and _chunks(1000, 1) == [1000]
    assert all(sum(_chunks(n, rounds)) == n for n in (1, 7, 50, 2001) for rounds in (1, 2, 4, 9))


def test_two_gateways_at_once_refuse_one_shared_database() -> None:
    config = GatewayBenchConfig(baseline="HEAD", database_url="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    with pytest.raises(BenchSetupError, match="its own database"):
        run_gateway_bench(config)


def test_litellm_takes_turns_with_the_gateway_and_every_turn_is_kept(tmp_path: Path) -> None:
    # a stand-in for the `litellm` command (tests/bench/fake_litellm.py): the turns, not LiteLLM, are under test
    command = tmp_path / "litellm"
    command.write_text(f"#!/bin/sh\nexec {sys.executable} -m tests.bench.fake_litellm \"$@\"\n")
    command.chmod(0o755)
    config = GatewayBenchConfig(
        entities=2, stub_latency_ms=5.0, requests_c1=8, requests_cmax=8, concurrency=2, batches=2, batch_size=2,
        repeats=10, big_items=50, sdk_calls=10, max_seconds=60.0, compare_litellm=True, litellm_command=str(command),
        rounds=2,
    )

    data = run_gateway_bench(config)

    litellm = [r for r in data["results"] if r["target"] == "litellm"]
    assert [r["concurrency"] for r in litellm] == [1, 2] and all(r["ok"] == 8 and r["per"] == "call" for r in litellm)
    fedcd_c1 = next(r for r in data["results"] if r["target"] == "fedcd" and r["name"].endswith("c=1")
                    and "12-item" in r["name"])
    assert len(fedcd_c1["turns"]) == len(litellm[0]["turns"]) == 2  # both measured in the same two turns
    write_gateway_report(data, tmp_path, command="fedcd bench gateway --compare-litellm …")
    report = (tmp_path / "report.md").read_text()
    assert "turn by turn" in report and "## Targets (issue 36)" in report
    # the rest of the machine's CPU is read in every turn: the stubs the gateway called and this load generator
    for row in (fedcd_c1, litellm[0]):
        assert all(t["upstream_cpu_ms_per_request"] >= 0 and t["client_cpu_ms_per_request"] >= 0
                   for t in row["turns"])
    assert "### Where the machine's CPU went" in report


def test_the_report_says_where_the_machines_cpu_went_per_turn(tmp_path: Path) -> None:
    """Busy CPUs = (server + stubs + load generator) ms per request × requests/s, per turn, median over turns."""
    config = {"entities": 3, "stub_latency_ms": 50.0, "workers": 1, "ledger": True, "database_url": None,
              "big_items": 2000, "baseline": None}

    def turns(server: float, stubs: float, client: float, rps: tuple[float, float]) -> list[dict[str, float]]:
        return [{"cpu_ms_per_request": server, "upstream_cpu_ms_per_request": stubs,
                 "client_cpu_ms_per_request": client, "throughput_rps": r, "load1": 0.5} for r in rps]

    fedcd = {**_row("fedcd", "diagnosis, 12-item Q-matrix, c=50", 5.0, concurrency=50, rps=120.0),
             "upstream_cpu_ms_per_request": 6.0, "client_cpu_ms_per_request": 2.0,
             "turns": turns(5.0, 6.0, 2.0, (100.0, 140.0))}
    litellm = {**_row("litellm", "one pass-through call, c=50", 10.0, concurrency=50, rps=100.0, per="call"),
               "upstream_cpu_ms_per_request": 2.0, "client_cpu_ms_per_request": 2.0,
               "turns": turns(10.0, 2.0, 2.0, (100.0, 100.0))}
    write_report({"config": config, "machine": {"cpus": 2, "python": "3.11"}, "results": [fedcd, litellm]},
                 tmp_path, command="x")
    report = (tmp_path / "report.md").read_text()
    assert "### Where the machine's CPU went" in report and "out of 2 on this machine" in report
    # fedcd: 13 ms × 100/s = 1.3 and × 140/s = 1.82 CPUs; LiteLLM: 14 ms × 100/s = 1.4 in both turns
    assert ("| c=50 | fedcd, per diagnosis | 5.00 (5.00–5.00) | 6.00 (6.00–6.00) | 2.00 (2.00–2.00) | "
            "1.56 (1.30–1.82) |") in report
    assert ("| c=50 | LiteLLM, per call | 10.00 (10.00–10.00) | 2.00 (2.00–2.00) | 2.00 (2.00–2.00) | "
            "1.40 (1.40–1.40) |") in report
    # runs from before the stubs' CPU was read keep their report, without the table
    old = {k: v for k, v in fedcd.items() if k not in ("upstream_cpu_ms_per_request", "client_cpu_ms_per_request",
                                                       "turns")}
    machine = {"cpus": 2, "python": "3.11"}
    write_report({"config": config, "machine": machine, "results": [old, {**litellm, "turns": []}]}, tmp_path,
                 command="x")
    assert "Where the machine's CPU went" not in (tmp_path / "report.md").read_text()
