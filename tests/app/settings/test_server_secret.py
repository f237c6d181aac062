"""The server secret behind the keyed student ids (issue 30; README "Student data"): at least 32 bytes of key
material, a file an operator may place apart from the database (``FEDCD_SECRET_FILE``), and `fedcd students`
refusing — never inventing a secret — when it finds none."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app import Settings
from app.cli import cli
from app.pseudonyms import Pseudonyms, existing_server_secret, server_secret
from app.settings.students import WeakSecretError


@pytest.mark.parametrize("field, variable", [("secret_key", "FEDCD_SECRET_KEY"),
                                             ("console_secret_key", "FEDCD_CONSOLE_SECRET_KEY")])
def test_a_short_secret_is_refused_at_start_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, variable: str,
) -> None:
    # A 16-byte passphrase (accepted before) and a 31-byte one: both short of 32 bytes of key material
    for short in ("sixteen-byte-key", "x" * 31):
        monkeypatch.setenv(variable, short)
        with pytest.raises(WeakSecretError) as caught:
            Settings(state_dir=tmp_path)
        message = str(caught.value)
        assert variable in message and "32 bytes" in message and "secrets.token_urlsafe(48)" in message, message
        assert short not in message  # a secret is never echoed, not even a short one
    monkeypatch.setenv(variable, "x" * 32)
    assert getattr(Settings(state_dir=tmp_path), field).get_secret_value() == "x" * 32


def test_pseudonyms_refuse_a_short_secret() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Pseudonyms(b"s" * 16)
    assert len(Pseudonyms(b"s" * 32).key("t", "student")) == 64


def test_the_generated_secret_file_holds_32_random_bytes(tmp_path: Path) -> None:
    first = server_secret(Settings(state_dir=tmp_path / "one"))
    other = server_secret(Settings(state_dir=tmp_path / "two"))
    path = tmp_path / "one" / "server-secret"
    assert len(first) >= 32 and path.read_bytes() == first and first != other
    assert path.stat().st_mode & 0o777 == 0o600


def test_the_secret_file_can_live_outside_the_state_folder(tmp_path: Path) -> None:
    # Prepare: the database's folder, and the secret's own (kept out of the database's backups)
    settings = Settings(state_dir=tmp_path / "state", secret_file=tmp_path / "keys" / "fedcd-secret")
    # Execute
    secret = server_secret(settings)
    # Assert: created where named, never beside the database; read back from there
    assert (tmp_path / "keys" / "fedcd-secret").read_bytes() == secret
    assert (tmp_path / "keys" / "fedcd-secret").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "state" / "server-secret").exists()
    assert existing_server_secret(settings) == secret


@pytest.mark.parametrize("command", [["erase", "--json"], ["export"]])
def test_the_students_cli_refuses_a_state_folder_without_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str],
) -> None:
    # Prepare: a state folder with no server secret (a typo, or another host's folder)
    state = tmp_path / "elsewhere"
    monkeypatch.setenv("FEDCD_STATE_DIR", str(state))
    monkeypatch.delenv("FEDCD_SECRET_KEY", raising=False)
    monkeypatch.delenv("FEDCD_SECRET_FILE", raising=False)
    # Execute
    result = CliRunner().invoke(cli, ["students", command[0], "kid-1", "--tenant", "platform", *command[1:]])
    # Assert: a clear refusal; no secret (nor database) invented, nothing reported as done
    assert result.exit_code != 0, result.output
    assert "no server secret" in result.output and "FEDCD_SECRET_KEY" in result.output, result.output
    assert "removed" not in result.output
    assert not (state / "server-secret").exists() and not (state / "fedcd.db").exists()
