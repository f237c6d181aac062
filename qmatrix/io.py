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
from pathlib import Path
from typing import Any

from qmatrix.model import Item, QMatrix, QMatrixError

__all__ = [
    "load_qmatrix",
    "qmatrix_from_csv_text",
    "qmatrix_fingerprint",
    "qmatrix_from_json",
    "qmatrix_to_csv_text",
    "qmatrix_to_json",
    "save_qmatrix",
]

_FIXED_COLUMNS = ("item_id", "text")


_MAX_PROBLEMS = 50  # listed per error; the rest are counted


def qmatrix_from_csv_text(text: str, *, id: str) -> QMatrix:
    # newline="": the csv module itself recognises \r\n, \n and a lone \r (old Mac exports) as row ends.
    try:
        rows = list(csv.reader(io.StringIO(text.lstrip("\ufeff"), newline="")))
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit() characters, a NUL byte
        raise QMatrixError([f"CSV cannot be read: {exc}"]) from exc
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        raise QMatrixError(["CSV is empty: expected a header 'item_id,text,<concept>,...'"])
    header = [cell.strip() for cell in rows[0]]
    if tuple(header[:2]) != _FIXED_COLUMNS:
        raise QMatrixError([f"header must start with 'item_id,text', got {','.join(header[:2])!r}"])
    concepts = header[2:]
    problems: list[str] = []
    item_ids: list[str] = []
    texts: list[str | None] = []
    matrix: list[list[int]] = []
    for r, row in enumerate(rows[1:], start=1):
        item_id = row[0].strip() if row else ""
        where = f"row {r} (item '{item_id}')"
        if len(row) != len(header):
            problems.append(f"{where}: expected {len(header)} cells, got {len(row)}")
            continue
        cells: list[int] = []
        for concept, cell in zip(concepts, row[2:]):
            value = cell.strip()
            if value not in ("0", "1"):
                problems.append(f"{where}, column '{concept}': cell must be 0 or 1, got {value!r}")
                cells.append(0)
            else:
                cells.append(int(value))
        item_ids.append(item_id)
        texts.append(row[1].strip() or None)
        matrix.append(cells)
    if problems:
        extra = [f"… and {len(problems) - _MAX_PROBLEMS} more problems"] if len(problems) > _MAX_PROBLEMS else []
        raise QMatrixError(problems[:_MAX_PROBLEMS] + extra)
    if not item_ids:
        raise QMatrixError(["items: at least one item is required"])
    return QMatrix.from_matrix(id=id, concepts=concepts, item_ids=item_ids, matrix=matrix, texts=texts)


def qmatrix_to_csv_text(q: QMatrix) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*_FIXED_COLUMNS, *q.concepts])
    for item, row in zip(q.items, q.matrix):
        writer.writerow([item.id, item.text or "", *(int(v) for v in row)])
    return out.getvalue()


def qmatrix_from_json(data: dict[str, Any] | str) -> QMatrix:
    obj = json.loads(data) if isinstance(data, str) else data
    problems: list[str] = []
    if not isinstance(obj, dict):
        raise QMatrixError(["JSON form must be an object with 'id', 'concepts' and 'items'"])
    for key in ("id", "concepts", "items"):
        if key not in obj:
            problems.append(f"{key}: field required")
    if problems:
        raise QMatrixError(problems)
    if not isinstance(obj["concepts"], list) or not all(isinstance(c, str) for c in obj["concepts"]):
        raise QMatrixError(["concepts: must be a list of strings"])
    if not isinstance(obj["items"], list):
        raise QMatrixError(["items: must be a list"])
    items: list[Item] = []
    for r, raw in enumerate(obj["items"], start=1):
        if not isinstance(raw, dict) or "id" not in raw:
            problems.append(f"items[{r - 1}]: must be an object with 'id' and 'concepts'")
            continue
        concepts = raw.get("concepts", [])
        if not isinstance(concepts, list) or not all(isinstance(c, str) for c in concepts):
            problems.append(f"items[{r - 1}] (item '{raw['id']}'): concepts must be a list of strings")
            continue
        text = raw.get("text")
        items.append(Item(id=str(raw["id"]), text=str(text) if text else None, concepts=tuple(concepts)))
    if problems:
        raise QMatrixError(problems)
    # Keep each item's concepts in the Q-matrix's column order, whatever order the JSON used.
    order = {c: k for k, c in enumerate(obj["concepts"])}
    items = [
        Item(id=i.id, text=i.text, concepts=tuple(sorted(i.concepts, key=lambda c: order.get(c, len(order)))))
        for i in items
    ]
    return QMatrix(id=str(obj["id"]), concepts=tuple(obj["concepts"]), items=tuple(items))


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
