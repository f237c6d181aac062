"""Automatic Q-matrix extraction: keyword rules, LLM tagging, agreement, and the API."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from diagnosis import DiagnosisPipeline
from diagnosis.extraction import agreement, build_qmatrix, extract_qmatrix
from providers import PromptContext
from qmatrix.extract import GSM8K_CONCEPTS, keyword_tags
from tests.factories import FakeEntity

PROBLEMS = [
    ("p1", "Tom buys 3 apples for $2 each. How much does he pay in total?"),
    ("p2", "A car drives 60 miles per hour for 2 hours. How far does it go?"),
    ("p3", "Half of the 40 students are girls. What percent are boys?"),
]


def test_keyword_tags() -> None:
    assert keyword_tags(PROBLEMS[0][1]) == ["Addition and subtraction", "Multiplication and division", "Money"]
    assert "Percentages" in keyword_tags(PROBLEMS[2][1]) and "Fractions and ratios" in keyword_tags(PROBLEMS[2][1])
    assert keyword_tags("Compute the gradient norm", ["Gradient descent"]) == ["Gradient descent"]


def test_agreement_by_hand() -> None:
    a = {"i1": ["x"], "i2": ["x", "y"]}
    b = {"i1": ["x"], "i2": ["y"]}
    result = agreement(a, b, ["x", "y"])
    # cells a: (1,0),(1,1); b: (1,0),(0,1) → 3/4 agree; pa = 3/4, pb = 1/2, pe = 3/8 + 1/8 = 1/2 → κ = 1/2
    assert result.percent == pytest.approx(0.75) and result.kappa == pytest.approx(0.5)
    assert result.per_concept["x"]["percent"] == pytest.approx(0.5)


def test_build_qmatrix_leaves_out_and_lists_untagged_items_and_unused_concepts() -> None:
    extraction = build_qmatrix("q", [("a", "t1"), ("b", "t2")], {"a": ["x"], "b": []}, ["x", "y"])
    assert extraction.qmatrix is not None and extraction.qmatrix.item_ids == ("a",)
    assert extraction.untagged_items == ["b"] and extraction.unused_concepts == ["y"]


def _tagger(context: PromptContext) -> dict[str, float]:
    """A SIMULATED LLM tagger: tags 'Money' when the text has '$', everything else 0."""
    assert context.task == "tag"
    text = context.items[0].text or ""
    return {c: (1.0 if (c == "Money" and "$" in text) else 0.0) for c in context.concepts}


async def test_llm_tagging_and_agreement_with_keywords() -> None:
    extraction, agree = await extract_qmatrix("g", PROBLEMS, GSM8K_CONCEPTS, method="both", entities={"t": FakeEntity("t", _tagger)},
                                            ask=DiagnosisPipeline({}).ask)
    assert extraction.tags["p1"] == ["Money"] and extraction.untagged_items == ["p2", "p3"]
    assert extraction.qmatrix is not None and extraction.qmatrix.concepts == ("Money",)
    assert agree is not None and agree.per_concept["Money"]["percent"] == 1.0 and agree.percent < 1.0


def test_extract_endpoint(client: TestClient) -> None:
    body = {"id": "gsm-demo", "items": [{"id": i, "text": t} for i, t in PROBLEMS], "save": True}
    r = client.post("/v1/qmatrix-extractions", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["registered"] and data["qmatrix"]["items"][0]["concepts"] == ["Addition and subtraction", "Multiplication and division", "Money"]
    assert client.get("/v1/qmatrices/gsm-demo").status_code == 200
    r = client.post("/v1/qmatrix-extractions", json={**body, "method": "both", "entities": ["ghost"]})
    assert r.status_code == 422 and "ghost" in r.text
    r = client.post("/v1/qmatrix-extractions", json={"id": "x", "items": []})
    assert r.status_code == 422 and "items" in r.text
