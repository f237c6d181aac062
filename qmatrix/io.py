"""Reading and writing Q-matrices in their two interchange forms.

CSV form: ``item_id,text,<one 0/1 column per concept>`` (header row holds the concept
names), as published for FrcSub. JSON form::

    {"id": "...", "concepts": ["..."], "items": [{"id": "...", "text": "...", "concepts": ["..."]}]}
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from qmatrix.model import Item, Problems, QMatrix, QMatrixError, QMatrixTooLarge, shown

__all__ = [
    "check_size",
    "load_qmatrix",
    "qmatrix_from_csv_lines",
    "qmatrix_from_csv_text",
    "qmatrix_fingerprint",
    "qmatrix_from_json",
    "qmatrix_to_csv_text",
    "qmatrix_to_json",
    "save_qmatrix",
]

_FIXED_COLUMNS = ("item_id", "text")


def _too_many(what: str, limit: int, where: str) -> QMatrixTooLarge:
    return QMatrixTooLarge([f"{what}: more than {limit} {what} ({where}); at most {limit} per Q-matrix"])


def qmatrix_from_csv_text(
    text: str, *, id: str, max_items: int | None = None, max_concepts: int | None = None
) -> QMatrix:
    """Parse ``item_id,text,<concept>...`` rows of 0/1 cells (see :func:`qmatrix_from_csv_lines`)."""
    # newline="": the csv module itself recognises \r\n, \n and a lone \r (old Mac exports) as row ends.
    return qmatrix_from_csv_lines(
        io.StringIO(text.lstrip("\ufeff"), newline=""), id=id, max_items=max_items, max_concepts=max_concepts
    )


def qmatrix_from_csv_lines(
    lines: Iterable[str], *, id: str, max_items: int | None = None, max_concepts: int | None = None
) -> QMatrix:
    """Parse CSV lines (a text file opened with ``newline=""``, or any iterable of lines), listing the first
    problems (:data:`MAX_PROBLEMS`) at once and counting the rest.

    Limits are checked while reading: a header with more than ``max_concepts`` concept columns is refused
    before any row is read, and reading stops at the first row past ``max_items`` (valid or not), so an
    oversized upload costs no more than an allowed one — never a full parse of millions of rows.

    Rows are read one at a time in a Python loop, each reduced to a compact 0/1 row as it is read:
    ``list(reader)`` would parse the whole file inside one C call — in a worker thread that holds the
    GIL, and so the server's event loop, for all of it — and keeping every row's cell strings would
    cost ~8 bytes per cell on top of the text.
    """
    reader = csv.reader(lines)
    header: list[str] | None = None
    problems = Problems()
    item_ids: list[str] = []
    texts: list[str | None] = []
    matrix: list[bytes] = []
    try:
        r = 0
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                if max_concepts is not None and len(row) - 2 > max_concepts:
                    raise _too_many("concepts", max_concepts, f"the header has {len(row) - 2} concept columns")
                header = [cell.strip() for cell in row]
                if tuple(header[:2]) != _FIXED_COLUMNS:
                    got = shown(",".join(header[:2]))
                    raise QMatrixError([f"header must start with 'item_id,text', got {got!r}"])
                continue
            r += 1
            if max_items is not None and r > max_items:
                raise _too_many("items", max_items, f"reading stopped at row {r}")
            item_id = row[0].strip()
            if len(row) != len(header):
                problems.add(f"row {r} (item '{shown(item_id)}'): expected {len(header)} cells, got {len(row)}")
                continue
            cells = [cell.strip() for cell in row[2:]]
            bad = [k for k, value in enumerate(cells) if value not in ("0", "1")]
            for k in bad:  # past the listed ones, only counted: no message is formatted
                problems.add("" if problems.full else (
                    f"row {r} (item '{shown(item_id)}'), column '{shown(header[k + 2])}': cell must be 0 or 1, "
                    f"got {shown(cells[k])!r}"
                ))
            if bad:
                continue
            item_ids.append(item_id)
            texts.append(row[1].strip() or None)
            matrix.append(bytes(1 if value == "1" else 0 for value in cells))
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit() characters, a NUL byte
        raise QMatrixError([f"CSV cannot be read: {exc}"]) from exc
    if header is None:
        raise QMatrixError(["CSV is empty: expected a header 'item_id,text,<concept>,...'"])
    problems.raise_if_any()
    if not item_ids:
        raise QMatrixError(["items: at least one item is required"])
    grid = np.frombuffer(b"".join(matrix), dtype=np.uint8).reshape(len(item_ids), len(header) - 2)
    return QMatrix.from_matrix(id=id, concepts=header[2:], item_ids=item_ids, matrix=grid, texts=texts)


def qmatrix_to_csv_text(q: QMatrix) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*_FIXED_COLUMNS, *q.concepts])
    for item, row in zip(q.items, q.matrix):
        writer.writerow([item.id, item.text or "", *(int(v) for v in row)])
    return out.getvalue()


def qmatrix_from_json(
    data: dict[str, Any] | str, *, max_items: int | None = None, max_concepts: int | None = None
) -> QMatrix:
    """The JSON form. ``max_items`` / ``max_concepts`` are checked first, before any item is built, so an
    oversized Q-matrix is refused for its size without being validated row by row."""
    obj = json.loads(data) if isinstance(data, str) else data
    if not isinstance(obj, dict):
        raise QMatrixError(["JSON form must be an object with 'id', 'concepts' and 'items'"])
    missing = [f"{key}: field required" for key in ("id", "concepts", "items") if key not in obj]
    if missing:
        raise QMatrixError(missing)
    if not isinstance(obj["concepts"], list) or not all(isinstance(c, str) for c in obj["concepts"]):
        raise QMatrixError(["concepts: must be a list of strings"])
    if not isinstance(obj["items"], list):
        raise QMatrixError(["items: must be a list"])
    check_size(len(obj["items"]), len(obj["concepts"]), max_items=max_items, max_concepts=max_concepts)
    problems = Problems()
    items: list[Item] = []
    for r, raw in enumerate(obj["items"]):
        if not isinstance(raw, dict) or "id" not in raw:
            problems.add(f"items[{r}]: must be an object with 'id' and 'concepts'")
            continue
        concepts = raw.get("concepts", [])
        if not isinstance(concepts, list) or not all(isinstance(c, str) for c in concepts):
            problems.add(f"items[{r}] (item '{shown(raw['id'])}'): concepts must be a list of strings")
            continue
        text = raw.get("text")
        items.append(Item(id=str(raw["id"]), text=str(text) if text else None, concepts=tuple(concepts)))
    problems.raise_if_any()
    # Keep each item's concepts in the Q-matrix's column order, whatever order the JSON used.
    order = {c: k for k, c in enumerate(obj["concepts"])}
    items = [
        Item(id=i.id, text=i.text, concepts=tuple(sorted(i.concepts, key=lambda c: order.get(c, len(order)))))
        for i in items
    ]
    return QMatrix(id=str(obj["id"]), concepts=tuple(obj["concepts"]), items=tuple(items))


def check_size(n_items: int, n_concepts: int, *, max_items: int | None, max_concepts: int | None) -> None:
    """Raise :class:`QMatrixTooLarge` naming each count over its limit (``None``: no limit)."""
    problems = []
    if max_items is not None and n_items > max_items:
        problems.append(f"items: {n_items} items; at most {max_items} per Q-matrix")
    if max_concepts is not None and n_concepts > max_concepts:
        problems.append(f"concepts: {n_concepts} concepts; at most {max_concepts} per Q-matrix")
    if problems:
        raise QMatrixTooLarge(problems)


def qmatrix_to_json(q: QMatrix) -> dict[str, Any]:
    return {
        "id": q.id,
        "concepts": list(q.concepts),
        "items": [
            {"id": item.id, **({"text": item.text} if item.text else {}), "concepts": list(item.concepts)}
            for item in q.items
        ],
    }


def qmatrix_fingerprint(q: QMatrix) -> str:
    """SHA-256 of the Q-matrix's content (concepts in order, items with text and concepts), not its id:
    two copies of one Q-matrix saved under different names agree; any edited cell does not."""
    content = {k: v for k, v in qmatrix_to_json(q).items() if k != "id"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_qmatrix(path: str | Path, *, id: str | None = None) -> QMatrix:
    """Load either form, chosen by file extension (``.csv`` or ``.json``)."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".csv":
        return qmatrix_from_csv_text(text, id=id or p.stem)
    if p.suffix.lower() == ".json":
        q = qmatrix_from_json(text)
        return q if id is None else QMatrix(id=id, concepts=q.concepts, items=q.items)
    raise QMatrixError([f"{p.name}: unsupported extension (use .csv or .json)"])


def save_qmatrix(q: QMatrix, path: str | Path) -> None:
    p = Path(path)
    if p.suffix.lower() == ".csv":
        p.write_text(qmatrix_to_csv_text(q), encoding="utf-8")
    elif p.suffix.lower() == ".json":
        p.write_text(json.dumps(qmatrix_to_json(q), indent=2) + "\n", encoding="utf-8")
    else:
        raise QMatrixError([f"{p.name}: unsupported extension (use .csv or .json)"])
