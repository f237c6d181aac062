"""Pricing math, the documented default prices, and the simulated entities' estimated token usage."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from diagnosis import DiagnosisPipeline, DiagnosisRequest
from providers import (
    DEFAULT_HOSTED,
    EntityParseError,
    EntitySpec,
    Price,
    PromptContext,
    PromptItem,
    TokenUsage,
    build_messages,
    price_of,
)
from providers.config import DEFAULT_EMBEDDED
from providers.simulated import SimulatedEntity
from providers.tokens import CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, estimate_tokens, estimate_usage
from qmatrix import Response, example_qmatrix
from tests.factories import FakeEntity


def _context(n_items: int) -> PromptContext:
    items = tuple(
        PromptItem(item_id=f"i{n}", text=f"What is {n} + {n}?", concepts=("addition",), score=float(n % 2))
        for n in range(n_items)
    )
    return PromptContext(concepts=("addition",), items=items)


def test_cost_is_tokens_times_the_price_per_million() -> None:
    # Prepare
    price = Price(input_usd_per_mtok=0.15, output_usd_per_mtok=0.60)
    # Execute
    cost = price.cost_usd(TokenUsage(prompt_tokens=1000, completion_tokens=200))
    # Assert: 1000 × 0.15 / 1e6 + 200 × 0.60 / 1e6
    assert cost == pytest.approx(0.00015 + 0.00012)


def test_no_tokens_and_free_entities_cost_nothing() -> None:
    assert Price(input_usd_per_mtok=1.0, output_usd_per_mtok=5.0).cost_usd(TokenUsage()) == 0.0
    assert Price().cost_usd(TokenUsage(prompt_tokens=10**6, completion_tokens=10**6)) == 0.0


def test_negative_prices_are_refused() -> None:
    with pytest.raises(ValueError, match="prices must be >= 0"):
        Price(input_usd_per_mtok=-1.0)
    with pytest.raises(ValueError):
        EntitySpec(name="x", kind="openai", model="m", output_usd_per_mtok=-0.1)


def test_the_default_hosted_models_carry_their_list_prices_and_embedded_ones_are_free() -> None:
    prices = {spec.model: price_of(spec) for spec in DEFAULT_HOSTED}
    assert prices == {
        "gpt-4o-mini": Price(input_usd_per_mtok=0.15, output_usd_per_mtok=0.60),
        "claude-haiku-4-5": Price(input_usd_per_mtok=1.00, output_usd_per_mtok=5.00),
        "llama-3.3-70b-versatile": Price(input_usd_per_mtok=0.59, output_usd_per_mtok=0.79),
    }
    assert all(price_of(spec) == Price() for spec in DEFAULT_EMBEDDED)


def test_the_token_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert CHARS_PER_TOKEN == 4


def test_estimated_prompt_tokens_count_the_real_prompt() -> None:
    # Prepare
    context = _context(5)
    # Execute
    usage = estimate_usage(context, {"addition": 0.4567})
    # Assert: every message of the prompt the hosted adapters send, plus the per-message overhead
    expected = sum(math.ceil(len(m["content"]) / 4) + MESSAGE_OVERHEAD_TOKENS for m in build_messages(context))
    assert usage.prompt_tokens == expected
    assert usage.completion_tokens == math.ceil(len(json.dumps({"addition": 0.46})) / 4)
    assert estimate_usage(_context(50), {"addition": 0.5}).prompt_tokens > usage.prompt_tokens


def test_simulated_entities_report_the_estimated_usage_of_their_answer() -> None:
    # Prepare
    context = _context(8)
    # Execute
    prediction = asyncio.run(SimulatedEntity("confident").respond(context))
    # Assert
    assert prediction.simulated
    assert prediction.usage == estimate_usage(context, prediction.mastery)
    assert prediction.usage.prompt_tokens > 0 and prediction.usage.completion_tokens > 0


def test_the_pipeline_prices_answers_and_the_billed_tokens_of_failed_calls() -> None:
    # Prepare: a priced entity whose answer could not be read (the provider billed it), and an unpriced one
    unreadable = EntityParseError("answer holds no parsable JSON object")
    unreadable.usage = TokenUsage(prompt_tokens=2000, completion_tokens=100)
    pipeline = DiagnosisPipeline(
        {"paid": FakeEntity("paid", error=unreadable), "free": FakeEntity("free", 0.5)},
        prices={"paid": Price(input_usd_per_mtok=1.0, output_usd_per_mtok=5.0)},
    )
    request = DiagnosisRequest(student_id="s", qmatrix=example_qmatrix(), responses=[Response(item_id="q01", correct=True)])
    # Execute
    outcomes = {o.name: o for o in asyncio.run(pipeline.diagnose(request)).entities}
    # Assert
    paid, free = outcomes["paid"], outcomes["free"]
    assert (paid.status, paid.prompt_tokens, paid.completion_tokens) == ("failed", 2000, 100)
    assert paid.cost_usd == pytest.approx((2000 * 1.0 + 100 * 5.0) / 1e6)
    assert (free.status, free.cost_usd, free.cache) == ("ok", 0.0, None)
