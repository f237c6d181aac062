"""UCI Student Performance (Cortez & Silva 2008) as a cognitive-diagnosis dataset.

UCI has no items and no Q-matrix. Following the seed paper, each student attribute is
treated as an "item" whose "response" is the attribute normalised to a score in [0, 1]
(oriented so that 1 is favourable), and the concepts are the paper's five attribute
groups. The item text describes the attribute and the answer gives its raw value, so an
LLM sees what the paper's prompts show.

Truth (documented formula): a concept's mastery is the mean normalised score of the
attributes in its group — which is exactly the paper protocol's proportion-correct rule
applied to these scores. The truth is therefore a function of the prompt's own inputs,
as in the paper's code; reports say so.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from qmatrix.datasets import Dataset, dataset_folder
from qmatrix.model import Item, QMatrix
from qmatrix.responses import Response, StudentResponses

__all__ = ["UCI_CONCEPTS", "load_uci"]

STUDY, FAMILY, SCHOOL, SOCIAL, ACADEMIC = (
    "Study habits",
    "Family support",
    "School engagement",
    "Social factors",
    "Academic foundation",
)
UCI_CONCEPTS = (STUDY, FAMILY, SCHOOL, SOCIAL, ACADEMIC)


def _scale(lo: float, hi: float, *, reverse: bool = False) -> Callable[[str], float]:
    def f(raw: str) -> float:
        value = (min(max(float(raw), lo), hi) - lo) / (hi - lo)
        return 1.0 - value if reverse else value

    return f


def _yes(raw: str) -> float:
    return 1.0 if raw == "yes" else 0.0


def _no(raw: str) -> float:
    return 1.0 if raw == "no" else 0.0


# attribute -> (concept, description shown as the item text, normaliser to [0, 1] with 1 favourable)
ATTRIBUTES: dict[str, tuple[str, str, Callable[[str], float]]] = {
    "studytime": (STUDY, "Weekly study time (1: <2 h, 2: 2-5 h, 3: 5-10 h, 4: >10 h)", _scale(1, 4)),
    "failures": (STUDY, "Number of past class failures (0-3, 3 means 3 or more)", _scale(0, 3, reverse=True)),
    "paid": (STUDY, "Extra paid classes in the subject (yes/no)", _yes),
    "absences": (STUDY, "School absences (capped at 20 for scoring)", _scale(0, 20, reverse=True)),
    "famsup": (FAMILY, "Family educational support (yes/no)", _yes),
    "famrel": (FAMILY, "Quality of family relationships (1 very bad - 5 excellent)", _scale(1, 5)),
    "Medu": (FAMILY, "Mother's education (0 none - 4 higher education)", _scale(0, 4)),
    "Fedu": (FAMILY, "Father's education (0 none - 4 higher education)", _scale(0, 4)),
    "schoolsup": (SCHOOL, "Extra educational support from the school (yes/no)", _yes),
    "activities": (SCHOOL, "Extra-curricular activities (yes/no)", _yes),
    "higher": (SCHOOL, "Wants to take higher education (yes/no)", _yes),
    "nursery": (SCHOOL, "Attended nursery school (yes/no)", _yes),
    "goout": (SOCIAL, "Going out with friends (1 very low - 5 very high; less is scored higher)", _scale(1, 5, reverse=True)),
    "Dalc": (SOCIAL, "Workday alcohol consumption (1 very low - 5 very high)", _scale(1, 5, reverse=True)),
    "Walc": (SOCIAL, "Weekend alcohol consumption (1 very low - 5 very high)", _scale(1, 5, reverse=True)),
    "romantic": (SOCIAL, "In a romantic relationship (yes/no; no is scored higher)", _no),
    "G1": (ACADEMIC, "First period grade (0-20)", _scale(0, 20)),
    "G2": (ACADEMIC, "Second period grade (0-20)", _scale(0, 20)),
}


def uci_qmatrix() -> QMatrix:
    items = tuple(Item(id=name, text=text, concepts=(concept,)) for name, (concept, text, _) in ATTRIBUTES.items())
    return QMatrix(id="uci-student", concepts=UCI_CONCEPTS, items=items)


def load_uci(data_dir: str | Path | None = None, *, course: str = "por") -> Dataset:
    """``course`` is ``por`` (649 students) or ``mat`` (395)."""
    if course not in ("por", "mat"):
        raise ValueError(f"course must be 'por' or 'mat', got {course!r}")
    folder = dataset_folder(data_dir, "uci_student")
    q = uci_qmatrix()
    students: list[StudentResponses] = []
    with (folder / f"student-{course}.csv").open(newline="", encoding="utf-8") as fh:
        for n, row in enumerate(csv.DictReader(fh, delimiter=";"), start=1):
            responses = tuple(
                Response(item_id=name, correct=round(norm(row[name].strip('"')), 6), answer=row[name].strip('"'))
                for name, (_, _, norm) in ATTRIBUTES.items()
            )
            students.append(StudentResponses(student_id=f"uci-{course}-{n:03d}", responses=responses))
    return Dataset(name=f"uci-{course}", qmatrix=q, students=students)
