"""The teacher's report (issue 24, part 2): from the latest stored diagnosis of a student on a Q-matrix — mastery per
concept with its credible interval, the concept names of the Q-matrix, the evidence behind each, what it rests on and
what the interval means — as a printable HTML page whose numbers are also a table, or the chart alone as SVG or PNG.
Another tenant never sees it; after erasure there is nothing to report."""

from __future__ import annotations

import re
from pathlib import Path

from app.schemas.students import StoredDiagnosis
from app.presentation.report import report_html, report_svg
from app.services.report import build_report
from qmatrix import example_qmatrix
from tests.conftest import auth_headers, make_client
from tests.factories import FakeEntity

RESPONSES = [{"item_id": "q01", "correct": True}, {"item_id": "q02", "correct": False},
             {"item_id": "q03", "correct": True}, {"item_id": "q05", "correct": True}]


def _evidence() -> dict[str, int]:
    q = example_qmatrix()
    counts: dict[str, int] = {}
    for r in RESPONSES:
        for c in q.item(r["item_id"]).concepts:
            counts[c] = counts.get(c, 0) + 1
    return counts


def test_the_report_shows_each_concept_its_interval_and_evidence_as_text_and_chart(tmp_path: Path) -> None:
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.3), "beta": FakeEntity("beta", 0.7)}) as client:
        body = {"student_id": "amira-7", "qmatrix_id": "example-prealgebra", "responses": RESPONSES,
                "include_entities": True}
        first = client.post("/v1/diagnose", json=body)
        assert first.status_code == 200, first.text
        diagnosis = first.json()
        assert diagnosis["qmatrix_id"] == "example-prealgebra" and diagnosis["evidence"] == _evidence()
        client_key = auth_headers(client.app, tenant="default", role="client")  # type: ignore[arg-type]

        page = client.get("/v1/students/amira-7/report", params={"qmatrix_id": "example-prealgebra"},
                          headers=client_key)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        html = page.text
        # every assessed concept is a table row with its estimate, interval and evidence, in the Q-matrix's order
        rows = re.findall(r'<tr><th scope="row">(.*?)</th><td class="num">([0-9.]+)</td>\s*<td class="num">'
                          r"([0-9.]+) – ([0-9.]+)</td>\s*<td class=\"num\">(\d+)</td>", html)
        order = [c for c in example_qmatrix().concepts if c in diagnosis["mastery"]]
        assert [r[0] for r in rows] == order
        for concept, estimate, low, high, answers in rows:
            assert float(estimate) == round(diagnosis["mastery"][concept], 2)
            assert (float(low), float(high)) == tuple(round(v, 2) for v in diagnosis["mastery_interval"][concept])
            assert int(answers) == _evidence()[concept]
        assert "credible interval" in html and "@media print" in html and "<svg" in html
        assert "alpha" in html and "beta" in html  # what it rests on
        assert not re.search(r"(src|href)=\"https?://", html)  # nothing fetched from elsewhere

        svg = client.get("/v1/students/amira-7/report", params={"qmatrix_id": "example-prealgebra"},
                         headers={**client_key, "Accept": "image/svg+xml"})
        assert svg.headers["content-type"] == "image/svg+xml" and svg.text.startswith("<svg")
        assert all(c in svg.text for c in order) and "<title" in svg.text
        png = client.get("/v1/students/amira-7/report", params={"qmatrix_id": "example-prealgebra"},
                         headers={**client_key, "Accept": "image/png"})
        assert png.headers["content-type"] == "image/png" and png.content.startswith(b"\x89PNG")

        # Reading a report charges nothing
        budget = client.get("/v1/privacy/students/amira-7").json()
        client.get("/v1/students/amira-7/report", params={"qmatrix_id": "example-prealgebra"})
        assert client.get("/v1/privacy/students/amira-7").json() == budget

        # Another tenant, another Q-matrix, an unknown student: 404 naming why; after erasure: nothing to report
        other = auth_headers(client.app, tenant="other")  # type: ignore[arg-type]
        for params, headers in (({"qmatrix_id": "example-prealgebra"}, other), ({"qmatrix_id": "frcsub"}, {}),):
            r = client.get("/v1/students/amira-7/report", params=params, headers=headers)
            assert r.status_code == 404 and "no stored diagnosis" in r.text
        assert client.get("/v1/students/amira-7/report").status_code == 422  # qmatrix_id is required
        assert client.delete("/v1/students/amira-7").status_code == 200
        assert client.get("/v1/students/amira-7/report", params={"qmatrix_id": "example-prealgebra"}).status_code == 404


def test_wide_intervals_read_as_not_enough_evidence() -> None:
    stored = StoredDiagnosis(charge_id="c", created_at="2026-12-01T00:00:00Z", diagnosis={
        "student_id": "s", "qmatrix_id": "example-prealgebra", "mastery": {"fractions": 0.8, "ratios": 0.2},
        "mastery_interval": {"fractions": [0.1, 0.95], "ratios": [0.1, 0.3]}, "interval_level": 0.9,
        "evidence": {"fractions": 1, "ratios": 4}, "aggregation": "posterior"})
    report = build_report(stored, None)
    readings = {c.concept: c.reading for c in report.concepts}
    assert readings == {"fractions": "not enough evidence yet to tell", "ratios": "likely not yet mastered"}
    assert report.level_percent == "90 %"


def test_thin_evidence_is_marked_with_how_many_more_answers_would_narrow_it() -> None:
    # Prepare: one concept from two answers (a wide interval), one from many (narrow)
    stored = StoredDiagnosis(charge_id="c", created_at="2026-12-01T00:00:00Z", diagnosis={
        "student_id": "s", "qmatrix_id": "example-prealgebra", "mastery": {"fractions": 0.7, "ratios": 0.2},
        "mastery_interval": {"fractions": [0.3, 0.95], "ratios": [0.1, 0.3]}, "interval_level": 0.9,
        "evidence": {"fractions": 2, "ratios": 40}, "aggregation": "posterior"})
    # Execute
    report = build_report(stored, None)
    html, svg = report_html(report), report_svg(report)
    # Assert: the thin one says how many more answers; a Beta interval at 0.7 narrows below 0.3 at about 25 answers
    fractions, ratios = report.concepts
    assert fractions.thin and not ratios.thin and ratios.more_answers is None
    assert fractions.more_answers is not None and 15 <= fractions.more_answers + 2 <= 35
    assert f"about {fractions.more_answers} more answers" in html and f"+{fractions.more_answers} answers" in svg
    assert html.count("thin evidence:") == 1
