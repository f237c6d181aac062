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

import numpy as np

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
    """Parse ``item_id,text,<concept>...`` rows of 0/1 cells, listing every problem (up to 50) at once.

    Rows are read one at a time in a Python loop, each reduced to a compact 0/1 row as it is read:
    ``list(reader)`` would parse the whole file inside one C call — in a worker thread that holds the
    GIL, and so the server's event loop, for all of it — and keeping every row's cell strings would
    cost ~8 bytes per cell on top of the text.
    """
    # newline="": the csv module itself recognises \r\n, \n and a lone \r (old Mac exports) as row ends.
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff"), newline=""))
    header: list[str] | None = None
    problems: list[str] = []  # the first _MAX_PROBLEMS; n_problems counts them all
    n_problems = 0
    item_ids: list[str] = []
    texts: list[str | None] = []
    matrix: list[bytes] = []

    def problem(message: str) -> None:
        nonlocal n_problems
        n_problems += 1
        if len(problems) < _MAX_PROBLEMS:
            problems.append(message)

    try:
        r = 0
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = [cell.strip() for cell in row]
                if tuple(header[:2]) != _FIXED_COLUMNS:
                    raise QMatrixError([f"header must start with 'item_id,text', got {','.join(header[:2])!r}"])
                continue
            r += 1
            item_id = row[0].strip()
            if len(row) != len(header):
                problem(f"row {r} (item '{item_id}'): expected {len(header)} cells, got {len(row)}")
                continue
            cells = [cell.strip() for cell in row[2:]]
            if any(value not in ("0", "1") for value in cells):
                for concept, value in zip(header[2:], cells):
                    if value not in ("0", "1"):
                        problem(f"row {r} (item '{item_id}'), column '{concept}': cell must be 0 or 1, got {value!r}")
                continue
            item_ids.append(item_id)
            texts.append(row[1].strip() or None)
            matrix.append(bytes(1 if value == "1" else 0 for value in cells))
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit() characters, a NUL byte
        raise QMatrixError([f"CSV cannot be read: {exc}"]) from exc
    if header is None:
        raise QMatrixError(["CSV is empty: expected a header 'item_id,text,<concept>,...'"])
    if problems:
        extra = [f"… and {n_problems - len(problems)} more problems"] if n_problems > len(problems) else []
        raise QMatrixError(problems + extra)
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
