"""What a bench measured in turns says (``bench.turns``), and the report's LiteLLM comparison and issue-36 targets
from rows with known per-turn readings: medians of per-turn ratios, their range, and which verdicts are noise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.load import Measured, Target, scenario_result
from bench.report import write_gateway_report
from bench.turns import per_turn_ratio, spread, verdict


def _turns(cpu: list[float], rps: list[float]) -> list[dict[str, float | None]]:
    return [{"cpu_ms_per_request": c, "throughput_rps": r, "load1": 1.0} for c, r in zip(cpu, rps, strict=True)]


def _row(target: str, name: str, concurrency: int, cpu: list[float], rps: list[float], per: str) -> dict[str, Any]:
    return {"target": target, "name": name, "ok": 10, "requests": 10, "p50_ms": 55.0, "p90_ms": 60.0, "p99_ms": 70.0,
            "added_p50_ms": 5.0, "throughput_rps": sum(rps) / len(rps), "cpu_ms_per_request": sum(cpu) / len(cpu),
            "per": per, "concurrency": concurrency, "turns": _turns(cpu, rps)}


def test_a_ratio_is_taken_turn_by_turn_so_a_drift_shared_by_both_cancels() -> None:
    # the machine slows down 3× over the run; fedcd costs half of LiteLLM in every turn
    fedcd = _row("fedcd", "d", 1, [2.0, 4.0, 6.0], [10, 10, 10], "diagnosis")
    litellm = _row("litellm", "c", 1, [4.0, 8.0, 12.0], [10, 10, 10], "call")

    ratio = per_turn_ratio(fedcd, litellm, "cpu_ms_per_request")

    assert ratio is not None and (ratio.median, ratio.low, ratio.high, ratio.turns) == (0.5, 0.5, 0.5, 3)


def test_a_verdict_says_when_the_turns_range_reaches_the_bound() -> None:
    inside, outside = spread([0.45, 0.55, 0.6]), spread([0.6, 0.7, 0.8])
    assert inside is not None and outside is not None

    assert verdict(inside, 0.5).startswith("missed by 0.05") and "inside the noise" in verdict(inside, 0.5)
    assert "outside the noise" in verdict(outside, 0.5)
    above = spread([2.5, 2.6, 3.0])
    assert above is not None and verdict(above, 2.0, lower_is_better=False) == "met; in every turn"


def test_rows_measured_in_chunks_keep_each_turn() -> None:
    measured = Measured()
    for cpu_s, ok in ((0.2, 20), (0.6, 20)):
        measured.add(Measured(latencies=[0.05] * ok, ok=ok, wall_s=2.0, cpu_s=cpu_s, load1=1.5))

    row = scenario_result(Target("fedcd", 1, "key"), "d", measured, concurrency=1, stub_latency_ms=50.0)

    assert [t["cpu_ms_per_request"] for t in row.turns] == [10.0, 30.0] and row.cpu_ms_per_request == 20.0
    assert [t["throughput_rps"] for t in row.turns] == [10.0, 10.0] and row.turns[0]["load1"] == 1.5


def test_the_report_compares_with_litellm_and_states_issue_36s_targets(tmp_path: Path) -> None:
    config = {"entities": 3, "stub_latency_ms": 50.0, "workers": 1, "ledger": True, "database_url": None,
              "big_items": 2000, "compare_litellm": True, "rounds": 2}
    rows = [
        _row("fedcd", "diagnosis, 12-item Q-matrix, c=1", 1, [4.0, 6.0], [15, 15], "diagnosis"),
        _row("fedcd", "diagnosis, 12-item Q-matrix, c=50", 50, [3.0, 3.0], [100, 90], "diagnosis"),
        _row("fedcd", "identical request again (repeat path), c=1", 1, [2.0, 4.0], [300, 300], "diagnosis"),
        _row("litellm", "one pass-through call, c=1", 1, [10.0, 10.0], [15, 15], "call"),
        _row("litellm", "one pass-through call, c=50", 50, [9.0, 10.0], [40, 50], "call"),
    ]
    data = {"config": config, "machine": {"cpus": 2, "python": "3.11"}, "results": rows, "litellm_version": "1.2.3"}

    write_gateway_report(data, tmp_path, command="x")

    report = (tmp_path / "report.md").read_text()
    assert "LiteLLM's proxy 1.2.3" in report and "take turns" not in report  # no baseline here
    assert "| c=1 | 5.00 (4.00–6.00) | 10.00 (10.00–10.00) | 0.50 (0.40–0.60) |" in report
    verdicts = {line.split(" | ")[0].lstrip("| "): line.rsplit(" | ", 1)[1].rstrip(" |")
                for line in report.splitlines() if line.count(" | ") == 4}
    assert verdicts["CPU per diagnosis ≤ half LiteLLM's per call, c=1"].startswith("met; inside the noise")
    assert verdicts["CPU per diagnosis ≤ half LiteLLM's per call, c=50"] == "met; in every turn"  # 0.33, 0.30
    assert verdicts["diagnoses/s ≥ 2 × LiteLLM's calls/s, c=50"].startswith("met; inside the noise")  # 2.5 and 1.8
    assert verdicts["repeat path ≤ 3 ms CPU"].startswith("met; inside the noise")  # 2 and 4 ms: median 3


def test_a_turn_whose_divisor_read_zero_gives_no_ratio_and_the_report_still_writes(tmp_path: Path) -> None:
    # a server so cheap that a short turn's CPU is below the clock's tick reads 0 ms
    fedcd = _row("fedcd", "diagnosis, 12-item Q-matrix, c=1", 1, [4.0, 6.0], [15, 15], "diagnosis")
    litellm = _row("litellm", "one pass-through call, c=1", 1, [0.0, 0.0], [15, 15], "call")
    assert per_turn_ratio(fedcd, litellm, "cpu_ms_per_request") is None

    config = {"entities": 3, "stub_latency_ms": 50.0, "workers": 1, "ledger": True, "database_url": None,
              "big_items": 2000, "compare_litellm": True, "rounds": 2}
    write_gateway_report({"config": config, "machine": {"cpus": 2, "python": "3.11"}, "results": [fedcd, litellm]},
                         tmp_path, command="x")

    report = (tmp_path / "report.md").read_text()
    assert "| c=1 | 5.00 (4.00–6.00) | 0.00 (0.00–0.00) | – |" in report
    assert "CPU per diagnosis ≤ half LiteLLM's per call, c=1" not in report  # no value, no verdict
