"""``Settings``: every group of settings in one pydantic-settings object, and where it is read from.

Each group (``app.settings.server``, ``.privacy`` …) is a mixin holding its fields and their validators;
``Settings`` inherits them all, so every ``FEDCD_*`` variable, YAML key and ``settings.<field>`` stays flat
and unchanged. What combines several groups (the federation's members, the registry folder, the repeat
window against retention) lives here. ``settings.privacy.cap_epsilon`` and the like are read-only views.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, computed_field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from app.settings.cache import CacheSettings
from app.settings.calibration import CalibrationSettings
from app.settings.circuits import CircuitSettings
from app.settings.federation import DroppedEntity, FederationSettings, entity_plan
from app.settings.jobs import JobSettings
from app.settings.limits import LimitSettings
from app.settings.observability import ObservabilitySettings
from app.settings.privacy import PrivacySettings
from app.settings.server import ServerSettings
from app.settings.students import StudentDataSettings
from app.settings.training import TrainingSettings
from providers import EntitySpec

__all__ = ["Settings", "SettingsView", "get_settings"]


class SettingsView:
    """A read-only view of one group: ``settings.privacy.cap_epsilon`` reads ``settings.privacy_cap_epsilon``.
    A name resolves to the group's field with the prefix first, then to the field as it is; the view holds no
    copy, so it always shows the settings object's current values."""

    __slots__ = ("_fields", "_prefix", "_settings")

    def __init__(self, settings: BaseModel, group: type[BaseModel], prefix: str = "") -> None:
        object.__setattr__(self, "_settings", settings)
        object.__setattr__(self, "_fields", frozenset(group.model_fields) | frozenset(group.model_computed_fields))
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        for field in (self._prefix + name, name):
            if field in self._fields:
                return getattr(self._settings, field)
        raise AttributeError(f"no setting {name!r} in this group (fields: {sorted(self._fields)})")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("settings views are read-only: set the field on the Settings object")

    def __dir__(self) -> list[str]:
        return sorted({f.removeprefix(self._prefix) for f in self._fields})


# Bases are listed last group first: pydantic collects fields base by base from the end of the MRO, so the
# server's fields come first in the schema and in ``model_dump`` (nothing depends on the order: it is for reading).
class Settings(
    ObservabilitySettings,
    JobSettings,
    CacheSettings,
    CircuitSettings,
    LimitSettings,
    StudentDataSettings,
    TrainingSettings,
    CalibrationSettings,
    FederationSettings,
    PrivacySettings,
    ServerSettings,
    BaseSettings,
):
    model_config = SettingsConfigDict(
        env_prefix="FEDCD_", env_nested_delimiter="__", extra="forbid", env_parse_none_str="null"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config = os.environ.get("FEDCD_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config:
            if not Path(config).is_file():
                raise FileNotFoundError(f"FEDCD_CONFIG points to {config}, which does not exist")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config))
        return tuple(sources)

    @model_validator(mode="after")
    def _diagnoses_outlive_the_repeat_window(self) -> Settings:
        # The repeat rule answers from the stored diagnosis: purging it sooner would make a repeat a fresh, paid query.
        days = self.retention_diagnoses_days
        if days is not None and days * 86400 < self.privacy_repeat_window_s:
            raise ValueError(f"retention_diagnoses_days ({days:g} days) is shorter than privacy_repeat_window_s "
                             f"({self.privacy_repeat_window_s:g} s): a repeat must find its stored diagnosis")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def registry_dir(self) -> Path:
        return self.model_registry_dir or (self.state_dir / "models")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def entity_specs(self) -> list[EntitySpec]:
        """The federation's members: what the gateway builds, ``/v1/entities`` lists, the privacy budget counts and
        each diagnosis reserves ε for. Declared entities (``enabled`` ones whose key is there), or the default
        federation: the embedded LLMs and hosted ones with keys; either way ``local-fed`` whenever ``local_fed`` is
        on, unless an entity of kind ``local_fed`` is declared (then the declaration decides). ``local-fed`` holds
        one model per Q-matrix and reads the registry on every request, so a model published while the gateway
        runs is served at once (``providers.local_fed``). Declared entities left out: :attr:`dropped_entities`."""
        return entity_plan(self.entities, local_fed=self.local_fed, registry_dir=self.registry_dir)[0]

    @property
    def dropped_entities(self) -> list[DroppedEntity]:
        """Declared entities left out of :attr:`entity_specs`, with why: disabled (``enabled: false``), or their
        key variable (``api_key_env``) unset or empty with no ``api_key`` (warned about once per process)."""
        return entity_plan(self.entities, local_fed=self.local_fed, registry_dir=self.registry_dir)[1]

    # -- read-only views by concern (the flat fields stay the API; these only group them for reading) -----------

    @property
    def server(self) -> SettingsView:
        return SettingsView(self, ServerSettings)

    @property
    def privacy(self) -> SettingsView:
        return SettingsView(self, PrivacySettings, "privacy_")

    @property
    def federation(self) -> SettingsView:
        return SettingsView(self, FederationSettings)

    @property
    def calibration(self) -> SettingsView:
        return SettingsView(self, CalibrationSettings)

    @property
    def training(self) -> SettingsView:
        return SettingsView(self, TrainingSettings, "train_")

    @property
    def student_data(self) -> SettingsView:
        return SettingsView(self, StudentDataSettings, "retention_")

    @property
    def limits(self) -> SettingsView:
        return SettingsView(self, LimitSettings, "max_")

    @property
    def circuits(self) -> SettingsView:
        return SettingsView(self, CircuitSettings, "circuit_")

    @property
    def cache(self) -> SettingsView:
        return SettingsView(self, CacheSettings, "cache_")

    @property
    def jobs(self) -> SettingsView:
        return SettingsView(self, JobSettings)

    @property
    def observability(self) -> SettingsView:
        return SettingsView(self, ObservabilitySettings)


@lru_cache
def get_settings() -> Settings:
    return Settings()
