"""Resolve a dataset name or folder for evaluation and calibration jobs (here, beneath both: the gateway loads a
dataset for ``/v1/calibrate`` without importing the evaluation package).

``frcsub`` and ``assist0910`` are the real public datasets (``qmatrix.datasets``);
``uci`` is UCI Student Performance (Portuguese course) mapped to the paper's five attribute
groups (``qmatrix.uci``); ``synthetic`` is SIMULATED: DINA students on the project's example Q-matrix (or on the
Q-matrix given, e.g. a tenant's own for ``/v1/calibrate``), with known mastery; a PATH is a folder holding ``qmatrix.csv`` and ``responses.csv`` in the FrcSub
tidy form (``student_id,item_id,correct``; ``correct`` may be a score in [0, 1]).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qmatrix.datasets import Dataset, load_assist0910, load_frcsub
from qmatrix.example import example_qmatrix
from qmatrix.io import load_qmatrix
from qmatrix.model import QMatrix
from qmatrix.responses import StudentResponses, load_responses_csv
from qmatrix.simulate import simulate_dina
from qmatrix.uci import load_uci

__all__ = ["DATASET_NAMES", "load_dataset", "subsample", "truncate_responses"]

DATASET_NAMES = ("frcsub", "assist0910", "uci", "synthetic")


def subsample(dataset: Dataset, *, max_students: int | None, seed: int) -> Dataset:
    """At most ``max_students`` students, drawn with ``seed`` (the rest are dropped)."""
    if max_students is None or len(dataset.students) <= max_students:
        return dataset
    keep = sorted(np.random.default_rng(seed).choice(len(dataset.students), size=max_students, replace=False))
    students = [dataset.students[i] for i in keep]
    truth = {s.student_id: dataset.true_mastery[s.student_id] for s in students if s.student_id in dataset.true_mastery}
    return Dataset(
        name=dataset.name, qmatrix=dataset.qmatrix, students=students, simulated=dataset.simulated, true_mastery=truth
    )


def truncate_responses(dataset: Dataset, max_items: int | None) -> Dataset:
    """Keep each student's first ``max_items`` responses (file order), for prompts that must fit a
    small model's context; truth and baselines then see the same responses as the entities."""
    if max_items is None:
        return dataset
    if max_items < 1:
        raise ValueError(f"max_items must be >= 1, got {max_items}")
    students = [StudentResponses(student_id=s.student_id, responses=s.responses[:max_items]) for s in dataset.students]
    return Dataset(name=dataset.name, qmatrix=dataset.qmatrix, students=students, simulated=dataset.simulated, true_mastery=dataset.true_mastery)


def load_dataset(
    name: str,
    *,
    data_dir: str | Path | None = None,
    max_students: int | None = None,
    max_items: int | None = None,
    seed: int = 0,
    synthetic_students: int = 300,
    qmatrix: QMatrix | None = None,
    synthetic_items: int | None = None,
) -> Dataset:
    """``qmatrix`` and ``synthetic_items`` (items each simulated student answers; None: all) apply to ``synthetic``
    only: the Q-matrix its students are simulated on (default: the example)."""
    if qmatrix is not None and name != "synthetic":
        raise ValueError(f"dataset {name!r} has its own Q-matrix; only 'synthetic' simulates students on a given one")
    if name == "frcsub":
        dataset = load_frcsub(data_dir)
    elif name == "assist0910":
        dataset = load_assist0910(data_dir)
    elif name == "uci":
        dataset = load_uci(data_dir)
    elif name == "synthetic":
        dataset = simulate_dina(
            qmatrix or example_qmatrix(), n_students=synthetic_students, seed=seed, student_prefix="synth",
            items_per_student=synthetic_items,
        )
    else:
        folder = Path(name)
        if not (folder / "qmatrix.csv").is_file() or not (folder / "responses.csv").is_file():
            raise FileNotFoundError(
                f"dataset {name!r}: not one of {', '.join(DATASET_NAMES)} and not a folder with qmatrix.csv and responses.csv"
            )
        q = load_qmatrix(folder / "qmatrix.csv", id=folder.name)
        dataset = Dataset(name=folder.name, qmatrix=q, students=load_responses_csv(folder / "responses.csv"))
    return truncate_responses(subsample(dataset, max_students=max_students, seed=seed), max_items)
