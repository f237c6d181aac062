"""The report's thin-evidence guide reads the interval the diagnosis served (issue 33, part 4): under a stacking
calibration, its measured spread — whose base no number of answers removes, said plainly where it keeps the interval
wider than the report's threshold — and the Beta guide for any other interval."""

from __future__ import annotations

import io
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import Settings, create_app
from app.presentation.report import _png_figure, _thin_note, report_html, report_svg
from app.schemas import DiagnoseResponse, IntervalSpread
from app.schemas.students import StoredDiagnosis
from app.services.report import MAX_MORE, THIN, build_report
from diagnosis.measured import MeasuredError, answers_to_narrow, measured_intervals
from tests.app.console.test_console import csrf, sign_in
from tests.app.waiting import finished_job
from tests.conftest import auth_headers

SMALL = MeasuredError(base=0.1, per_answer=2.0, rows=100)  # at 0.5, the base alone gives a 0.25-wide interval
LARGE = MeasuredError(base=0.6, per_answer=2.0, rows=100)  # at 0.5, the base alone gives a 0.56-wide interval
MASTERY, EVIDENCE = {"fractions": 0.5, "ratios": 0.9}, {"fractions": 2, "ratios": 40}


def _stored(error: MeasuredError | None, *, spread: bool = True) -> StoredDiagnosis:
    """A stored diagnosis as the gateway keeps it: a response dumped to JSON, with measured intervals (``error``) and,
    unless ``spread`` is False (a diagnosis stored before the field), the spread they were served with."""
    intervals = measured_intervals(MASTERY, error, EVIDENCE) if error is not None else None
    response = DiagnoseResponse(
        student_id="s", qmatrix_id="example-prealgebra", mastery=MASTERY, evidence=EVIDENCE,
        privacy={"mechanism": "none", "epsilon": None, "sensitivity": None, "noise_scale": 0.0,
                 "sensitivity_mode": "paper"}, mastery_interval=intervals,
        interval_level=0.9 if intervals else None, calibration_id="cal-1", request_id="r", latency_ms=1.0,
        interval_spread=IntervalSpread.of(error) if spread else None,
    )
    body: dict[str, Any] = response.model_dump(mode="json")
    return StoredDiagnosis(charge_id="c", created_at="2026-12-01T00:00:00Z", diagnosis=body)


def test_the_guide_counts_the_answers_that_narrow_the_served_measured_interval() -> None:
    # Execute
    report = build_report(_stored(SMALL), None)
    fractions, ratios = report.concepts
    html, svg = report_html(report), report_svg(report)

    # Assert: the number is the measured narrowing's, not the Beta guide's; the narrow concept is not thin
    expected = answers_to_narrow(0.5, 2, THIN, SMALL).more
    assert expected is not None and expected <= MAX_MORE and fractions.thin and not ratios.thin
    assert fractions.more_answers == expected and fractions.narrowest is None
    assert f"about {expected} more answers on it would narrow it" in html and f"+{expected} answers" in svg
    before = _stored(SMALL, spread=False)
    assert build_report(before, None).concepts[0].more_answers != expected  # the Beta guide said otherwise


def test_when_the_calibrations_own_error_keeps_it_wide_the_report_says_so() -> None:
    # Execute
    report = build_report(_stored(LARGE), None)
    fractions = report.concepts[0]
    html, svg = unescape(report_html(report)), unescape(report_svg(report))

    # Assert: no count, the floor said in the table, the chart's row and its legend
    floor = answers_to_narrow(0.5, 2, THIN, LARGE).floor
    assert fractions.thin and fractions.more_answers is None and fractions.narrowest == floor
    assert (f"more answers alone will not narrow this below ±{THIN / 2:g}: the calibration's own error keeps it at "
            f"least {floor:.2f} wide") in html
    assert f"thin: stays ≥ {floor:.2f} wide" in svg and "more answers alone will not narrow it below" in svg
    assert "more answers on it would narrow it" not in html and "+N" in svg
    label = _png_figure(report).axes[0].get_xlabel()
    assert "more answers alone will not narrow fractions below ±0.15" in label
    buffer = io.BytesIO()
    _png_figure(report).savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")


