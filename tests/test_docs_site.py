"""The documentation site (mkdocs.yml, docs/) and the README in front of it (issue 37).

CI builds the site here, in `make test`: `mkdocs build --strict`, where a broken link or anchor, a nav entry without
its page or a page missing from the nav fails the build. Its API reference is the app's own OpenAPI schema, and the
built site loads nothing from the web (it is read on hosts with no Internet access, like the gateway's console).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250  # issue 37: the README fits a screen or two; everything else is in the docs site


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=config.parent, capture_output=True, text=True, env=env, timeout=900,
    )


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("openapi_reference", ROOT / "docs/hooks/openapi_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = _build(ROOT / "mkdocs.yml", out)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stdout}\n{built.stderr}"
    return out


def test_the_site_builds_strict_with_every_nav_page(site: Path) -> None:
    # Prepare: the pages the nav names
    def pages(entries: list) -> list[str]:
        found: list[str] = []
        for entry in entries:
            value = entry if isinstance(entry, str) else next(iter(entry.values()))
            found += pages(value) if isinstance(value, list) else [value]
        return found

    nav = pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    # Assert: each was rendered (the build itself failed on any warning)
    for page in nav:
        html = site / ("index.html" if page == "index.md" else f"{page.removesuffix('.md')}/index.html")
        assert html.is_file(), f"{page} is in the nav but was not built"


def test_the_api_reference_is_the_apps_schema(site: Path) -> None:
    # Prepare: the schema the app serves at /openapi.json
    schema = _hook().gateway_schema()
    # Execute
    published = json.loads((site / "openapi.json").read_text())
    reference = (site / "api-reference/index.html").read_text()
    # Each operation is a heading "<METHOD> <path>" (its path parameters in their own spans)
    headings = {re.sub(r"<[^>]+>|¶", "", heading).strip().replace("&para;", "")
                for heading in re.findall(r"<h3[^>]*>(.*?)</h3>", reference, flags=re.S)}
    # Assert: the site's openapi.json is that schema, and every operation is on the reference page
    assert published == schema
    operations = {f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item}
    assert operations - headings == set(), "operations missing from the API reference"


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    # Prepare: the site's own settings (theme, validation, strict) on two pages, one linking to a missing page and
    # to a missing anchor
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    small = {key: config[key] for key in ("site_name", "theme", "strict", "validation", "markdown_extensions")}
    small["nav"] = ["index.md", "other.md"]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/index.md").write_text("# Home\n\nSee [a page](missing.md) and [a section](other.md#nowhere).\n")
    (tmp_path / "docs/other.md").write_text("# Other\n\n## Somewhere\n")
    # Execute
    built = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    # Assert
    output = built.stdout + built.stderr
    assert built.returncode != 0
    assert "missing.md" in output and "#nowhere" in output


_EXTERNAL = re.compile(r"""<(?:script|img|iframe|source)\b[^>]*\bsrc=["'](?:https?:)?//|<link\b[^>]*\bhref=["'](?:https?:)?//""")


def test_the_site_loads_nothing_from_the_web(site: Path) -> None:
    # Assert: no page pulls a script, stylesheet, font or image from another host (links to read are fine)
    for page in site.rglob("*.html"):
        match = _EXTERNAL.search(page.read_text())
        assert match is None, f"{page.relative_to(site)} loads {match.group(0)!r}"
    for sheet in site.rglob("*.css"):
        assert not re.search(r"url\(\s*[\"']?(?:https?:)?//|@import", sheet.read_text()), sheet.relative_to(site)


def test_the_readme_is_a_front_door() -> None:
    # Prepare
    readme = (ROOT / "README.md").read_text()
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", readme) if not re.match(r"[a-z]+:", t)]
    # Assert: short, and every link it gives leads to a file in the repository
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert targets, "the README links into the docs"
    for target in targets:
        assert (ROOT / target.split("#")[0]).exists(), f"README links to {target}, which does not exist"


def test_the_readmes_python_example_is_the_clients_tested_one() -> None:
    # tests/clients/test_python_client.py runs the client README's example against a live gateway; the README's
    # first screen shows the same lines, so it cannot show an untested one
    def first_python_block(path: Path) -> str:
        match = re.search(r"```python\n(.*?)```", path.read_text(), flags=re.S)
        assert match is not None, f"{path} has no Python example"
        return match.group(1)

    assert first_python_block(ROOT / "README.md") == first_python_block(ROOT / "clients/python/README.md")
