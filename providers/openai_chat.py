"""Adapters for OpenAI-style chat completions: OpenAI, Groq, and OpenAI-compatible servers
(Ollama, vLLM, llama.cpp server, LM Studio) through the ``openai`` SDK with ``base_url``.

Each adapter only translates: context → SDK call → ``EntityPrediction``. Retries,
deadlines and limits are wrappers (``providers.wrappers``); the SDK's own retries are off.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import groq
import openai

from providers.config import EntitySpec
from providers.parsing import parse_billed
from providers.prompts import build_messages, mastery_schema
from providers.sdk_errors import map_sdk_errors
from providers.types import EntityPrediction, PromptContext, TokenUsage
from providers.wrappers import timed

__all__ = ["GroqEntity", "OpenAIChatEntity", "response_format_for"]


def response_format_for(mode: str, concepts: tuple[str, ...]) -> dict[str, Any] | None:
    """The ``response_format`` for a structured-output mode.

    ``json_schema`` is OpenAI's strict schema (OpenAI, Groq, vLLM, Ollama); ``json_object``
    carries the schema alongside, which llama.cpp's server turns into a grammar.
    """
    schema = mastery_schema(concepts)
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "concept_mastery", "schema": schema, "strict": True}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


class _ChatCompletionsEntity:
    """Shared body of the OpenAI-style adapters; subclasses pick the SDK module and client."""

    sdk: ModuleType

    def __init__(self, spec: EntitySpec, client: Any) -> None:
        self.spec, self.client = spec, client
        self.name = spec.name

    async def respond(self, context: PromptContext) -> EntityPrediction:
        spec = self.spec
        kwargs: dict[str, Any] = {"model": spec.model, "messages": build_messages(context), "max_tokens": spec.max_tokens}
        if spec.temperature is not None:
            kwargs["temperature"] = spec.temperature
        fmt = response_format_for(spec.structured_output, context.concepts)
        if fmt is not None:
            kwargs["response_format"] = fmt
        elapsed = timed()
        with map_sdk_errors(self.sdk, self.name):
            completion = await self.client.chat.completions.create(**kwargs)
            choices = getattr(completion, "choices", None)
            if not choices:
                raise ValueError("completion has no choices")
            content = choices[0].message.content or ""
            reported = getattr(completion, "usage", None)
            usage = TokenUsage(
                prompt_tokens=getattr(reported, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(reported, "completion_tokens", 0) or 0,
            )
            parsed = parse_billed(content, context.concepts, usage)
        return EntityPrediction(
            entity=self.name,
            model=getattr(completion, "model", None) or spec.model,
            status="partial" if parsed.missing else "ok",
            mastery=parsed.mastery,
            missing=parsed.missing,
            latency_ms=elapsed(),
            usage=usage,
            repairs=parsed.repairs,
        )

    async def aclose(self) -> None:
        await self.client.close()


class OpenAIChatEntity(_ChatCompletionsEntity):
    """OpenAI, or any server speaking its chat-completions protocol (``base_url``)."""

    sdk = openai

    def __init__(self, spec: EntitySpec, *, api_key: str | None, http_client: Any = None) -> None:
        client = openai.AsyncOpenAI(
            # Local OpenAI-compatible servers need no key, but the SDK requires a value.
            api_key=api_key or "not-needed",
            base_url=spec.base_url,
            max_retries=0,
            timeout=spec.timeout_s,
            http_client=http_client,
        )
        super().__init__(spec, client)


class GroqEntity(_ChatCompletionsEntity):
    """LLaMA (and others) hosted by Groq, through the official ``groq`` SDK."""

    sdk = groq

    def __init__(self, spec: EntitySpec, *, api_key: str | None, http_client: Any = None) -> None:
        client = groq.AsyncGroq(
            api_key=api_key, base_url=spec.base_url, max_retries=0, timeout=spec.timeout_s, http_client=http_client
        )
        super().__init__(spec, client)
