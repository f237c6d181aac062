"""Turning an entity's raw answer into a validated mastery vector — the one repair rule.

The rule, applied per concept, every application recorded as a ``Repair``:

1. **Find the JSON.** The answer must hold one JSON object. Surrounding prose or code
   fences are stripped (``extracted_json``); an object nested under a single key such as
   ``{"mastery": {...}}`` is unwrapped (``unwrapped``).
2. **Match keys.** Keys are matched to the requested concepts exactly, else ignoring case
   and surrounding whitespace (``key_normalised``). Keys for concepts not asked about are
   dropped (``extra_key``).
3. **Read values.** A number in [0, 1] is kept. A string holding a number is read as that
   number (``numeric_string``); a trailing ``%`` means percent (``percent``). A number in
   (1, 100] is read as a percentage and divided by 100 (``percent``: 8 → 0.08, 25 → 0.25,
   "85%" → 0.85). Anything else — negative, above 100, NaN, booleans, lists, text — is
   unusable for that concept (``unusable_value``).
4. **Missing concepts stay missing** (``missing``): no value is invented, never 0.5.
   The prediction is ``partial`` and aggregation averages each concept over the entities
   that answered it.
5. If no requested concept has a usable value, the answer is unrepairable:
   ``EntityParseError`` and the entity counts as failed for that request.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from providers.errors import EntityParseError
from providers.types import Repair, TokenUsage

__all__ = ["ParsedMastery", "parse_billed", "parse_mastery"]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


class ParsedMastery(BaseModel):
    mastery: dict[str, float] = Field(description="concept -> value in [0, 1]")
    missing: list[str]
    repairs: list[Repair]


class _UnitInterval(BaseModel):
    value: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)


def _extract_object(raw: str, repairs: list[Repair]) -> dict[str, Any]:
    text = raw.strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        obj = None
        candidates = [m.group(1) for m in _FENCE.finditer(text)]
        start, end = text.find("{"), text.rfind("}")
        if start != -1 and end > start:
            candidates.append(text[start : end + 1])
        for candidate in candidates:
            try:
                obj = json.loads(candidate.strip())
                repairs.append(Repair(rule="extracted_json", detail="JSON object found inside surrounding text"))
                break
            except json.JSONDecodeError:
                continue
        if obj is None:
            raise EntityParseError("answer holds no parsable JSON object", raw_excerpt=text)
    if not isinstance(obj, dict):
        raise EntityParseError(f"answer is JSON {type(obj).__name__}, not an object", raw_excerpt=text)
    return obj


def _read_value(value: Any) -> tuple[float | None, str | None]:
    """Return (value in [0,1] or None, repair rule applied or None)."""
    rule: str | None = None
    if isinstance(value, bool) or value is None:
        return None, None
    if isinstance(value, str):
        s = value.strip()
        percent = s.endswith("%")
        try:
            value = float(s.rstrip("%").strip())
        except ValueError:
            return None, None
        rule = "percent" if percent else "numeric_string"
    if not isinstance(value, (int, float)):
        return None, None
    try:
        number = float(value)
    except OverflowError:  # a JSON integer too large for a float
        return None, None
    if math.isnan(number) or math.isinf(number):
        return None, None
    # A percentage, whether written "85%" or 85: read on the 0-100 scale.
    if rule == "percent" or 1.0 < number <= 100.0:
        if not 0.0 <= number <= 100.0:
            return None, None
        number, rule = number / 100.0, "percent"
    try:
        return _UnitInterval(value=number).value, rule
    except ValidationError:
        return None, None


def parse_mastery(raw: str | dict[str, Any], concepts: tuple[str, ...] | list[str]) -> ParsedMastery:
    """Apply the repair rule to ``raw`` (text, or an already-decoded object) for ``concepts``."""
    repairs: list[Repair] = []
    obj = raw if isinstance(raw, dict) else _extract_object(raw, repairs)
    wanted = set(concepts)
    if len(obj) == 1 and not (set(obj) & wanted):
        (key, inner), = obj.items()
        if isinstance(inner, dict):
            obj = inner
            repairs.append(Repair(rule="unwrapped", detail=f"values read from under key {key!r}"))
    folded = {c.strip().casefold(): c for c in concepts}
    matched: dict[str, Any] = {}
    for key, value in obj.items():
        if key in wanted:
            matched[key] = value
        elif isinstance(key, str) and key.strip().casefold() in folded:
            concept = folded[key.strip().casefold()]
            matched.setdefault(concept, value)
            repairs.append(Repair(rule="key_normalised", concept=concept, detail=f"key {key!r}"))
        else:
            repairs.append(Repair(rule="extra_key", detail=f"dropped key {str(key)[:60]!r}"))
    mastery: dict[str, float] = {}
    missing: list[str] = []
    for concept in concepts:
        if concept not in matched:
            missing.append(concept)
            repairs.append(Repair(rule="missing", concept=concept))
            continue
        value, rule = _read_value(matched[concept])
        if value is None:
            missing.append(concept)
            repairs.append(Repair(rule="unusable_value", concept=concept, detail=repr(matched[concept])[:60]))
            continue
        if rule:
            repairs.append(Repair(rule=rule, concept=concept, detail=f"{matched[concept]!r} -> {value:g}"))
        mastery[concept] = value
    if not mastery:
        raise EntityParseError(
            f"no usable mastery value for any of {len(concepts)} concepts", raw_excerpt=json.dumps(obj)[:200]
        )
    return ParsedMastery(mastery=mastery, missing=missing, repairs=repairs)


def parse_billed(raw: str, concepts: tuple[str, ...] | list[str], usage: TokenUsage) -> ParsedMastery:
    """``parse_mastery`` of an answer the provider billed ``usage`` for: an unreadable one carries that usage
    on its ``EntityParseError`` (the tokens were spent all the same)."""
    try:
        return parse_mastery(raw, concepts)
    except EntityParseError as exc:
        exc.usage = usage
        raise
