"""`fedcd bench first-request`: it runs (a real gateway on loopback, a fresh state folder, the first-start
calibration job read from its database) with one SIMULATED entity, and its report and summary are right on known
data. No latency is asserted: that is what the bench measures (issue 20, items 1 and 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.cli import cli
from app.cli.serve import _CURL
from bench.first_request import (
    FIRST_CURL_BODY,
    _summary,
    job_window,
    later_bodies,
    seconds_summary,
    write_first_request_report,
)


def test_fedcd_bench_first_request_runs_and_reports(tmp_path: Path) -> None:
    # Execute: the smoke configuration (one SIMULATED entity), the same phases as the measured run
    result = CliRunner().invoke(cli, ["bench", "first-request", "--simulated", "--later", "2",
                                      "--after-calibration", "2", "--max-seconds", "120", "--out", str(tmp_path)])

    # Assert: every request answered with its own student; the calibration job was found and finished; the gateway
    # was stopped; the report names the command and says this was not the measured configuration
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "results.json").read_text())
    requests = data["requests"]
    assert [r["phase"] for r in requests] == ["first", "later", "later", "after", "after"]
    assert all(r["status"] == 200 for r in requests), requests
    assert requests[0]["student_id"] == "demo-student" and len({r["student_id"] for r in requests}) == 5
    assert all(r["entities"]["sim:confident"]["status"] == "ok" for r in requests)
    assert all(r["entities"]["sim:confident"]["cache"] != "hit" for r in requests)  # each its own responses
    assert data["calibration"]["at_ready"]["job_id"] and requests[-1]["calibration_after"] == "succeeded"
    assert data["summary"]["first_status"] == 200 and data["summary"]["all_later"]["requests"] == 4
    assert data["gateway_exit_code"] == 0
    report = (tmp_path / "README.md").read_text()
    assert "fedcd bench first-request --later 2 --after-calibration 2 --max-seconds 120" in report
    assert "NOT the measured configuration" in report and "| first | demo-student | 200 |" in report


def test_the_first_request_is_the_readme_curl() -> None:
    body = json.loads(_CURL.split("-d '", 1)[1].rsplit("'", 1)[0].replace("{{", "{").replace("}}", "}")
                      .replace("{qid}", "example-prealgebra"))
    assert body == FIRST_CURL_BODY


def test_later_requests_differ_in_student_and_responses() -> None:
    bodies = later_bodies(10, prefix="s", seed=3)
    responses = {json.dumps(b["responses"]) for b in bodies}
    assert len(responses) == 10 and json.dumps(FIRST_CURL_BODY["responses"]) not in responses
    assert len({b["student_id"] for b in bodies}) == 10
    assert all(len(b["responses"]) == 3 and b["qmatrix_id"] == "example-prealgebra" and b["include_entities"]
               for b in bodies)
    assert later_bodies(10, prefix="s", seed=3) == bodies  # deterministic


def _request(phase: str, seconds: float, *, sent_at: float, status: int = 200, overlapped: bool = False,
             gemma: str = "ok") -> dict[str, Any]:
    return {"phase": phase, "student_id": f"{phase}-{seconds}", "responses": ["q01:1"], "status": status,
            "seconds": seconds, "sent_at": sent_at, "answered_at": sent_at + seconds, "calibration_before": "running",
            "calibration_after": "running", "calibration_id": None, "error": None, "loadavg_1m": 1.0,
            "overlapped_calibration": overlapped,
            "entities": {"smollm2": {"status": "ok", "reason": None, "latency_ms": 900.0, "cache": "miss"},
                         "gemma3": {"status": gemma, "reason": None if gemma == "ok" else "timeout",
                                    "latency_ms": 1000.0, "cache": "miss"}}}


def test_the_summary_compares_the_first_request_with_the_later_ones(tmp_path: Path) -> None:
    requests = [
        _request("first", 6.0, sent_at=0, overlapped=True, gemma="failed"),
        _request("later", 2.0, sent_at=10, overlapped=True), _request("later", 4.0, sent_at=20, overlapped=False),
        _request("later", 9.0, sent_at=30, status=503),
        _request("after", 1.0, sent_at=40), _request("after", 3.0, sent_at=50),
    ]
    summary = _summary(requests)
    assert summary["first_s"] == 6.0 and summary["first_overlapped_calibration"] is True
    assert summary["later"] == {"requests": 2, "p50_s": 2.0, "min_s": 2.0, "max_s": 4.0}  # the 503: not timed
    assert summary["later_during_calibration"]["requests"] == 1
    assert summary["all_later"] == {"requests": 4, "p50_s": 3.0, "min_s": 1.0, "max_s": 4.0}
    assert summary["first_over_later_p50"] == 2.0 and summary["errors"] == 1
    assert summary["entity_outcomes"] == {"smollm2": {"ok": 6}, "gemma3": {"ok": 5, "failed (timeout)": 1}}
    assert seconds_summary([]) == {"requests": 0, "p50_s": None, "min_s": None, "max_s": None}

    data = {"config": {"simulated": False, "revision": None, "max_seconds": 60.0}, "revision": "abc1234",
            "machine": {"cpus": 2, "python": "3.11", "loadavg_before": [1.0, 1.0, 1.0], "loadavg_after": None},
            "start_up_s": 9.0, "calibration": {"at_ready": {"job_id": "j", "status": "running", "done": 0, "total": 24},
                                                "events": [], "ran_s": 200.0, "waited_for_s": 100.0},
            "requests": requests, "summary": summary, "notes": ["max_seconds reached"], "gateway_exit_code": 0,
            "log_excerpt": ["INFO calibration fitted"], "logs": "/tmp/x"}
    paths = write_first_request_report(data, tmp_path, command="fedcd bench first-request --out x")
    report = (tmp_path / "README.md").read_text()
    assert "**First request: 6.00 s**" in report and "first / later p50 = 2.00" in report
    assert "the DEFAULT configuration" in report and "gemma3 failed (timeout) 1.0 s" in report
    assert "Notes: max_seconds reached." in report and "INFO calibration fitted" in report
    assert "logs" not in json.loads(paths[0].read_text())


def test_the_job_window_comes_from_its_events() -> None:
    events = [{"at": "2026-01-01T00:00:00+00:00", "status": "queued"},
              {"at": "2026-01-01T00:00:01+00:00", "status": "running"},
              {"at": "2026-01-01T00:03:21+00:00", "status": "succeeded"}]
    started, finished = job_window(events)
    assert started is not None and finished is not None and finished - started == 200.0
    assert job_window(events[:2])[1] is None and job_window([]) == (None, None)
