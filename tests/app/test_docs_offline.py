"""/docs and /redoc work on a host with no Internet access: every script, stylesheet and icon they load is served
by the gateway itself (from the fastapi-offline package), and, as before, they need no API key."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.factories import FakeEntity


class _Refs(HTMLParser):
    """Every URL the page makes the browser load: <script src>, <link href>, <img src>."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and ((tag in ("script", "img") and name == "src") or (tag == "link" and name == "href")):
                self.urls.append(value)


def _refs(html: str) -> list[str]:
    parser = _Refs()
    parser.feed(html)
    return parser.urls


@pytest.fixture
def anonymous(tmp_path: Path) -> Iterator[TestClient]:
    """A gateway with auth enabled, and a caller without any key (as a browser opening /docs is)."""
    settings = Settings(state_dir=tmp_path, entities=[], preload_models=False, default_calibration=False)
    with TestClient(create_app(settings, entities={"a": FakeEntity("a")})) as client:
        yield client


@pytest.mark.parametrize("page, kinds", [("/docs", {"javascript", "css", "png"}), ("/redoc", {"javascript", "png"})])
def test_the_docs_pages_load_only_same_origin_assets(anonymous: TestClient, page: str, kinds: set[str]) -> None:
    # Execute
    r = anonymous.get(page)

    # Assert: served without a key; no absolute URL anywhere in the page (no CDN, no Google Fonts, no validator)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", r.text, re.I), r.text
    urls = _refs(r.text)
    assert urls and all(u.startswith("/docs/assets/") for u in urls), urls
    # ... and each of them is there, with the right type and real content
    seen = set()
    for url in urls:
        asset = anonymous.get(url)
        assert asset.status_code == 200, url
        kind = next(k for k in ("javascript", "css", "png") if k in asset.headers["content-type"])
        seen.add(kind)
        assert len(asset.content) > 1000, url
    assert seen == kinds
    assert "/openapi.json" in r.text and anonymous.get("/openapi.json").status_code == 200


def test_the_scripts_are_swagger_ui_and_redoc(anonymous: TestClient) -> None:
    swagger = anonymous.get("/docs/assets/swagger-ui-bundle.js")
    redoc = anonymous.get("/docs/assets/redoc.standalone.js")
    assert "SwaggerUIBundle" in swagger.text and "Redoc" in redoc.text
    assert '"validatorUrl": null' in anonymous.get("/docs").text  # no online validator (it would call out)


def test_only_the_docs_assets_are_served(anonymous: TestClient) -> None:
    for name in ("core.py", "__init__.py", "..%2F__init__.py", "%2E%2E/core.py", "nosuch.js"):
        assert anonymous.get(f"/docs/assets/{name}").status_code == 404, name
    assert anonymous.get("/docs/oauth2-redirect").status_code == 200


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to parse the scripts")
def test_the_served_scripts_parse_as_javascript(anonymous: TestClient, tmp_path: Path) -> None:
    for name in ("swagger-ui-bundle.js", "redoc.standalone.js"):
        path = tmp_path / name
        path.write_bytes(anonymous.get(f"/docs/assets/{name}").content)
        done = subprocess.run(["node", "--check", str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]


def _chromium() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None
    return next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None)


@pytest.mark.skipif(_chromium() is None, reason="needs playwright and a chromium at /usr/bin")
def test_swagger_ui_renders_with_no_network_but_the_gateway(tmp_path: Path) -> None:  # pragma: no cover - optional
    from playwright.sync_api import sync_playwright

    from tests.app.gateway_processes import free_port, gateway_process

    port = free_port()
    env = {"FEDCD_STATE_DIR": str(tmp_path), "FEDCD_TRAIN_DEFAULT_MODEL": "false",
           "FEDCD_ENTITIES": '[{"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"}]'}
    with gateway_process(port, env), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium())
        page = browser.new_page()
        outside: list[str] = []
        page.route("**/*", lambda route: (outside.append(route.request.url), route.abort())
                   if not route.request.url.startswith(f"http://127.0.0.1:{port}/") else route.continue_())
        page.goto(f"http://127.0.0.1:{port}/docs")
        page.wait_for_selector(".opblock", timeout=60_000)  # the operations, rendered from /openapi.json
        browser.close()
    assert outside == []
