"""Issue 30: the student report is answered with a Content-Security-Policy and ``nosniff`` in every format (errors
included), and its PNG is drawn without mathtext and without pyplot: a concept name is text, never a formula, so
``$\\undefinedcommand{x}$`` is drawn as written instead of answering 500."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import auth_headers, make_client
from tests.factories import FakeEntity

ROOT = Path(__file__).resolve().parents[3]
MATH = "$\\undefinedcommand{x}$"
SCRIPT = "<script>alert(1)</script>"
HOSTILE = {
    "id": "hostile",
    "concepts": [MATH, SCRIPT, "$x^2$ and 50 % of $y$"],
    "items": [{"id": "h1", "text": "one", "concepts": [MATH]}, {"id": "h2", "text": "two", "concepts": [SCRIPT]},
              {"id": "h3", "text": "three", "concepts": ["$x^2$ and 50 % of $y$", MATH]}],
}
FORMATS = {"text/html": "text/html", "image/svg+xml": "image/svg+xml", "image/png": "image/png"}


def _diagnosed(client: TestClient) -> None:
    assert client.post("/v1/qmatrices", json=HOSTILE).status_code == 201
    r = client.post("/v1/diagnose", json={"student_id": "s-1", "qmatrix_id": "hostile", "responses": [
        {"item_id": "h1", "correct": True}, {"item_id": "h2", "correct": False}, {"item_id": "h3", "correct": True}]})
    assert r.status_code == 200, r.text


def _secured(headers: dict[str, str] | object) -> None:
    csp = headers["content-security-policy"]  # type: ignore[index]
    assert headers["x-content-type-options"] == "nosniff"  # type: ignore[index]
    directives = dict((d.split(" ", 1) + [""])[:2] for d in (p.strip() for p in csp.split(";")) if d)
    assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert "script-src" not in directives  # no script at all: default-src 'none' refuses it


def test_every_report_format_carries_the_csp_and_nosniff(tmp_path: Path) -> None:
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.3), "beta": FakeEntity("beta", 0.7)}) as client:
        _diagnosed(client)
        for accept, media in FORMATS.items():
            r = client.get("/v1/students/s-1/report", params={"qmatrix_id": "hostile"}, headers={"Accept": accept})
            assert r.status_code == 200 and r.headers["content-type"].startswith(media), r.text[:200]
            _secured(r.headers)
        html = client.get("/v1/students/s-1/report", params={"qmatrix_id": "hostile"}).text
        # The policy fits the page: it runs no script and loads nothing (only its inline styles are needed)
        assert "<script" not in html.lower() and SCRIPT not in html and "&lt;script&gt;" in html
        assert " src=" not in html and "<link" not in html and "<style>" in html
        csp = client.get("/v1/students/s-1/report", params={"qmatrix_id": "hostile"}).headers["content-security-policy"]
        assert [d.strip() for d in csp.split(";") if "'unsafe-inline'" in d] == ["style-src 'unsafe-inline'"]

        # Error answers of the route carry them too, with their usual status and body
        other = auth_headers(client.app, tenant="other")  # type: ignore[arg-type]
        for params, headers, status in (({"qmatrix_id": "hostile"}, other, 404), ({}, {}, 422),
                                        ({"qmatrix_id": "hostile"}, {"Authorization": "Bearer nope"}, 401)):
            r = client.get("/v1/students/s-1/report", params=params, headers=headers)
            assert r.status_code == status and r.headers["content-type"].startswith("application/json"), r.text
            _secured(r.headers)


@pytest.mark.parametrize("accept", ["image/png", "image/svg+xml", "text/html"])
def test_concept_names_are_text_never_mathtext_or_markup(tmp_path: Path, accept: str) -> None:
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.3)}) as client:
        _diagnosed(client)
        r = client.get("/v1/students/s-1/report", params={"qmatrix_id": "hostile"}, headers={"Accept": accept})
        assert r.status_code == 200, r.text[:300]
        if accept == "image/png":
            from PIL import Image

            assert r.content.startswith(b"\x89PNG")
            image = Image.open(io.BytesIO(r.content))
            image.verify()  # a whole, valid PNG
            assert image.format == "PNG" and image.size[0] > 100 and image.size[1] > 100
        else:
            assert SCRIPT not in r.text and "&lt;script&gt;" in r.text and MATH in r.text


def test_png_labels_are_drawn_as_written() -> None:
    """Every text of the PNG figure (tick labels, axis label) has mathtext parsing off."""
    from app.presentation.report import _png_figure
    from app.services.report import ConceptLine, StudentReport

    report = StudentReport(student_id="s", qmatrix_id="q", diagnosed_at="", level=0.9, basis="", entities=[],
                           calibration=None, model_version=None, aggregation="", privacy="", concepts=[
                               ConceptLine(concept=c, mastery=0.5, low=0.2, high=0.8, evidence=1)
                               for c in HOSTILE["concepts"]])  # type: ignore[union-attr]
    figure = _png_figure(report)
    figure.canvas.draw()  # lays every tick out, as saving does
    found = figure.findobj(lambda a: hasattr(a, "get_parse_math"))
    texts = [t for t in found if t.get_text()]  # type: ignore[attr-defined]
    assert {MATH, SCRIPT} <= {t.get_text() for t in texts}
    assert all(t.get_parse_math() is False for t in texts), [t.get_text() for t in texts if t.get_parse_math()]


def test_no_app_module_imports_pyplot() -> None:
    """pyplot keeps global state (the current figure) and is not thread-safe; the PNG is drawn in worker threads."""
    offenders = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
                     if isinstance(node, ast.ImportFrom) else [])
            if any(n == "matplotlib.pyplot" or n.startswith("matplotlib.pyplot.") or n == "pylab" for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
