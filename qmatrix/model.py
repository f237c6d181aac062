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

__all__ = ["MAX_PROBLEMS", "Item", "Problems", "QMatrix", "QMatrixError", "QMatrixTooLarge", "shown"]


MAX_PROBLEMS = 20  # problems listed per error; the rest are only counted


class QMatrixError(ValueError):
    """A Q-matrix (or a reference to its items) is invalid.

    ``problems`` lists the problems found, each naming the row (item) and/or column
    (concept), so a caller can fix them at once instead of one per round trip. At most
    :data:`MAX_PROBLEMS` are listed, then one line counting the rest: a hostile upload can
    have millions of bad cells, and echoing each made multi-hundred-MB error responses.
    """

    def __init__(self, problems: Sequence[str], *, more: int = 0) -> None:
        listed = list(problems[:MAX_PROBLEMS])
        self.more = more + len(problems) - len(listed)  # problems found but not listed
        if self.more:
            listed.append(f"… and {self.more} more problems")
        self.problems = listed
        super().__init__("; ".join(self.problems))


class QMatrixTooLarge(QMatrixError):
    """More items or concepts than allowed: raised as soon as the limit is passed, before the rest is read."""


class Problems:
    """Collects the first ``limit`` problem messages and counts the rest without keeping them."""

    def __init__(self, limit: int = MAX_PROBLEMS) -> None:
        self.limit = limit
        self.messages: list[str] = []
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0

    @property
    def full(self) -> bool:
        """No more messages will be kept: callers can skip formatting one (it would only be counted)."""
        return len(self.messages) >= self.limit

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.messages) < self.limit:
            self.messages.append(message)

    def error(self) -> QMatrixError:
        return QMatrixError(self.messages, more=self.count - len(self.messages))

    def raise_if_any(self) -> None:
        if self.count:
            raise self.error()


def shown(value: object, limit: int = 80) -> str:
    """A name or id as echoed in a message: shortened, so 20 messages stay small whatever was sent."""
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "…"


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
        _validate(self.id, self.concepts, self.items).raise_if_any()
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
        if q.shape != (len(item_ids), len(concepts)):
            raise QMatrixError(
                [f"matrix shape {q.shape} does not match {len(item_ids)} items x {len(concepts)} concepts"]
            )
        bad = np.argwhere((q != 0) & (q != 1))  # vectorised: an item bank can have millions of cells
        if len(bad):
            problems = [
                f"row {r + 1} (item '{shown(item_ids[r])}'), column '{shown(concepts[c])}': cell must be 0 or 1, "
                f"got {q[r, c]!r}"
                for r, c in bad[:MAX_PROBLEMS]
            ]
            raise QMatrixError(problems, more=len(bad) - len(problems))
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
            listed = ", ".join(shown(i) for i in unknown[:MAX_PROBLEMS])
            more = f" … and {len(unknown) - MAX_PROBLEMS} more" if len(unknown) > MAX_PROBLEMS else ""
            raise QMatrixError([f"unknown item ids for Q-matrix '{shown(self.id)}': {listed}{more}"])
        needed = {concept for item_id in ids for concept in self._index[item_id].concepts}
        return tuple(c for c in self.concepts if c in needed)


def _validate(qid: str, concepts: Sequence[str], items: Sequence[Item]) -> Problems:
    """Every structural problem (the first :data:`MAX_PROBLEMS` with messages, all of them counted).

    One pass over columns and rows with sets, so the work is linear in the Q-matrix's size; messages are
    formatted only for the first :data:`MAX_PROBLEMS` (the rest are counted), so memory stays bounded.
    """
    problems = Problems()
    if not qid or not str(qid).strip():
        problems.add("id: must be a non-empty string")
    if not concepts:
        problems.add("concepts: at least one concept is required")
    if not items:
        problems.add("items: at least one item is required")
    seen_concepts: set[str] = set()
    for k, concept in enumerate(concepts):
        if (problem := identifier_problem(str(concept), padded_ok=True)) is not None:
            problems.add(f"column {k + 1}: concept name {problem}")
        elif concept in seen_concepts:
            problems.add("" if problems.full else f"column '{shown(concept)}': duplicate concept name")
        seen_concepts.add(concept)
    seen_items: set[str] = set()
    used: set[str] = set()
    for r, item in enumerate(items):
        where = "" if problems.full else f"row {r + 1} (item '{shown(item.id)}')"
        if (problem := identifier_problem(str(item.id))) is not None:
            problems.add(f"row {r + 1}: item id {problem}")
        elif item.id in seen_items:
            problems.add(f"{where}: duplicate item id")
        seen_items.add(item.id)
        if not item.concepts:
            problems.add(f"{where}: item assesses no concept")
        for concept in item.concepts:
            if concept not in seen_concepts:
                problems.add(f"{where}: unknown concept '{shown(concept)}'")
            used.add(concept)
        if len(set(item.concepts)) != len(item.concepts):
            problems.add(f"{where}: a concept is listed twice")
    for concept in concepts:
        if concept in seen_concepts and concept not in used:
            problems.add(f"column '{shown(concept)}': concept used by no item")
    return problems
