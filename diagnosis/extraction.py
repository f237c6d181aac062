"""Automatic Q-matrix extraction: keyword tagging and LLM tagging, and how well they agree.

The LLM tagger asks each entity, per item, how likely the item requires each concept
(``PromptContext(task="tag")``; no student data is involved, so no privacy noise), and
tags a concept when the answer is ≥ 0.5. With several entities their answers are
averaged first. Agreement between two taggings is reported as percent agreement and
Cohen's κ over all (item, concept) cells, and per concept.

The LLM tagger's contexts carry the caller's ``cache_scope`` (the tenant), as a diagnosis's do: a response cache in
front of an entity keys on it, so one tenant's tagging never hits — nor reveals — another's. Keyword tagging and
the agreement are per-cell Python work: past ``_INLINE_CELLS`` cells they run in a worker thread, not on the
event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from diagnosis.pipeline import off_loop
from diagnosis.results import EntityOutcome
from providers import Entity, PromptContext, PromptItem
from qmatrix import Item, QMatrix
from qmatrix.extract import keyword_tags

__all__ = ["Agreement", "Extraction", "agreement", "build_qmatrix", "extract_qmatrix", "llm_tags"]

# (item, concept) cells tagged or compared on the event loop; more run in a worker thread. Keyword tagging runs regex
# searches per cell, so a large request held the loop (other requests, /healthz) for seconds (a security review timed
# 100 items x 20,000 concepts, a request now refused for its concepts' count).
_INLINE_CELLS = 1_000



@dataclass
class Agreement:
    percent: float | None  # None: no item was tagged by both
    kappa: float | None
    per_concept: dict[str, dict[str, float | None]]


@dataclass
class Extraction:
    qmatrix: QMatrix | None
    tags: dict[str, list[str]]  # item id -> concepts
    untagged_items: list[str]
    unused_concepts: list[str]
    failures: dict[str, list[str]] = field(default_factory=dict)  # entity -> item ids it failed on
    outcomes: list[EntityOutcome] = field(default_factory=list)  # every tag question's call: usage and cost


def _kappa(a: np.ndarray, b: np.ndarray) -> float | None:
    po = float(np.mean(a == b))
    pa, pb = float(a.mean()), float(b.mean())
    pe = pa * pb + (1 - pa) * (1 - pb)
    return None if pe >= 1.0 else (po - pe) / (1 - pe)


def agreement(first: Mapping[str, Sequence[str]], second: Mapping[str, Sequence[str]], concepts: Sequence[str]) -> Agreement:
    """Agreement over the items both taggings cover."""
    items = [i for i in first if i in second]
    a = np.array([[c in first[i] for c in concepts] for i in items], dtype=bool).reshape(len(items), len(concepts))
    b = np.array([[c in second[i] for c in concepts] for i in items], dtype=bool).reshape(len(items), len(concepts))
    per = {
        c: {"percent": float(np.mean(a[:, k] == b[:, k])) if items else None, "kappa": _kappa(a[:, k], b[:, k]) if items else None}
        for k, c in enumerate(concepts)
    }
    return Agreement(percent=float(np.mean(a == b)) if items else None, kappa=_kappa(a.ravel(), b.ravel()) if items else None, per_concept=per)


# One entity asked one question, as an outcome (``DiagnosisPipeline.ask``: priced, failures returned).
Ask = Callable[[Entity, PromptContext], Awaitable[EntityOutcome]]


async def llm_tags(
    entities: Mapping[str, Entity], items: Sequence[tuple[str, str]], concepts: Sequence[str], *, ask: Ask,
    concurrency: int = 4, cache_scope: str | None = None,
) -> tuple[dict[str, list[str]], dict[str, list[str]], list[EntityOutcome]]:
    """(item id -> tagged concepts, entity -> item ids it failed on, every call's outcome: what the tagging cost).
    Items no entity answered are left out. ``cache_scope``: who may share cached answers (the tenant;
    :class:`providers.PromptContext`)."""
    gate = asyncio.Semaphore(concurrency)
    failures: dict[str, list[str]] = {}
    outcomes: list[EntityOutcome] = []

    async def one(item_id: str, text: str) -> tuple[str, list[str] | None]:
        context = PromptContext(
            task="tag", concepts=tuple(concepts), cache_scope=cache_scope,
            items=(PromptItem(item_id=item_id, text=text, concepts=tuple(concepts), score=0.0),),
        )
        answers = []
        async with gate:
            for name, entity in entities.items():
                outcome = await ask(entity, context)
                outcomes.append(outcome)
                if outcome.mastery is None:  # failed or skipped
                    failures.setdefault(name, []).append(item_id)
                else:
                    answers.append(outcome.mastery)
        if not answers:
            return item_id, None
        means = {c: float(np.mean([a[c] for a in answers if c in a])) for c in concepts if any(c in a for a in answers)}
        return item_id, [c for c in concepts if means.get(c, 0.0) >= 0.5]

    results = await asyncio.gather(*(one(i, t) for i, t in items))
    return {i: tags for i, tags in results if tags is not None}, failures, outcomes


def build_qmatrix(qid: str, items: Sequence[tuple[str, str]], tags: Mapping[str, Sequence[str]], concepts: Sequence[str]) -> Extraction:
    """A valid Q-matrix from taggings: untagged items and unused concepts are left out and listed."""
    sets = {i: set(tags.get(i, ())) for i, _ in items}  # membership by set: a list made this cubic at 500 x 500
    tagged = [(i, t) for i, t in items if sets[i]]
    in_use = set().union(*(sets[i] for i, _ in tagged))
    used = [c for c in concepts if c in in_use]
    untagged = [i for i, _ in items if not sets[i]]
    q = (
        QMatrix(id=qid, concepts=tuple(used),
                items=tuple(Item(id=i, text=t, concepts=tuple(c for c in used if c in sets[i])) for i, t in tagged))
        if tagged
        else None
    )
    return Extraction(qmatrix=q, tags={i: list(tags.get(i, [])) for i, _ in items}, untagged_items=untagged,
                      unused_concepts=[c for c in concepts if c not in in_use])


async def extract_qmatrix(
    qid: str,
    items: Sequence[tuple[str, str]],
    concepts: Sequence[str],
    *,
    method: str = "keyword",
    entities: Mapping[str, Entity] | None = None,
    ask: Ask | None = None,
    cache_scope: str | None = None,
) -> tuple[Extraction, Agreement | None]:
    """Extract with ``keyword``, ``llm`` or ``both`` (the Q-matrix then comes from the LLM tags,
    and the agreement between the two taggings is returned). ``cache_scope``: the tenant asking (:func:`llm_tags`)."""
    if method not in ("keyword", "llm", "both"):
        raise ValueError(f"unknown method {method!r} (use keyword, llm or both)")
    if method != "keyword" and (not entities or ask is None):
        raise ValueError("LLM tagging needs at least one entity and a way to ask it (DiagnosisPipeline.ask)")
    cells = len(items) * len(concepts)
    if method == "keyword":
        built = await off_loop(cells, lambda: build_qmatrix(qid, items, _keyword(items, concepts), concepts), _INLINE_CELLS)
        return built, None
    assert entities is not None and ask is not None
    llm, failures, outcomes = await llm_tags(entities, items, concepts, ask=ask, cache_scope=cache_scope)

    def finish() -> tuple[Extraction, Agreement | None]:
        extraction = build_qmatrix(qid, items, llm, concepts)
        extraction.failures, extraction.outcomes = failures, outcomes
        return extraction, (agreement(_keyword(items, concepts), llm, concepts) if method == "both" else None)

    return await off_loop(cells, finish, _INLINE_CELLS)


def _keyword(items: Sequence[tuple[str, str]], concepts: Sequence[str]) -> dict[str, list[str]]:
    return {i: keyword_tags(t, concepts) for i, t in items}
