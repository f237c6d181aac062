"""Adapter for Anthropic's Messages API through the official ``anthropic`` SDK.

Structured output uses ``output_config.format`` (a JSON schema). ``temperature`` is never
sent: the SDK's current API version rejects it (the spec's value is ignored, and the
entity listing says so).
"""

from __future__ import annotations

from typing import Any

import anthropic

from providers.config import EntitySpec
from providers.parsing import parse_billed
from providers.prompts import mastery_schema, system_prompt, user_prompt
from providers.sdk_errors import map_sdk_errors
from providers.types import EntityPrediction, PromptContext, TokenUsage
from providers.wrappers import timed

__all__ = ["AnthropicEntity"]


class AnthropicEntity:
    def __init__(self, spec: EntitySpec, *, api_key: str | None, http_client: Any = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=spec.base_url, max_retries=0, timeout=spec.timeout_s, http_client=http_client
        )

    async def respond(self, context: PromptContext) -> EntityPrediction:
        spec = self.spec
        kwargs: dict[str, Any] = {
            "model": spec.model,
            "max_tokens": spec.max_tokens,
            "system": system_prompt(context),
            "messages": [{"role": "user", "content": user_prompt(context)}],
        }
        if spec.structured_output != "none":
            kwargs["output_config"] = {"format": {"type": "json_schema", "schema": mastery_schema(context.concepts)}}
        elapsed = timed()
        with map_sdk_errors(anthropic, self.name):
            message = await self.client.messages.create(**kwargs)
            blocks = getattr(message, "content", None)
            if not isinstance(blocks, list):
                # The SDK hands back a non-JSON 200 body (e.g. a proxy's HTML page) as a plain str.
                raise ValueError("response is not a message")  # noqa: TRY004 - map_sdk_errors maps ValueError
            text = "".join(getattr(block, "text", "") for block in blocks)
            reported = getattr(message, "usage", None)
            usage = TokenUsage(
                prompt_tokens=getattr(reported, "input_tokens", 0) or 0,
                completion_tokens=getattr(reported, "output_tokens", 0) or 0,
            )
            parsed = parse_billed(text, context.concepts, usage)
        return EntityPrediction(
            entity=self.name,
            model=getattr(message, "model", None) or spec.model,
            status="partial" if parsed.missing else "ok",
            mastery=parsed.mastery,
            missing=parsed.missing,
            latency_ms=elapsed(),
            usage=usage,
            repairs=parsed.repairs,
        )

    async def aclose(self) -> None:
        await self.client.close()
