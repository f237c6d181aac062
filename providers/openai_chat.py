"""Adapters for OpenAI-style chat completions: OpenAI, Groq, and OpenAI-compatible servers
(Ollama, vLLM, llama.cpp server, LM Studio) through the ``openai`` SDK with ``base_url``.

Each adapter only translates: context → SDK call → ``EntityPrediction``. Retries,
deadlines and limits are wrappers (``providers.wrappers``); the SDK's own retries are off.

The call goes through the SDK's documented low-level verb (``client.post(path, body=…, cast_to=bytes)``,
README "Undocumented endpoints") rather than ``chat.completions.create``: the same client, base URL,
auth headers, timeouts, connection pool and error classes, without the SDK's per-call request-body
transform and response-model construction (``fedcd bench gateway``'s ``sdk`` row measures this path). The reply is parsed here, strictly: any shape other than a chat completion
is a parse error, as the typed path would have made it.
"""

from __future__ import annotations

import json
from functools import lru_cache
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

__all__ = ["ChatCompletionReply", "ChatCompletionsEntity", "GroqEntity", "OpenAIChatEntity", "response_format_for"]


@lru_cache(maxsize=4096)
def response_format_for(mode: str, concepts: tuple[str, ...]) -> dict[str, Any] | None:
    """The ``response_format`` for a structured-output mode (cached per concept tuple: treat it as read-only).

    ``json_schema`` is OpenAI's strict schema (OpenAI, Groq, vLLM, Ollama); ``json_object``
    carries the schema alongside, which llama.cpp's server turns into a grammar.
    """
    schema = mastery_schema(concepts)
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "concept_mastery", "schema": schema, "strict": True}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


class ChatCompletionReply:
    """The parts of a chat-completions reply fedcd reads: the first choice's text, the model, token usage."""

    __slots__ = ("content", "model", "usage")

    def __init__(self, content: str, model: str, usage: TokenUsage) -> None:
        self.content, self.model, self.usage = content, model, usage

    @classmethod
    def parse(cls, body: bytes) -> ChatCompletionReply:
        """Raises ``ValueError`` (a parse error for ``map_sdk_errors``) on anything but a chat completion."""
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("completion is not a JSON object")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ValueError("completion has no choices")
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        if not isinstance(message, dict):
            raise ValueError("completion choice has no message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError("completion message content is not text")
        model = data.get("model")
        return cls(content or "", model if isinstance(model, str) else "", _usage(data.get("usage")))


def _usage(value: object) -> TokenUsage:
    """Token counts as the provider reported them; absent or malformed counts are 0 (nothing billed is invented)."""
    if not isinstance(value, dict):
        return TokenUsage()
    counts = {key: value.get(key) for key in ("prompt_tokens", "completion_tokens")}
    return TokenUsage(**{key: n for key, n in counts.items() if isinstance(n, int) and not isinstance(n, bool) and n >= 0})


class ChatCompletionsEntity:
    """Shared body of the OpenAI-style adapters; subclasses pick the SDK module and client."""

    sdk: ModuleType
    path: str  # the SDK's own path for chat completions, relative to its base URL

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
        with self._errors():
            body = await self._post(kwargs)
            completion = ChatCompletionReply.parse(body)
            parsed = parse_billed(completion.content, context.concepts, completion.usage)
        return EntityPrediction(
            entity=self.name,
            model=completion.model or spec.model,
            status="partial" if parsed.missing else "ok",
            mastery=parsed.mastery,
            missing=parsed.missing,
            latency_ms=elapsed(),
            usage=completion.usage,
            repairs=parsed.repairs,
        )

    async def _post(self, body: dict[str, Any]) -> bytes:
        """The reply's body, through the SDK's documented low-level verb."""
        return await self.client.post(self.path, body=body, cast_to=bytes)

    def _errors(self) -> Any:
        """A context manager turning what ``_post`` and the parsing raise into ``providers.errors``."""
        return map_sdk_errors(self.sdk, self.name)

    async def aclose(self) -> None:
        await self.client.close()


class OpenAIChatEntity(ChatCompletionsEntity):
    """OpenAI, or any server speaking its chat-completions protocol (``base_url``)."""

    sdk = openai
    path = "/chat/completions"

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


class GroqEntity(ChatCompletionsEntity):
    """LLaMA (and others) hosted by Groq, through the official ``groq`` SDK."""

    sdk = groq
    path = "/openai/v1/chat/completions"

    def __init__(self, spec: EntitySpec, *, api_key: str | None, http_client: Any = None) -> None:
        client = groq.AsyncGroq(
            api_key=api_key, base_url=spec.base_url, max_retries=0, timeout=spec.timeout_s, http_client=http_client
        )
        super().__init__(spec, client)
