"""Settings: defaults, environment, YAML config file, and the default federation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic_settings import EnvSettingsSource

from app import Settings
from providers import default_entity_specs


def test_default_federation_is_the_embedded_pair_and_local_fed_without_keys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY", "FEDCD_ENTITIES", "FEDCD_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    assert [s.name for s in Settings(state_dir=tmp_path).entity_specs] == ["smollm2", "gemma3", "local-fed"]


def test_local_fed_is_configured_before_any_model_is_published(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # local-fed reads the registry per request (a Q-matrix without a model skips it), so it is
    # configured whenever local_fed is on, even with an empty registry.
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY", "FEDCD_ENTITIES", "FEDCD_CONFIG"):
        monkeypatch.delenv(key, raising=False)
    assert not (tmp_path / "models").exists()
    specs = Settings(state_dir=tmp_path).entity_specs
    assert [s.name for s in specs] == ["smollm2", "gemma3", "local-fed"]
    assert specs[-1].kind == "local_fed" and specs[-1].model_path == str(tmp_path / "models")
    assert [s.name for s in Settings(state_dir=tmp_path, local_fed=False).entity_specs] == ["smollm2", "gemma3"]


def test_hosted_entities_join_only_when_their_key_is_set() -> None:
    names = [s.name for s in default_entity_specs({"ANTHROPIC_API_KEY": "sk-test"})]
    assert names == ["smollm2", "gemma3", "claude"]
    all_keys = {"OPENAI_API_KEY": "a", "ANTHROPIC_API_KEY": "b", "GROQ_API_KEY": "c"}
    specs = {s.name: s for s in default_entity_specs(all_keys)}
    assert specs["gpt"].model == "gpt-4o-mini"
    assert specs["llama"].model == "llama-3.3-70b-versatile"
    assert specs["claude"].temperature is None  # Anthropic's API version rejects temperature


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCD_DEFAULT_EPSILON", "4.5")
    monkeypatch.setenv(
        "FEDCD_ENTITIES", '[{"name": "local", "kind": "openai_compatible", "base_url": "http://127.0.0.1:9/v1", "model": "m"}]'
    )
    settings = Settings()
    assert settings.default_epsilon == 4.5
    # declared entities keep local-fed (README, Configuration)
    assert [s.name for s in settings.entity_specs] == ["local", "local-fed"]


def test_yaml_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "fedcd.yaml"
    config.write_text(
        "default_epsilon: 3.0\n"
        "entities:\n"
        "  - {name: gpt, kind: openai, model: gpt-4o, api_key_env: MY_KEY, temperature: 0.2}\n"
        "  - {name: spare, kind: groq, model: x, enabled: false}\n"
    )
    monkeypatch.setenv("FEDCD_CONFIG", str(config))
    monkeypatch.setenv("MY_KEY", "sk-test")
    monkeypatch.setenv("FEDCD_LOCAL_FED", "false")
    settings = Settings()
    assert settings.default_epsilon == 3.0
    assert [(s.name, s.model, s.temperature) for s in settings.entity_specs] == [("gpt", "gpt-4o", 0.2)]
    assert [(d.name, d.reason) for d in settings.dropped_entities] == [
        ("spare", "disabled in its declaration (enabled: false)")
    ]


def test_missing_config_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEDCD_CONFIG", str(tmp_path / "absent.yaml"))
    with pytest.raises(FileNotFoundError, match="absent.yaml"):
        Settings()


def test_invalid_entity_declarations_are_refused() -> None:
    with pytest.raises(ValueError, match="base_url"):
        Settings(entities=[{"name": "x", "kind": "openai_compatible", "model": "m"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="packaged_model"):
        Settings(entities=[{"name": "x", "kind": "llamacpp"}])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        Settings(default_epsilon=0)


# Variables the README documents that are not gateway settings: the YAML file's name, the CLI's and the fuzz
# tests' variables, the embedded model folder (read by providers), and prefixes quoted in prose.
# Variables the README names that are not server settings: the CLI's and the tests' own (FEDCD_SCREENSHOTS: where the
# browser tests write their screenshots), and prefixes written as such.
# FEDCD_BASE_URL: the Python client's (clients/python), quoted in the README's example; FEDCD_TEST_IMAGE: the
# container image test's (docs/container.md).
NOT_SETTINGS = {"FEDCD_CONFIG", "FEDCD_API_KEY", "FEDCD_MODEL_DIR", "FEDCD_FUZZ_KEY", "FEDCD_FUZZ_MAX_EXAMPLES",
                "FEDCD_FUZZ_SEED", "FEDCD_SCREENSHOTS", "FEDCD_BASE_URL", "FEDCD_TEST_IMAGE", "FEDCD_", "FEDCD_DEFAULT_",
                "FEDCD_RETENTION_"}
GROUP_VIEWS = ["server", "privacy", "federation", "calibration", "training", "student_data", "limits", "circuits",
               "cache", "jobs", "observability"]


def test_every_variable_the_readme_documents_reaches_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: the variables the README and the docs site's pages document; each set to its setting's default, as
    # the environment would give it
    root = Path(__file__).resolve().parents[3]
    docs = "\n".join(page.read_text() for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    documented = set(re.findall(r"FEDCD_[A-Z0-9_]*", docs)) - NOT_SETTINGS
    defaults = Settings(state_dir=Path("/nonexistent")).model_dump(mode="json")
    for variable in documented:
        field = variable.removeprefix("FEDCD_").lower()
        assert field in Settings.model_fields, f"the docs document {variable}, which no setting reads"
        value = defaults[field]
        monkeypatch.setenv(variable, value if isinstance(value, str) else json.dumps(value))
    # Execute: what the environment source hands the settings (before validation)
    from_env = EnvSettingsSource(Settings, case_sensitive=False, env_prefix="FEDCD_", env_nested_delimiter="__",
                                 env_parse_none_str="null")()
    # Assert
    assert {f"FEDCD_{name.upper()}" for name in from_env} >= documented


def test_grouped_views_read_the_flat_fields(tmp_path: Path) -> None:
    # Prepare
    settings = Settings(state_dir=tmp_path, privacy_cap_epsilon=7.0, cache_ttl_s=5.0, max_batch_size=3)
    # Execute / Assert: a view reads the field, with or without the group's prefix, and writes nothing
    assert settings.privacy.cap_epsilon == settings.privacy.privacy_cap_epsilon == 7.0
    assert settings.cache.ttl_s == 5.0 and settings.limits.batch_size == 3
    assert settings.server.db_url == settings.db_url
    with pytest.raises(AttributeError):
        settings.privacy.cap_epsilon = 1.0
    with pytest.raises(AttributeError):
        settings.privacy.ttl_s  # noqa: B018 - a field of another group
    # Every field belongs to exactly one group
    owners = {field: [view for view in GROUP_VIEWS if field in getattr(settings, view)._fields]
              for field in Settings.model_fields}
    assert {field: views for field, views in owners.items() if len(views) != 1} == {}
