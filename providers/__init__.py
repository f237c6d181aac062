"""Federation members: one ``Entity`` protocol, one adapter per backend, prompts and parsing."""

from providers.cache import CacheKey, CacheStore, CacheStoreUnavailable, MemoryCacheStore, ResponseCached
from providers.cache_redis import RedisCacheStore
from providers.circuit import CircuitBreakers, CircuitBroken, CircuitState, MemoryCircuitStore
from providers.circuit_redis import RedisCircuitStore
from providers.config import DEFAULT_EMBEDDED, DEFAULT_HOSTED, DEFAULT_TIER, EntityKind, EntitySpec, default_entity_specs
from providers.errors import (
    EntityCircuitOpen,
    EntityError,
    EntityParseError,
    EntityRejected,
    EntitySkipped,
    EntityTimeout,
    EntityUnavailable,
)
from providers.factory import build_adapter, build_entity
from providers.parsing import ParsedMastery, parse_mastery
from providers.pricing import FREE, Price, price_of
from providers.prompts import SYSTEM_PROMPT, build_messages, mastery_schema, user_prompt
from providers.types import Entity, EntityPrediction, MasteryUncertainty, PromptContext, PromptItem, Repair, TokenUsage
from providers.untrusted import scrub_untrusted_text
from providers.observed import Observed
from providers.wrappers import ConcurrencyLimited, RetryPolicy, Retrying, WithDeadline, build_chain

__all__ = [
    "DEFAULT_EMBEDDED",
    "DEFAULT_HOSTED",
    "DEFAULT_TIER",
    "FREE",
    "SYSTEM_PROMPT",
    "CacheKey",
    "CacheStore",
    "CacheStoreUnavailable",
    "CircuitBreakers",
    "CircuitBroken",
    "CircuitState",
    "ConcurrencyLimited",
    "Entity",
    "EntityCircuitOpen",
    "EntityError",
    "EntityKind",
    "EntityParseError",
    "EntityPrediction",
    "EntityRejected",
    "EntitySkipped",
    "EntitySpec",
    "EntityTimeout",
    "EntityUnavailable",
    "MasteryUncertainty",
    "MemoryCacheStore",
    "MemoryCircuitStore",
    "Observed",
    "ParsedMastery",
    "Price",
    "PromptContext",
    "PromptItem",
    "RedisCacheStore",
    "RedisCircuitStore",
    "Repair",
    "ResponseCached",
    "RetryPolicy",
    "Retrying",
    "TokenUsage",
    "WithDeadline",
    "build_adapter",
    "build_chain",
    "build_entity",
    "build_messages",
    "default_entity_specs",
    "mastery_schema",
    "parse_mastery",
    "price_of",
    "scrub_untrusted_text",
    "user_prompt",
]
