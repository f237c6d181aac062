"""Which entities form the federation and how a diagnosis asks them (``FEDCD_ENTITIES``, ``FEDCD_LOCAL_FED`` …).

Declared entities keep ``local-fed`` too, unless ``local_fed`` is off or one of them is of kind
``local_fed`` (that declaration is then used instead, ``enabled: false`` dropping it). A declared
entity whose key variable (``api_key_env``) is unset or empty, with no ``api_key``, is dropped: it
counts nowhere, and a warning names it once per process. :func:`entity_plan` is the one place that
decides (``Settings.entity_specs`` and ``Settings.dropped_entities`` read it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from providers import EntitySpec, default_entity_specs

__all__ = ["LOCAL_FED_NAME", "DroppedEntity", "FederationSettings", "entity_plan"]

log = logging.getLogger("fedcd.settings")

LOCAL_FED_NAME = "local-fed"

# (entity, variable) pairs already warned about in this process: the warning is logged once, however often the
# settings are read (the gateway, the CLI, each Settings object).
_WARNED_MISSING_KEYS: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class DroppedEntity:
    """A declared entity left out of the federation, and why (``missing_env``: the unset key variable)."""

    name: str
    kind: str
    reason: str
    missing_env: str | None = None


class FederationSettings(BaseModel):
    """The federation's members and the defaults of how a diagnosis asks them."""

    # Declared entities; None means the default federation (see module docstring).
    entities: list[EntitySpec] | None = None
    local_fed: bool = Field(
        default=True, description="serve the federated-trained models (one per Q-matrix) as entity 'local-fed'"
    )
    # Selective federation (README "Selective federation"): ask tier 0 first, the paid tiers only when it is unsure.
    # Not the default: on FrcSub the bench cannot resolve an AUC change of 0.005 (its 95 % interval is ±0.02).
    # `calibrated` by default: an entity the calibration gives no weight moves no diagnosis, so asking it only costs
    # the student ε and the server time (issue 21: the embedded LLMs, weight 0 on real data, doubled ε per diagnosis).
    federation_default: Literal["all", "calibrated", "selective"] = Field(
        default="calibrated", description="federation mode of a request that names none: all asks every entity; "
        "calibrated leaves out those the calibration gives no weight; selective also asks tier by tier"
    )
    # 0.8: the largest measured threshold within 0.005 held-out AUC of `all` on both FrcSub and ASSIST0910 at the
    # default noise (docs/results/cost/, `fedcd bench cost`); the width depends on the noise, so re-measure if it changes.
    selective_threshold: float = Field(
        default=0.8, gt=0, le=1,
        description="selective federation stops once every assessed concept's credible interval is narrower than "
        "this (docs/results/cost/: fedcd bench cost)",
    )
    request_deadline_s: float | None = Field(
        default=None, gt=0,
        description="one deadline for a whole diagnosis, every tier included; null: the longest deadline_s of the "
        "entities it selects (so selective never waits longer than asking all at once)",
    )
    batch_concurrency: int = Field(default=4, ge=1, description="students diagnosed at once in a batch")

    @model_validator(mode="after")
    def _local_fed_name_is_free(self) -> FederationSettings:
        declared = self.entities or []
        if (self.local_fed and not any(s.kind == "local_fed" for s in declared)
                and any(s.name == LOCAL_FED_NAME for s in declared)):
            raise ValueError(
                f"entity name {LOCAL_FED_NAME!r} is the federated-trained model's, kept with declared entities: "
                "declare it with kind local_fed, rename the entity, or set FEDCD_LOCAL_FED=false"
            )
        return self


def entity_plan(
    entities: list[EntitySpec] | None, *, local_fed: bool, registry_dir: Path
) -> tuple[list[EntitySpec], list[DroppedEntity]]:
    """The federation's members and the declared entities left out, with why. ``registry_dir`` is where
    ``local-fed`` reads its models (a separate argument: it is derived from the storage settings)."""
    if entities is None:
        specs = default_entity_specs()  # hosted defaults join only with their key: nothing to drop or warn
        if local_fed:
            specs.append(_default_local_fed(registry_dir))
        return specs, []
    declared = list(entities)
    if local_fed and not any(s.kind == "local_fed" for s in declared):
        declared.append(_default_local_fed(registry_dir))
    usable: list[EntitySpec] = []
    dropped: list[DroppedEntity] = []
    for spec in declared:
        if not spec.enabled:
            dropped.append(DroppedEntity(spec.name, spec.kind, "disabled in its declaration (enabled: false)"))
        elif (missing := _missing_key_env(spec)) is not None:
            dropped.append(DroppedEntity(
                spec.name, spec.kind, f"its API key variable {missing} is not set", missing_env=missing,
            ))
            if (spec.name, missing) not in _WARNED_MISSING_KEYS:
                _WARNED_MISSING_KEYS.add((spec.name, missing))
                log.warning("entity %r dropped: its API key variable %s is not set (api_key_env); it is not "
                            "asked, listed or counted in any privacy budget", spec.name, missing)
        else:
            usable.append(spec)
    return usable, dropped


def _default_local_fed(registry_dir: Path) -> EntitySpec:
    return EntitySpec(
        name=LOCAL_FED_NAME, kind="local_fed", model="federated-cdm", model_path=str(registry_dir),
        concurrency=64, temperature=None, structured_output="none",
    )


def _missing_key_env(spec: EntitySpec) -> str | None:
    """The key variable ``spec`` names (``api_key_env``) when it is unset or empty and no ``api_key`` is given."""
    if spec.api_key_env and spec.resolved_api_key() is None:
        return spec.api_key_env
    return None
