"""The operator console (/console) through its HTTP interface: sign-in and its cookie, CSRF, revoked keys, tenant
isolation, each page, and the forms that change something (README "Console"). tests/app/console/test_console_browser.py
drives the same pages in a real browser."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.console.session import COOKIE, sign_session, verify_session
from app.console.web import session_secret
from providers import EntityUnavailable, PromptContext
from providers.simulated import observed_proportions
from tests.app.conftest import make_client
from tests.factories import FakeEntity
from tests.app.waiting import finished_job

Q_ID = "example-prealgebra"
PAGES = ["", "/entities", "/qmatrices", f"/qmatrices/{Q_ID}", "/jobs", "/students", "/keys", "/policy"]
RESPONSES = [{"item_id": "q01", "correct": True}, {"item_id": "q10", "correct": False}]


def biased(offset: float):  # type: ignore[no-untyped-def]
    def answer(context: PromptContext) -> dict[str, float]:
        return {c: min(1.0, max(0.0, p + offset)) for c, p in observed_proportions(context).items()}

    return answer


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    entities = {"good": FakeEntity("good", biased(0.0)), "over": FakeEntity("over", biased(0.2)),
                "down": FakeEntity("down", error=EntityUnavailable("HTTP 503"))}
    with make_client(tmp_path, entities, privacy_cap_epsilon=100.0, allow_unnoised=False) as c:
        c.headers.pop("Authorization")  # the console never sees an API key after sign-in
        yield c


def _token(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


def sign_in(client: TestClient, *, tenant: str = "default", role: str = "admin", key: str | None = None) -> str:
    """Sign in through the form (a new key of ``tenant`` unless ``key``); the API key used."""
    api_key = key or client.app.state.gateway.keys.create(tenant=tenant, role=role).api_key  # type: ignore[attr-defined]
    client.cookies.clear()
    form = client.get("/console/login")
    r = client.post("/console/login", data={"api_key": api_key, "csrf": _token(form.text)}, follow_redirects=False)
    assert r.status_code == 303 or role != "admin", r.text
    return api_key


def csrf(client: TestClient, path: str = "/console") -> str:
    return _token(client.get(path).text)


def _diagnose(client: TestClient, key: str, student: str = "s1") -> None:
    r = client.post("/v1/diagnose", headers={"Authorization": f"Bearer {key}"}, json={
        "student_id": student, "qmatrix_id": Q_ID, "epsilon": 2.0, "include_entities": True, "responses": RESPONSES})
    assert r.status_code == 200, r.text


# -- signing in ------------------------------------------------------------------------------------------
def test_an_admin_key_signs_in_with_a_signed_cookie_that_holds_no_key(client: TestClient) -> None:
    api_key = client.app.state.gateway.keys.create(tenant="default", role="admin")  # type: ignore[attr-defined]
    form = client.get("/console/login")
    r = client.post("/console/login", data={"api_key": api_key.api_key, "csrf": _token(form.text)},
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console"
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}="))
    flags = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "path=/console", "samesite=strict"} <= flags and "secure" not in flags  # plain http
    value = cookie.split(";")[0].split("=", 1)[1]
    secret_part = api_key.api_key.split("_", 2)[2]  # fcd_<key id>_<secret>: the secret may hold "_" itself
    assert len(secret_part) == 43
    assert secret_part not in value and api_key.api_key not in value
    session = verify_session(session_secret(client.app), value)  # type: ignore[arg-type]
    assert session is not None and (session.key_id, session.tenant) == (api_key.key_id, "default")
    # Every page after it: no key anywhere in the page, nor in the URL
    for path in PAGES:
        page = client.get(f"/console{path}")
        assert page.status_code == 200, (path, page.text[:500])
        assert secret_part not in page.text and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"


def test_over_https_the_cookie_is_secure(tmp_path: Path) -> None:
    with make_client(tmp_path, {"a": FakeEntity("a")}) as c:
        c.base_url = "https://console.example"  # type: ignore[assignment]
        key = c.app.state.gateway.keys.create(tenant="default", role="admin").api_key  # type: ignore[attr-defined]
        form = c.get("/console/login")
        r = c.post("/console/login", data={"api_key": key, "csrf": _token(form.text)}, follow_redirects=False)
        assert r.status_code == 303
        assert all("secure" in c.lower() for c in r.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}="))


def test_a_client_key_gets_a_403_page_and_no_session(client: TestClient) -> None:
    key = client.app.state.gateway.keys.create(tenant="default", role="client").api_key  # type: ignore[attr-defined]
    form = client.get("/console/login")
    r = client.post("/console/login", data={"api_key": key, "csrf": _token(form.text)}, follow_redirects=False)
    assert r.status_code == 403 and r.headers["content-type"].startswith("text/html")
    assert "needs an admin key" in r.text and "client key of tenant" in r.text
    assert not any(c.startswith(f"{COOKIE}=") for c in r.headers.get_list("set-cookie"))
    assert client.get("/console", follow_redirects=False).status_code == 303


@pytest.mark.parametrize("key", ["", "not-a-key", "fcd_0123456789ab_" + "A" * 43])
def test_a_bad_key_is_a_401_page(client: TestClient, key: str) -> None:
    form = client.get("/console/login")
    r = client.post("/console/login", data={"api_key": key, "csrf": _token(form.text)})
    assert r.status_code == 401 and "Invalid, expired or revoked API key" in r.text


def test_the_sign_in_form_must_come_from_the_console(client: TestClient) -> None:
    key = client.app.state.gateway.keys.create(tenant="default", role="admin").api_key  # type: ignore[attr-defined]
    # No login cookie and token (a form posted from another site): refused before the key is looked at
    r = client.post("/console/login", data={"api_key": key}, follow_redirects=False)
    assert r.status_code == 403 and not any(c.startswith(f"{COOKIE}=") for c in r.headers.get_list("set-cookie"))
    form = client.get("/console/login")
    r = client.post("/console/login", data={"api_key": key, "csrf": _token(form.text)},
                    headers={"Origin": "https://evil.example"}, follow_redirects=False)
    assert r.status_code == 403


def test_pages_without_a_session_ask_to_sign_in(client: TestClient) -> None:
    for path in PAGES:
        r = client.get(f"/console{path}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/console/login", path
    assert client.get("/console/jobs/x/progress.json").status_code == 401
    assert client.post("/console/keys", data={"role": "admin"}).status_code == 401


def test_a_forged_altered_or_expired_cookie_is_refused(client: TestClient) -> None:
    key = client.app.state.gateway.keys.create(tenant="default", role="admin")  # type: ignore[attr-defined]
    secret = session_secret(client.app)  # type: ignore[arg-type]
    good = sign_session(secret, key_id=key.key_id, tenant="default")
    other = sign_session(b"another server's secret, 32 bytes", key_id=key.key_id, tenant="default")
    payload, signature = good.value.split(".")
    tampered = sign_session(secret, key_id=key.key_id, tenant="other").value.split(".")[0] + "." + signature
    expired = sign_session(secret, key_id=key.key_id, tenant="default", now=time.time() - 9 * 3600)
    for value in (other.value, tampered, expired.value, payload, "garbage"):
        client.cookies.set(COOKIE, value, path="/console")
        r = client.get("/console", follow_redirects=False)
        assert r.status_code == 303 and "/console/login" in r.headers["location"], value
    client.cookies.set(COOKIE, good.value, path="/console")
    assert client.get("/console", follow_redirects=False).status_code == 200


def test_a_revoked_key_signs_its_sessions_out(client: TestClient) -> None:
    api_key = sign_in(client)
    key_id = api_key.split("_")[1]
    assert client.get("/console").status_code == 200
    client.app.state.gateway.keys.revoke(key_id)  # type: ignore[attr-defined]
    r = client.get("/console/keys", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login?ended=1"
    assert f'{COOKIE}=""' in r.headers["set-cookie"]  # the cookie is cleared
    assert "Your session ended" in client.get("/console/login?ended=1").text


def test_sign_out_clears_the_session(client: TestClient) -> None:
    sign_in(client)
    r = client.post("/console/logout", data={"csrf": csrf(client)}, follow_redirects=False)
    assert r.status_code == 303 and f'{COOKIE}=""' in r.headers["set-cookie"]
    assert client.get("/console", follow_redirects=False).status_code == 303


def test_with_auth_disabled_the_console_signs_in_as_the_dev_admin(tmp_path: Path) -> None:
    with make_client(tmp_path, {"a": FakeEntity("a")}, auth="disabled") as c:
        form = c.get("/console/login")
        assert "FEDCD_AUTH=disabled" in form.text
        r = c.post("/console/login", data={"api_key": "", "csrf": _token(form.text)}, follow_redirects=False)
        assert r.status_code == 303
        assert 'id="tenant">dev<' in c.get("/console").text


# -- CSRF ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, form", [
    ("/console/keys", {"role": "admin"}),
    ("/console/policy", {"period.kind": "lifetime", "cap_epsilon": "5", "cap_delta": "0", "default_mechanism": "laplace",
                         "default_epsilon": "1", "sensitivity": "paper", "warning_fraction": "0.2"}),
    (f"/console/qmatrices/{Q_ID}/calibrate", {"max_students": "20"}),
    ("/console/students/erase", {"student_id": "s1", "confirm": "yes"}),
])
def test_a_change_without_the_csrf_token_is_refused_and_changes_nothing(client: TestClient, path: str,
                                                                        form: dict[str, str]) -> None:
    sign_in(client)
    state = client.app.state.gateway  # type: ignore[attr-defined]
    before = (len(state.keys.list("default")), state.policies.current("default").version,
              len(state.jobs.page("default", limit=10)))
    for token in (None, "0" * 64, csrf(client) + "0"):
        r = client.post(path, data={**form, **({"csrf": token} if token else {})})
        assert r.status_code == 403 and "security token" in r.text, (path, token)
    r = client.post(path, data={**form, "csrf": csrf(client)}, headers={"Origin": "https://evil.example"})
    assert r.status_code == 403
    r = client.post(path, data={**form, "csrf": csrf(client)}, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    after = (len(state.keys.list("default")), state.policies.current("default").version,
             len(state.jobs.page("default", limit=10)))
    assert after == before


def test_a_session_token_of_one_session_does_not_work_for_another(client: TestClient) -> None:
    sign_in(client)
    old = csrf(client)
    sign_in(client)  # a new session (a new cookie)
    assert client.post("/console/keys", data={"role": "client", "csrf": old}).status_code == 403


# -- pages -----------------------------------------------------------------------------------------------
def test_every_page_shows_the_tenants_data(client: TestClient) -> None:
    api_key = sign_in(client)
    for n in range(3):
        _diagnose(client, api_key, f"s{n}")
    overview = client.get("/console").text
    assert re.search(r'id="diagnoses-today">3<', overview)
    assert '<svg class="chart bars"' in overview and "<title" in overview  # the chart, with a table beside it
    failures = re.search(r'<table id="failures">.*?</table>', overview, re.DOTALL)
    assert failures and "down" in failures.group(0) and "unavailable 3" in failures.group(0)
    assert '<tr><td>down</td><td class="n">3</td>' in failures.group(0)  # each diagnosis: one failed call
    entities = client.get("/console/entities").text
    assert all(name in entities for name in ("good", "over", "down")) and "EntityUnavailable: HTTP 503" in entities
    rows = dict(re.findall(r'<th scope="row">(\w+)</th>(.*?)</tr>', entities, re.DOTALL))
    assert '<td class="n">3</td><td class="n">3</td>' in rows["down"]  # calls today, failed today
    assert '<td class="n">3</td><td class="n">0</td>' in rows["good"]
    q = client.get(f"/console/qmatrices/{Q_ID}").text
    assert "Add and subtract fractions" in q and "q12" in q and "untrained" not in q  # local-fed is off here
    assert "no local-fed entity is configured" in q
    assert "No calibration" in q


def test_unknown_ids_are_404_pages_never_500(client: TestClient) -> None:
    sign_in(client)
    for path in ("/console/qmatrices/nope", "/console/jobs/nope", "/console/nothing/here",
                 f"/console/qmatrices/{Q_ID}?calibration=cal-nope"):
        r = client.get(path)
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html"), path
    assert client.get("/console/jobs/nope/progress.json").status_code == 404
    assert client.post("/console/keys/nope/revoke", data={"csrf": csrf(client)}).status_code == 404
    assert client.get("/console/", follow_redirects=False).headers["location"] == "/console"
    assert client.get("/console/jobs?cursor=%%%").status_code == 422
    assert client.get("/console/jobs?bogus=1").status_code == 422


def test_tenants_see_only_their_own_data(client: TestClient) -> None:
    a_key = sign_in(client, tenant="school-a")
    _diagnose(client, a_key)
    r = client.post(f"/console/qmatrices/{Q_ID}/calibrate", data={"csrf": csrf(client), "max_students": "40"},
                    follow_redirects=False)
    job_id = r.headers["location"].rsplit("/", 1)[1]
    a_keys = [k.key_id for k in client.app.state.gateway.keys.list("school-a")]  # type: ignore[attr-defined]
    sign_in(client, tenant="school-b")
    overview = client.get("/console").text
    assert re.search(r'id="diagnoses-today">0<', overview) and 'id="tenant">school-b<' in overview
    assert job_id not in client.get("/console/jobs").text
    assert client.get(f"/console/jobs/{job_id}").status_code == 404
    assert client.get(f"/console/jobs/{job_id}/progress.json").status_code == 404
    assert client.post(f"/console/keys/{a_keys[0]}/revoke", data={"csrf": csrf(client)}).status_code == 404
    assert all(k not in client.get("/console/keys").text for k in a_keys)
    student = client.post("/console/students", data={"csrf": csrf(client), "student_id": "s1"}).text
    assert "No charge: nothing is recorded" in student
    assert client.app.state.gateway.keys.authenticate(a_key) is not None  # type: ignore[attr-defined]


def test_a_calibration_job_runs_from_the_console_with_its_progress_and_reliability(client: TestClient) -> None:
    sign_in(client)
    r = client.post(f"/console/qmatrices/{Q_ID}/calibrate",
                    data={"csrf": csrf(client), "method": "stacking", "max_students": "100"}, follow_redirects=False)
    assert r.status_code == 303
    job_id = r.headers["location"].rsplit("/", 1)[1]
    progress = finished_job(client, job_id, path="/console/jobs/{job_id}/progress.json")
    assert progress["status"] == "succeeded" and progress["done"] == progress["total"] == 20, progress
    page = client.get(f"/console/jobs/{job_id}").text
    assert progress["calibration_id"] in page and 'id="history"' in page and "Cancel this job" not in page
    assert job_id[:12] in client.get("/console/jobs").text
    q = client.get(f"/console/qmatrices/{Q_ID}").text
    assert progress["calibration_id"] in q and '<svg class="chart reliability"' in q  # bins from its job's answers
    weights = client.get("/console/entities").text
    assert "left out" in weights and re.search(r"w \d", weights)  # "down" never answered; the others weigh in
    bad = client.post(f"/console/qmatrices/{Q_ID}/calibrate", data={"csrf": csrf(client), "max_students": "two"})
    assert bad.status_code == 422 and "not a number" in bad.text


def test_jobs_are_listed_newest_first_a_page_at_a_time(client: TestClient) -> None:
    sign_in(client)
    jobs = client.app.state.gateway.jobs  # type: ignore[attr-defined]
    ids = [jobs.submit("nosuchkind", {}, tenant="default") for _ in range(27)]
    first = client.get("/console/jobs").text
    older = re.search(r'href="/console/jobs\?cursor=([^"]+)" rel="next"', first)
    assert older, first[-1500:]
    second = client.get(f"/console/jobs?cursor={older.group(1)}").text
    shown = re.findall(r'<a href="/console/jobs/([0-9a-f]+)">', first + second)
    assert sorted(shown) == sorted(ids) and len(shown) == 27


def test_a_running_job_can_be_cancelled(client: TestClient) -> None:
    if not callable(getattr(client.app.state.gateway.jobs, "cancel", None)):  # type: ignore[attr-defined]
        pytest.skip("JobRunner.cancel is not in this version yet")
    sign_in(client)
    client.app.state.gateway.jobs._closing = True  # type: ignore[attr-defined]  # no claims: the job stays queued
    job_id = client.app.state.gateway.jobs.submit("calibrate", {}, tenant="default")  # type: ignore[attr-defined]
    page = client.get(f"/console/jobs/{job_id}").text
    assert "Cancel this job" in page
    r = client.post(f"/console/jobs/{job_id}/cancel", data={"csrf": csrf(client)}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get(f"/console/jobs/{job_id}/progress.json").json()["status"] == "cancelled"
    again = client.post(f"/console/jobs/{job_id}/cancel", data={"csrf": csrf(client)})
    assert again.status_code == 409


# -- forms that change something -----------------------------------------------------------------------
POLICY = {"period.kind": "rolling", "period.window_s": "3600", "period.timezone": "", "period.terms": "",
          "cap_epsilon": "50", "cap_delta": "0.0001", "default_mechanism": "laplace", "default_epsilon": "2",
          "sensitivity": "assessed", "warning_fraction": "0.25"}


def test_the_policy_is_edited_with_the_apis_validation(client: TestClient) -> None:
    api_key = sign_in(client)
    r = client.post("/console/policy", data={**POLICY, "csrf": csrf(client, "/console/policy")})
    assert r.status_code == 200 and 'id="saved"' in r.text
    policy = client.app.state.gateway.policies.current("default")  # type: ignore[attr-defined]
    assert (policy.version, policy.cap_epsilon, policy.period.window_s) == (1, 50.0, 3600.0)
    assert policy.created_by == api_key.split("_")[1]  # the session's key id
    cases = [({"cap_epsilon": "lots"}, "cap_epsilon", "not a number"),
             ({"period.window_s": "10"}, "period-window_s", "greater than or equal to 60"),
             ({"period.kind": "day", "period.timezone": "Mars/Olympus"}, "period-timezone", "unknown time zone"),
             ({"period.kind": "term", "period.terms": "2026-09-01"}, "period-terms", "first and last day"),
             ({"default_mechanism": "magic"}, "default_mechanism", "Input should be"),
             ({"allow_unnoised": "on"}, "allow_unnoised", "FEDCD_ALLOW_UNNOISED=false")]
    for change, field, message in cases:
        r = client.post("/console/policy", data={**POLICY, **change, "csrf": csrf(client, "/console/policy")})
        assert r.status_code == 422, change
        errors = re.search(rf'<ul class="field-errors" id="err-{field}"[^>]*>(.*?)</ul>', r.text, re.DOTALL)
        assert errors and message in errors.group(1), (change, r.text[-3000:])
        assert f'value="{change.get("cap_epsilon", "50")}"' in r.text  # what was typed is kept
    assert client.app.state.gateway.policies.current("default").version == 1  # type: ignore[attr-defined]
    terms = client.post("/console/policy", data={**POLICY, "period.kind": "term", "csrf": csrf(client, "/console/policy"),
                                                 "period.terms": "2026-09-01 2026-12-18\n2027-01-05 2027-03-31"})
    assert terms.status_code == 200 and client.app.state.gateway.policies.current("default").version == 2  # type: ignore[attr-defined]
    assert "2027-01-05 2027-03-31" in client.get("/console/policy").text


def test_keys_are_created_shown_once_and_revoked(client: TestClient) -> None:
    sign_in(client)
    r = client.post("/console/keys", data={"csrf": csrf(client), "role": "client", "expires_days": "30"})
    assert r.status_code == 201
    new_key = re.search(r'id="new-key-value">(fcd_[^<]+)<', r.text).group(1)  # type: ignore[union-attr]
    assert client.app.state.gateway.keys.authenticate(new_key).role == "client"  # type: ignore[attr-defined]
    assert new_key not in client.get("/console/keys").text  # shown once
    key_id = new_key.split("_")[1]
    r = client.post(f"/console/keys/{key_id}/revoke", data={"csrf": csrf(client)}, follow_redirects=False)
    assert r.status_code == 303 and client.app.state.gateway.keys.authenticate(new_key) is None  # type: ignore[attr-defined]
    bad = client.post("/console/keys", data={"csrf": csrf(client), "role": "root", "expires_days": "-1"})
    assert bad.status_code == 422 and 'id="err-role"' in bad.text and 'id="err-expires_days"' in bad.text


def test_a_student_is_looked_up_exported_and_erased_by_post_only(client: TestClient) -> None:
    api_key = sign_in(client)
    _diagnose(client, api_key, "kid-7")
    _diagnose(client, api_key, "kid-7")  # a repeat: free
    page = client.post("/console/students", data={"csrf": csrf(client), "student_id": "kid-7"})
    assert page.status_code == 200 and 'id="charges"' in page.text and '<svg class="chart timeline"' in page.text
    assert re.search(r"ε 4 of 100", page.text)  # two entities answered at ε 2; the repeat cost nothing
    export = client.post("/console/students/export", data={"csrf": csrf(client), "student_id": "kid-7"})
    assert export.headers["content-disposition"].startswith("attachment;")
    body = json.loads(export.content)
    assert body["student_id"] == "kid-7" and len(body["diagnoses"]) == 1
    unconfirmed = client.post("/console/students/erase", data={"csrf": csrf(client), "student_id": "kid-7"})
    assert unconfirmed.status_code == 422 and 'id="err-confirm"' in unconfirmed.text
    erased = client.post("/console/students/erase", data={"csrf": csrf(client), "student_id": "kid-7", "confirm": "yes"})
    assert erased.status_code == 200 and 'id="erased"' in erased.text
    after = client.post("/console/students/export", data={"csrf": csrf(client), "student_id": "kid-7"}).json()
    assert after["diagnoses"] == [] and after["budget"]["spent_epsilon"] == 4.0  # erasure never resets a budget
    bad = client.post("/console/students", data={"csrf": csrf(client), "student_id": " padded"})
    assert bad.status_code == 422 and "whitespace" in bad.text


def test_the_assets_are_served_by_the_gateway(client: TestClient) -> None:
    sign_in(client)
    page = client.get("/console").text
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", page, re.IGNORECASE)  # no CDN, nothing off-host
    for asset, kind in (("console.css", "text/css"), ("console.js", "javascript")):
        assert f"/console/static/{asset}" in page
        r = client.get(f"/console/static/{asset}")
        assert r.status_code == 200 and kind in r.headers["content-type"] and len(r.content) > 500
    assert client.get("/console/static/../data.py").status_code == 404
    assert "/console" not in json.dumps(client.get("/openapi.json").json()["paths"])  # not part of the API


def test_names_from_the_data_are_escaped(client: TestClient) -> None:
    api_key = sign_in(client)
    hostile = "<img src=x onerror=alert(1)>"
    q = {"id": "hostile", "concepts": [hostile], "items": [{"id": "i1", "text": f"<script>{hostile}</script>",
                                                           "concepts": [hostile]}]}
    assert client.post("/v1/qmatrices", json=q, headers={"Authorization": f"Bearer {api_key}"}).status_code == 201
    page = client.get("/console/qmatrices/hostile").text
    assert hostile not in page and "<script>" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
