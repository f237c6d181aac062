"""The Q-matrix: which concepts (skills, attributes) each item assesses.

A Q-matrix is the psychometrician's contract between items and concepts. Everything
downstream — which concepts an entity is asked about, which concepts a diagnosis
reports — is derived from it, so it is validated once, on construction, with messages
that name the offending item and concept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from qmatrix.identifiers import identifier_problem

__all__ = ["Item", "QMatrix", "QMatrixError"]


class QMatrixError(ValueError):
    """A Q-matrix (or a reference to its items) is invalid.

    ``problems`` lists every problem found, each naming the row (item) and/or column
    (concept), so a caller can fix them all at once instead of one per round trip.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class Item:
    """One assessment item: an id, optional question text, and the concepts it requires."""

    id: str
    concepts: tuple[str, ...]
    text: str | None = None


@dataclass(frozen=True)
class QMatrix:
    """A validated Q-matrix.

    ``concepts`` keeps the published column order; ``items`` keeps row order. Both orders
    matter to readers of the CSV form and are preserved by load/save round trips.
    """

    id: str
    concepts: tuple[str, ...]
    items: tuple[Item, ...]
    _index: dict[str, Item] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problems = _validate(self.id, self.concepts, self.items)
        if problems:
            raise QMatrixError(problems)
        object.__setattr__(self, "_index", {item.id: item for item in self.items})

    # --- construction helpers -------------------------------------------------------
    @classmethod
    def from_matrix(
        cls,
        *,
        id: str,
        concepts: Sequence[str],
        item_ids: Sequence[str],
        matrix: np.ndarray | Sequence[Sequence[int]],
        texts: Sequence[str | None] | None = None,
    ) -> QMatrix:
        """Build from a binary item × concept matrix (rows = items, columns = concepts)."""
        q = np.asarray(matrix)
        problems: list[str] = []
        if q.shape != (len(item_ids), len(concepts)):
            raise QMatrixError(
                [f"matrix shape {q.shape} does not match {len(item_ids)} items x {len(concepts)} concepts"]
            )
        for r, item_id in enumerate(item_ids):
            for c, concept in enumerate(concepts):
                if q[r, c] not in (0, 1):
                    problems.append(
                        f"row {r + 1} (item '{item_id}'), column '{concept}': cell must be 0 or 1, got {q[r, c]!r}"
                    )
        if problems:
            raise QMatrixError(problems)
        texts = list(texts) if texts is not None else [None] * len(item_ids)
        items = tuple(
            Item(id=str(item_id), text=texts[r], concepts=tuple(concepts[c] for c in np.flatnonzero(q[r])))
            for r, item_id in enumerate(item_ids)
        )
        return cls(id=id, concepts=tuple(concepts), items=items)

    # --- queries -------------------------------------------------------------------
    @property
    def item_ids(self) -> tuple[str, ...]:
        return tuple(item.id for item in self.items)

    @property
    def matrix(self) -> np.ndarray:
        """Binary matrix, shape (n_items, n_concepts), in item and concept order."""
        col = {c: k for k, c in enumerate(self.concepts)}
        q = np.zeros((len(self.items), len(self.concepts)), dtype=np.int8)
        for r, item in enumerate(self.items):
            for concept in item.concepts:
                q[r, col[concept]] = 1
        return q

    def item(self, item_id: str) -> Item:
        try:
            return self._index[item_id]
        except KeyError:
            raise QMatrixError([f"unknown item id '{item_id}' for Q-matrix '{self.id}'"]) from None

    def unknown_items(self, item_ids: Iterable[str]) -> list[str]:
        """Item ids (in given order, without repeats) that this Q-matrix does not define."""
        seen: dict[str, None] = {}
        for item_id in item_ids:
            if item_id not in self._index:
                seen.setdefault(item_id)
        return list(seen)

    def concepts_for(self, item_ids: Iterable[str]) -> tuple[str, ...]:
        """The Q-filtered concept set: concepts required by at least one of the given items.

        Returned in the Q-matrix's concept order, so prompts and reports are stable.
        Unknown item ids raise :class:`QMatrixError` naming all of them.
        """
        ids = list(item_ids)
        unknown = self.unknown_items(ids)
        if unknown:
            raise QMatrixError([f"unknown item ids for Q-matrix '{self.id}': {', '.join(unknown)}"])
        needed = {concept for item_id in ids for concept in self._index[item_id].concepts}
        return tuple(c for c in self.concepts if c in needed)


def _validate(qid: str, concepts: Sequence[str], items: Sequence[Item]) -> list[str]:
    problems: list[str] = []
    if not qid or not str(qid).strip():
        problems.append("id: must be a non-empty string")
    if not concepts:
        problems.append("concepts: at least one concept is required")
    if not items:
        problems.append("items: at least one item is required")
    seen_concepts: set[str] = set()
    for k, concept in enumerate(concepts):
        if (problem := identifier_problem(str(concept), padded_ok=True)) is not None:
            problems.append(f"column {k + 1}: concept name {problem}")
        elif concept in seen_concepts:
            problems.append(f"column '{concept}': duplicate concept name")
        seen_concepts.add(concept)
    seen_items: set[str] = set()
    used: set[str] = set()
    for r, item in enumerate(items):
        where = f"row {r + 1} (item '{item.id}')"
        if (problem := identifier_problem(str(item.id))) is not None:
            problems.append(f"row {r + 1}: item id {problem}")
        elif item.id in seen_items:
            problems.append(f"{where}: duplicate item id")
        seen_items.add(item.id)
        if not item.concepts:
            problems.append(f"{where}: item assesses no concept")
        for concept in item.concepts:
            if concept not in seen_concepts:
                problems.append(f"{where}: unknown concept '{concept}'")
            used.add(concept)
        if len(set(item.concepts)) != len(item.concepts):
            problems.append(f"{where}: a concept is listed twice")
    for concept in concepts:
        if concept in seen_concepts and concept not in used:
            problems.append(f"column '{concept}': concept used by no item")
    return problems
