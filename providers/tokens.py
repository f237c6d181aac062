"""An ESTIMATE of token counts, for entities that call no tokenizer (the simulated ones).

No tokenizer ships with fedcd (tiktoken is not a dependency), so counts here are estimated by
the rule of thumb the vendors publish for English text: about 4 characters per token
(``ceil(chars / 4)``), plus a fixed overhead per chat message for the role markers. Hosted
adapters never use this: they report what the provider billed. Anything computed from these
numbers (a simulated entity's dollar cost) is labelled an estimate where it is shown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

from providers.prompts import build_messages
from providers.types import PromptContext, TokenUsage

__all__ = ["CHARS_PER_TOKEN", "MESSAGE_OVERHEAD_TOKENS", "estimate_tokens", "estimate_usage"]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4  # role and separator tokens of one chat message (OpenAI's published ~3-4)


def estimate_tokens(text: str) -> int:
    """ceil(len(text) / 4): an estimate, not a tokenizer."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _prompt_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    return sum(estimate_tokens(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def estimate_usage(context: PromptContext, answer: Mapping[str, float]) -> TokenUsage:
    """Estimated usage of asking ``context`` with the real prompt (``providers.prompts``) and getting
    ``answer`` back as the JSON object a hosted model returns (values to 2 decimals)."""
    completion = json.dumps({concept: round(value, 2) for concept, value in answer.items()})
    return TokenUsage(prompt_tokens=_prompt_tokens(build_messages(context)), completion_tokens=estimate_tokens(completion))
