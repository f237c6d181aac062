"""MkDocs hook: the API reference, generated from the gateway itself at build time.

The schema comes from ``create_app(...).openapi()`` (the same document a running gateway serves at
``/openapi.json``), so the docs cannot drift from the code and the build needs no server and no network. It
is written into the site as ``openapi.json`` and rendered as Markdown into ``api-reference.md`` by
essentials-openapi (the library behind neoteroi-mkdocs' OAD plugin), so the page is plain HTML: no Swagger UI
or ReDoc script, nothing loaded from a CDN.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.openapi_reference")

MARKER = "<!-- openapi-reference -->"
PAGE = "api-reference.md"
SCHEMA_FILE = "openapi.json"

_schema: dict[str, Any] | None = None


def gateway_schema() -> dict[str, Any]:
    """The gateway's OpenAPI document, built from a throwaway state folder (no entity, no model loaded)."""
    # Imported here: loading the app is the expensive part, and only a build needs it.
    from app.main import create_app
    from app.settings import Settings

    with tempfile.TemporaryDirectory(prefix="fedcd-docs-") as state:
        settings = Settings(
            state_dir=Path(state), data_dir=Path(state) / "no-datasets", entities=[], preload_models=False,
            default_calibration=False, train_default_model=False,
        )
        app = create_app(settings, entities={})
        try:
            return app.openapi()
        finally:
            app.state.gateway.database.close()  # the throwaway SQLite file goes with its folder


def _schema_once() -> dict[str, Any]:
    global _schema
    if _schema is None:  # `mkdocs serve` rebuilds often; the schema changes only with the code
        _schema = gateway_schema()
    return _schema


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, SCHEMA_FILE, content=json.dumps(_schema_once(), indent=2) + "\n"))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER!r}: the API reference would be empty")
    from openapidocs.mk.v3 import OpenAPIV3DocumentationHandler

    rendered = OpenAPIV3DocumentationHandler(_schema_once(), style="MKDOCS").write()
    # The generated text opens with a comment and its own title ("# fedcd <version>"): the page has its title.
    body = rendered[rendered.index("\n## "):] if "\n## " in rendered else rendered
    return markdown.replace(MARKER, body)
