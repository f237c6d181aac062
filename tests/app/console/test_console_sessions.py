"""Console sessions apart from student data (issue 30): their own secret, a sign-out that ends copied cookies, and
the ``Secure`` flag forced behind a TLS-terminating proxy (README "Console", security model)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.console.session import COOKIE, LOGIN_COOKIE, verify_session
from app.console.web import session_secret
from tests.app.console.test_console import csrf, sign_in
from tests.conftest import make_client
from tests.factories import FakeEntity

STUDENT = "kid-console-7781"


def _client(tmp_path: Path, **settings: object) -> TestClient:
    client = make_client(tmp_path, {"a": FakeEntity("a")}, **settings)
    client.headers.pop("Authorization")
    return client


def _signed_in(client: TestClient) -> bool:
    r = client.get("/console", follow_redirects=False)
    assert r.status_code in (200, 303), r.text[:500]
    return r.status_code == 200


def test_a_cookie_copied_before_sign_out_is_refused_after_it(tmp_path: Path, both_engines: str) -> None:
    with _client(tmp_path) as client:
        # Prepare: a session, and a copy of its cookie (another browser, or a stolen one)
        api_key = sign_in(client)
        copied = client.cookies.get(COOKIE)
        assert copied and _signed_in(client)
        # Execute: sign out, then replay the copy
        r = client.post("/console/logout", data={"csrf": csrf(client)}, follow_redirects=False)
        assert r.status_code == 303
        client.cookies.set(COOKIE, copied, path="/console")
        # Assert: refused (the signature is still good: the server remembers the sign-out)
        assert not _signed_in(client)
        # ... and the same key signs in afresh
        sign_in(client, key=api_key)
        assert _signed_in(client)


def test_sign_out_is_remembered_across_a_restart(tmp_path: Path, both_engines: str) -> None:
    with _client(tmp_path, console_secret_key="c" * 40) as client:
        sign_in(client)
        copied = client.cookies.get(COOKIE)
        client.post("/console/logout", data={"csrf": csrf(client)}, follow_redirects=False)
    with _client(tmp_path, console_secret_key="c" * 40) as client:  # a new process, the same database
        client.cookies.set(COOKIE, copied, path="/console")
        assert not _signed_in(client)


def test_changing_the_console_secret_ends_sessions_but_keeps_student_keys(tmp_path: Path) -> None:
    # Prepare: a session under one console secret, and a student's stored key
    with _client(tmp_path, console_secret_key="a" * 40) as client:
        sign_in(client)
        cookie = client.cookies.get(COOKIE)
        student_key = client.app.state.gateway.pseudonyms.key("default", STUDENT)  # type: ignore[attr-defined]
        # The session is not signed under the student-id secret
        assert verify_session(client.app.state.gateway.pseudonyms.secret, cookie) is None  # type: ignore[attr-defined]
    # Control: the same secret after a restart keeps the session
    with _client(tmp_path, console_secret_key="a" * 40) as client:
        client.cookies.set(COOKIE, cookie, path="/console")
        assert _signed_in(client)
    # Execute: rotate the console secret
    with _client(tmp_path, console_secret_key="b" * 40) as client:
        client.cookies.set(COOKIE, cookie, path="/console")
        # Assert: the session ended; every student keeps their key (budgets untouched)
        assert not _signed_in(client)
        assert client.app.state.gateway.pseudonyms.key("default", STUDENT) == student_key  # type: ignore[attr-defined]


def test_without_a_setting_the_console_secret_is_its_own_0600_file(tmp_path: Path) -> None:
    with _client(tmp_path) as client:
        sign_in(client)
        cookie = client.cookies.get(COOKIE)
        student_key = client.app.state.gateway.pseudonyms.key("default", STUDENT)  # type: ignore[attr-defined]
        assert session_secret(client.app) == (tmp_path / "console-secret").read_bytes()  # type: ignore[arg-type]
    path = tmp_path / "console-secret"
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_bytes()) >= 32
    assert path.read_bytes() != (tmp_path / "server-secret").read_bytes()
    # Deleting the file rotates it: sessions end, student keys stay
    path.unlink()
    with _client(tmp_path) as client:
        client.cookies.set(COOKIE, cookie, path="/console")
        assert not _signed_in(client)
        assert client.app.state.gateway.pseudonyms.key("default", STUDENT) == student_key  # type: ignore[attr-defined]


def _set_cookies(client: TestClient, secure: bool | str) -> list[str]:
    key = client.app.state.gateway.keys.create(tenant="default", role="admin").api_key  # type: ignore[attr-defined]
    form = client.get("/console/login")
    login = [c for c in form.headers.get_list("set-cookie") if c.startswith(f"{LOGIN_COOKIE}=")]
    token = form.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    client.cookies.set(LOGIN_COOKIE, login[0].split(";")[0].split("=", 1)[1], path="/console")
    r = client.post("/console/login", data={"api_key": key, "csrf": token}, follow_redirects=False)
    assert r.status_code == 303, (secure, r.text[:500])
    return login + [c for c in r.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}=")]


def test_the_secure_flag_can_be_forced_behind_a_tls_proxy(tmp_path: Path) -> None:
    # Plain http (the proxy terminated TLS and forwards no scheme): Secure all the same
    with _client(tmp_path / "forced", console_secure_cookie=True) as client:
        cookies = _set_cookies(client, True)
        assert len(cookies) == 2 and all("secure" in c.lower().split("; ") for c in cookies), cookies
    # auto (the default) follows the request's scheme, as before
    with _client(tmp_path / "auto") as client:
        cookies = _set_cookies(client, "auto")
        assert len(cookies) == 2 and not any("secure" in c.lower().split("; ") for c in cookies), cookies
    # false: never, even over https
    with _client(tmp_path / "never", console_secure_cookie=False) as client:
        client.base_url = "https://console.example"  # type: ignore[assignment]
        cookies = _set_cookies(client, False)
        assert len(cookies) == 2 and not any("secure" in c.lower().split("; ") for c in cookies), cookies
