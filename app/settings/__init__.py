"""All gateway settings in one pydantic-settings object, grouped by concern.

Sources, highest priority first: constructor arguments (tests), environment variables
(``FEDCD_*``; nested with ``__``, e.g. ``FEDCD_DEFAULT_EPSILON=2``), a YAML config file
named by ``FEDCD_CONFIG``, then defaults. Entities are declared under ``entities``; when
none are declared, the default federation is used: the embedded ``smollm2`` and ``gemma3``,
each hosted provider whose API key (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``GROQ_API_KEY``) is set, and ``local-fed`` when ``local_fed`` is on (``app.settings.federation``
says which declared entities are kept).

The fields live in one mixin per concern (``server``, ``privacy``, ``federation``, ``calibration``,
``training``, ``students``, ``limits``, ``circuits``, ``cache``, ``jobs``, ``observability``), each with its
validators; :class:`Settings` (``app.settings.core``) inherits them all, so the fields stay flat:
``settings.privacy_cap_epsilon``, ``FEDCD_PRIVACY_CAP_EPSILON``. ``settings.privacy.cap_epsilon`` reads the
same value through a read-only view of the group.
"""

from app.settings.cache import CacheSettings
from app.settings.calibration import CalibrationSettings
from app.settings.circuits import CircuitSettings
from app.settings.core import Settings, SettingsView, get_settings
from app.settings.federation import LOCAL_FED_NAME, DroppedEntity, FederationSettings
from app.settings.jobs import JobSettings
from app.settings.limits import LimitSettings
from app.settings.observability import ObservabilitySettings
from app.settings.privacy import PrivacySettings
from app.settings.server import ServerSettings, is_loopback
from app.settings.students import StudentDataSettings
from app.settings.training import TrainingSettings

__all__ = [
    "LOCAL_FED_NAME",
    "CacheSettings",
    "CalibrationSettings",
    "CircuitSettings",
    "DroppedEntity",
    "FederationSettings",
    "JobSettings",
    "LimitSettings",
    "ObservabilitySettings",
    "PrivacySettings",
    "ServerSettings",
    "Settings",
    "SettingsView",
    "StudentDataSettings",
    "TrainingSettings",
    "get_settings",
    "is_loopback",
]
