"""``/v1/qmatrix-extractions`` within the server's Q-matrix limits: a request past them is a 422 naming its field, an
extracted Q-matrix a registration would refuse is never answered nor saved (it was a 500, and so was every later
read of it), large keyword tagging runs off the event loop, and LLM tagging is cached per tenant only."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from diagnosis import DiagnosisPipeline
from diagnosis import extraction as extraction_module
from diagnosis.extraction import extract_qmatrix
from providers import PromptContext
from tests.conftest import bearer, make_client
from tests.factories import FakeEntity

ASK = DiagnosisPipeline({}).ask  # asks whichever entity it is given

ITEMS = [{"id": f"i{k}", "text": "Find the total after addition."} for k in range(3)]


def _locs(response: object) -> list[list[object]]:
    return [e["loc"] for e in response.json()["detail"]]  # type: ignore[attr-defined]


def _shared(n: int) -> list[str]:
    """``n`` concepts that all share the keyword 'addition', so every item is tagged with each of them."""
    return [f"addition {k}" for k in range(n)]


def test_more_concepts_than_a_qmatrix_may_have_is_a_422_and_nothing_is_saved(tmp_path: Path) -> None:
    with make_client(tmp_path, {"e": FakeEntity("e")}) as client:  # max_qmatrix_concepts: 500 (the default)
        body = {"id": "big", "items": ITEMS, "concepts": _shared(600), "save": True}
        r = client.post("/v1/qmatrix-extractions", json=body)
        assert r.status_code == 422 and _locs(r) == [["body", "concepts"]], r.text
        assert client.get("/v1/qmatrices/big").status_code == 404
        at_cap = {"id": "big", "items": ITEMS, "concepts": _shared(500), "save": True}
        assert client.post("/v1/qmatrix-extractions", json=at_cap).json()["registered"]
        assert client.get("/v1/qmatrices/big").json()["n_concepts"] == 500


def test_a_result_a_registration_would_refuse_is_a_422_and_nothing_is_saved(tmp_path: Path) -> None:
    # Past 500 the limit is the body model's per-item bound, which a registered JSON Q-matrix meets too.
    with make_client(tmp_path, {"e": FakeEntity("e")}, max_qmatrix_concepts=1000) as client:
        body = {"id": "wide", "items": ITEMS, "concepts": _shared(600), "save": True}
        r = client.post("/v1/qmatrix-extractions", json=body)
        assert r.status_code == 422 and ["body", "concepts"] in _locs(r), r.text
        assert "the extracted Q-matrix" in r.text
        assert client.get("/v1/qmatrices/wide").status_code == 404


def test_more_items_than_a_qmatrix_may_have_is_a_422(tmp_path: Path) -> None:
    with make_client(tmp_path, {"e": FakeEntity("e")}, max_qmatrix_items=2) as client:
        r = client.post("/v1/qmatrix-extractions", json={"id": "q", "items": ITEMS, "concepts": ["addition"]})
        assert r.status_code == 422 and _locs(r) == [["body", "items"]], r.text


@pytest.mark.parametrize(("item", "field"), [
    ({"id": "i1", "text": "addition " * 2223}, "text"),  # 20,007 characters: past a Q-matrix item's text
    ({"id": "a\u0001b", "text": "addition"}, "id"),
    ({"id": " i1", "text": "addition"}, "id"),
])
def test_an_item_a_qmatrix_could_not_hold_is_a_422_naming_it(client: TestClient, item: dict, field: str) -> None:
    r = client.post("/v1/qmatrix-extractions", json={"id": "q", "items": [item], "concepts": ["addition"]})
    assert r.status_code == 422 and ["body", "items", 0, field] in _locs(r), r.text


def test_llm_tagging_asks_in_the_tenants_cache_scope(tmp_path: Path) -> None:
    tagger = FakeEntity("t", 0.9)
    with make_client(tmp_path, {"t": tagger}) as client:
        for tenant in ("school-a", "school-b"):
            body = {"id": "q", "items": ITEMS[:2], "concepts": ["addition"], "method": "llm"}
            r = client.post("/v1/qmatrix-extractions", json=body, headers=bearer(client, tenant=tenant, role="admin"))
            assert r.status_code == 200, r.text
    assert [c.cache_scope for c in tagger.contexts] == ["school-a", "school-a", "school-b", "school-b"]
    assert {c.task for c in tagger.contexts} == {"tag"}


@pytest.mark.parametrize(("n_items", "off_loop"), [(2, False), (60, True)])
async def test_large_keyword_tagging_runs_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, n_items: int, off_loop: bool,
) -> None:
    threads: set[bool] = set()
    real = extraction_module.keyword_tags

    def recorded(text: str, concepts: list[str]) -> list[str]:
        threads.add(threading.current_thread() is threading.main_thread())
        return real(text, concepts)

    monkeypatch.setattr(extraction_module, "keyword_tags", recorded)
    items = [(f"i{k}", "Find the total after addition.") for k in range(n_items)]
    for method, entities in (("keyword", None), ("both", {"t": FakeEntity("t", 0.9)})):
        threads.clear()
        found, _ = await extract_qmatrix("q", items, _shared(20), method=method, entities=entities, ask=ASK)
        assert found.qmatrix is not None and len(found.qmatrix.items) == n_items
        assert threads == {not off_loop}, method  # 2 x 20 cells inline; 60 x 20 past _INLINE_CELLS


async def test_extract_qmatrix_passes_the_cache_scope_to_every_tag_question() -> None:
    tagger = FakeEntity("t", lambda context: {c: 1.0 for c in context.concepts})
    await extract_qmatrix("q", [("a", "x"), ("b", "y")], ["c1"], method="llm", entities={"t": tagger}, ask=ASK,
                         cache_scope="t1")
    assert [c.cache_scope for c in tagger.contexts] == ["t1", "t1"]
    assert all(isinstance(c, PromptContext) for c in tagger.contexts)
