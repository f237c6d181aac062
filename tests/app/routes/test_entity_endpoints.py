"""An entity's endpoint (``base_url``) as tenants see it (issue 30, finding 2): the operator's URL may carry
credentials (``user:password@``) or a token in its query string; no tenant ever sees those. Admin keys see the
endpoint without them (the console is admin-only), client keys see no endpoint at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.routes.entities import public_base_url
from providers.config import EntitySpec
from tests.app.console.test_console import sign_in
from tests.conftest import bearer, make_client
from tests.factories import FakeEntity

SECRET_URL = "http://user:pw@127.0.0.1:9/v1?key=abc"


@pytest.mark.parametrize("url,shown", [
    (SECRET_URL, "http://127.0.0.1:9/v1"),
    ("https://api.example.com/v1", "https://api.example.com/v1"),
    ("https://token@api.example.com:8443/openai/v1?api-version=2024&sig=x#frag",
     "https://api.example.com:8443/openai/v1"),
    ("http://u:p@[::1]:8080/v1", "http://[::1]:8080/v1"),
    ("http://host:notaport/v1", None),  # unreadable: hidden rather than shown as written
    (None, None),
])
def test_the_shown_endpoint_has_no_userinfo_query_or_fragment(url: str | None, shown: str | None) -> None:
    assert public_base_url(url) == shown


def test_no_tenant_sees_the_password_or_the_token_of_an_entity_url(tmp_path: Path) -> None:
    spec = EntitySpec(name="remote", kind="openai_compatible", model="m", base_url=SECRET_URL, api_key="sk-test")
    with make_client(tmp_path, {"remote": FakeEntity("remote", 0.4)}, specs=[spec], tenant="school-a") as client:
        as_admin = client.get("/v1/entities")
        as_client = client.get("/v1/entities", headers=bearer(client, tenant="school-a", role="client"))
        assert as_admin.status_code == as_client.status_code == 200
        assert as_admin.json()["data"][0]["base_url"] == "http://127.0.0.1:9/v1"
        assert as_client.json()["data"][0]["base_url"] is None
        client.headers.pop("Authorization")
        sign_in(client, tenant="school-a")
        page = client.get("/console/entities")
        assert page.status_code == 200 and "http://127.0.0.1:9/v1" in page.text
        # Nowhere on either answer or the page (a random CSRF token could hold "pw" by chance: whole pieces here)
        for shown in (as_admin.text, as_client.text, page.text):
            assert not any(piece in shown for piece in ("user:pw", ":pw@", "pw@127", "key=abc", "=abc", "?key"))