def test_a_diagnosis_without_the_spread_keeps_the_beta_guide() -> None:
    # Prepare: the same wide measured interval, stored before interval_spread existed
    report = build_report(_stored(LARGE, spread=False), None)
    fractions = report.concepts[0]

    # Assert: a count (the Beta guide's), no claim about a floor, no second legend line
    assert fractions.thin and fractions.narrowest is None and fractions.more_answers is not None
    assert "calibration's own error" not in unescape(report_html(report)) and "stays ≥" not in report_svg(report)


def test_a_stacked_diagnosis_served_with_its_spread_is_reread_by_the_report(tmp_path: Path) -> None:
    # Prepare: a stacking calibration of two SIMULATED entities on validation students whose truth is their share of
    # correct answers (no trained model), then a student diagnosed with it
    entities = [{"name": f"sim:{style}", "kind": "simulated", "simulated_style": style, "seed": 1}
                for style in ("confident", "conservative")]
    settings = Settings(state_dir=tmp_path, entities=entities, preload_models=False,  # type: ignore[arg-type]
                        default_calibration=False, train_default_model=False, allow_unnoised=True,
                        local_fed=False, calibration_release_epsilon=None)  # a DP-released stack measures no error
    app = create_app(settings)
    with TestClient(app, headers=auth_headers(app)) as client:
        r = client.post("/v1/calibrate", json={"qmatrix_id": "example-prealgebra", "epsilon": "none",
                                               "method": "stacking", "records": _validation_records(40)})
        assert r.status_code == 202, r.text
        job = finished_job(client, r.json()["job_id"], path="/v1/calibrate/{job_id}")
        assert job["status"] == "succeeded", job
        body = {"student_id": "s-1", "qmatrix_id": "example-prealgebra",  # the default noise: a charge, stored
                "calibration_id": job["calibration_id"],
                "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q02", "correct": False}]}

        # Execute
        diagnosis = client.post("/v1/diagnose", json=body)
        page = client.get("/v1/students/s-1/report", params={"qmatrix_id": "example-prealgebra"})
        sign_in(client)  # the console's student page draws the same chart
        console = client.post("/console/students", data={"csrf": csrf(client), "student_id": "s-1"})

    # Assert: measured intervals come with their spread, and the report's guide reads that spread
    assert diagnosis.status_code == 200, diagnosis.text
    served = diagnosis.json()
    assert served["mastery_interval"] and served["interval_spread"]["kind"] == "measured", served
    spread = served["interval_spread"]
    error = MeasuredError(base=spread["base"], per_answer=spread["per_answer"], rows=1)
    for concept, (low, high) in served["mastery_interval"].items():
        own = measured_intervals({concept: served["mastery"][concept]}, error, served["evidence"])[concept]
        assert (low, high) == pytest.approx(own)
    report = build_report(StoredDiagnosis(charge_id="c", created_at="t", diagnosis=served), None)
    for line in report.concepts:
        if line.thin:
            narrowing = answers_to_narrow(line.mastery, line.evidence or 0, THIN, error)
            assert (line.more_answers, line.narrowest) == (
                (narrowing.more, None) if narrowing.more is not None else (None, narrowing.floor))
    thin = [line for line in report.concepts if line.thin]
    assert thin and page.status_code == 200
    assert all(line.more_text in unescape(page.text) for line in thin)
    chart = unescape(console.text)
    assert console.status_code == 200 and all(_thin_note(line) in chart for line in thin)


def _validation_records(n: int) -> list[dict[str, object]]:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    return [{"student_id": f"v{s}", "responses": [{"item_id": i, "correct": bool((s >> k) & 1)}
                                                  for k, i in enumerate(items)]} for s in range(n)]
