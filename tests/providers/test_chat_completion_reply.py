"""The chat-completions reply as fedcd reads it off the SDK's low-level call: anything but a chat completion is a
parse error, token counts are what the provider reported (never invented)."""

from __future__ import annotations

import json

import pytest

from providers.openai_chat import ChatCompletionReply


def _body(**overrides: object) -> bytes:
    reply = {"id": "x", "model": "m-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}}],
             "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}
    reply.update(overrides)
    return json.dumps(reply).encode()


def test_a_chat_completion_gives_its_text_model_and_usage() -> None:
    reply = ChatCompletionReply.parse(_body())
    assert (reply.content, reply.model) == ("{}", "m-1")
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (12, 5)


def test_null_content_is_empty_text_and_missing_usage_is_zero() -> None:
    reply = ChatCompletionReply.parse(_body(choices=[{"message": {"content": None}}], usage=None, model=None))
    assert (reply.content, reply.model, reply.usage.prompt_tokens, reply.usage.completion_tokens) == ("", "", 0, 0)


@pytest.mark.parametrize("usage", [{"prompt_tokens": -3, "completion_tokens": "5"}, {"prompt_tokens": True}, [1, 2]])
def test_malformed_token_counts_are_not_taken(usage: object) -> None:
    reply = ChatCompletionReply.parse(_body(usage=usage))
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (0, 0)


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'"text"', _body(choices=[]), _body(choices=None), _body(choices=["x"]),
    _body(choices=[{"message": "x"}]), _body(choices=[{}]), _body(choices=[{"message": {"content": 3}}]),
])
def test_anything_but_a_chat_completion_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        ChatCompletionReply.parse(body)
