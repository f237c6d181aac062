"""Loaders for the real public datasets kept beside the project (``../shared/data``).

The data are never copied into the repository. The folder is found, in order, from the
``data_dir`` argument, the ``FEDCD_DATA_DIR`` environment variable, or ``../shared/data``
relative to the project root.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from qmatrix.io import load_qmatrix
from qmatrix.model import QMatrix
from qmatrix.responses import Response, StudentResponses, group_by_student

__all__ = ["Dataset", "DatasetNotFound", "dataset_folder", "default_data_dir", "load_assist0910", "load_frcsub"]

_PROJECT_ROOT = Path(__file__).resolve().parents[1]


class DatasetNotFound(FileNotFoundError):
    """The dataset folder is missing; the message says where it was looked for."""


@dataclass
class Dataset:
    """A Q-matrix with the responses of many students.

    ``simulated`` is True for generated data; then ``true_mastery`` holds each student's
    known per-concept mastery (the ground truth a real dataset does not have).
    """

    name: str
    qmatrix: QMatrix
    students: list[StudentResponses]
    simulated: bool = False
    true_mastery: dict[str, dict[str, float]] = field(default_factory=dict)


def default_data_dir(data_dir: str | Path | None = None) -> Path:
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get("FEDCD_DATA_DIR")
    return Path(env) if env else (_PROJECT_ROOT.parent / "shared" / "data")


def dataset_folder(data_dir: str | Path | None, name: str) -> Path:
    """The folder of dataset ``name`` under the data folder (see :func:`default_data_dir`); every loader of a
    public dataset (here, ``qmatrix.uci``, ``qmatrix.extract``) finds its files through it, so a missing one is
    always the same error."""
    folder = default_data_dir(data_dir) / name
    if not folder.is_dir():
        raise DatasetNotFound(
            f"dataset folder {folder} not found; pass data_dir or set FEDCD_DATA_DIR to the folder holding '{name}/'"
        )
    return folder


def load_frcsub(data_dir: str | Path | None = None) -> Dataset:
    """Tatsuoka's fraction subtraction data: 536 students x 20 items, 8 concepts."""
    folder = dataset_folder(data_dir, "frcsub")
    q = load_qmatrix(folder / "qmatrix.csv", id="frcsub")
    rows: list[tuple[str, Response]] = []
    with (folder / "responses.csv").open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            rows.append((row["student_id"], Response(item_id=row["item_id"], correct=row["correct"].strip() == "1")))
    return Dataset(name="frcsub", qmatrix=q, students=group_by_student(rows))


def load_assist0910(data_dir: str | Path | None = None, *, max_students: int | None = None) -> Dataset:
    """ASSISTments 2009-10 skill builder (de-duplicated): 110 skills, ~16.8k items.

    Items have no text. Skill codes are mapped to their names through
    ``dict_knowledge_code.json``; skills that no item uses are left out of the Q-matrix.
    """
    folder = dataset_folder(data_dir, "assist0910")
    code_to_name = {int(code): name for name, code in json.loads((folder / "dict_knowledge_code.json").read_text()).items()}
    item_codes: dict[str, list[int]] = {}
    with (folder / "item.csv").open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            codes = json.loads(row["knowledge_code"])
            item_codes[row["item_id"]] = sorted({int(c) for c in (codes if isinstance(codes, list) else [codes])})
    used = sorted({c for codes in item_codes.values() for c in codes})
    concepts = [code_to_name.get(c, f"skill {c}") for c in used]
    column = {c: k for k, c in enumerate(used)}
    matrix = [[0] * len(used) for _ in item_codes]
    for r, codes in enumerate(item_codes.values()):
        for c in codes:
            matrix[r][column[c]] = 1
    q = QMatrix.from_matrix(id="assist0910", concepts=concepts, item_ids=list(item_codes), matrix=matrix)
    rows: list[tuple[str, Response]] = []
    students: set[str] = set()
    with (folder / "record.csv").open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            sid = row["user_id"]
            if max_students is not None and sid not in students and len(students) >= max_students:
                continue
            students.add(sid)
            rows.append((sid, Response(item_id=row["item_id"], correct=float(row["score"]) >= 1.0)))
    return Dataset(name="assist0910", qmatrix=q, students=group_by_student(rows))
