"""Datasets as padded tensors, student splits, client partitions, and the masked-response split.

Every student is one padded row: the items they answered (as indices into an item bank whose
feature table travels with the tensors), their scores, and an ``observed`` flag. Observed
entries come first in each row, so a batch can be trimmed to its longest student.

Partitions are over *students*: a client (a school, a tutor's class) holds whole students,
never parts of one, which is what student-level and client-level DP assume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from federated.features import item_features
from qmatrix import Dataset, QMatrix, QMatrixError, StudentResponses

__all__ = [
    "ResponseTensors",
    "Split",
    "dirichlet_partition",
    "encode_dataset",
    "encode_students",
    "hidden_mask",
    "iid_partition",
    "split_student_indices",
]


@dataclass(frozen=True)
class ResponseTensors:
    """Students' responses over one item bank. ``features`` rows follow ``item_ids``."""

    student_ids: tuple[str, ...]
    item_ids: tuple[str, ...]
    features: torch.Tensor  # (n_items, n_features) float32
    item_index: torch.Tensor  # (n_students, max_len) int64, 0 where padded
    scores: torch.Tensor  # (n_students, max_len) float32 in [0, 1]
    observed: torch.Tensor  # (n_students, max_len) bool, True entries first

    def __len__(self) -> int:
        return len(self.student_ids)

    def subset(self, indices: Sequence[int] | np.ndarray) -> ResponseTensors:
        """The given students (same item bank), trimmed to their longest row."""
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        observed = self.observed[idx]
        width = max(int(observed.sum(1).max()), 1) if len(idx) else 1
        return ResponseTensors(
            student_ids=tuple(self.student_ids[int(i)] for i in idx),
            item_ids=self.item_ids,
            features=self.features,
            item_index=self.item_index[idx, :width],
            scores=self.scores[idx, :width],
            observed=observed[:, :width],
        )

    def batch(
        self, indices: Sequence[int] | np.ndarray | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(features (B, L, F), scores (B, L), observed (B, L)) for the given students, trimmed."""
        idx = torch.as_tensor(indices, dtype=torch.int64)
        observed = self.observed[idx]
        width = max(int(observed.sum(1).max()), 1) if len(idx) else 1
        return self.features[self.item_index[idx, :width]], self.scores[idx, :width], observed[:, :width]

    def proportion_correct(self) -> np.ndarray:
        """Mean score per student (0.5 for a student with no responses)."""
        n = self.observed.sum(1).clamp(min=1)
        mean = (self.scores * self.observed).sum(1) / n
        return torch.where(self.observed.any(1), mean, torch.full_like(mean, 0.5)).numpy()

    def item_counts(self) -> np.ndarray:
        """Responses per bank item (in ``item_ids`` order), for weighting per-item parameters."""
        return np.bincount(self.item_index[self.observed].numpy(), minlength=len(self.item_ids)).astype(np.float64)

    def answered_items(self) -> set[str]:
        """Ids of the bank items that at least one of these students answered."""
        used = torch.unique(self.item_index[self.observed])
        return {self.item_ids[int(i)] for i in used}


def encode_students(
    qmatrix: QMatrix, students: Sequence[StudentResponses], *, concepts: Sequence[str] | None = None,
    text_dim: int = 0, table: np.ndarray | None = None,
) -> ResponseTensors:
    """Pad ``students`` over the item bank ``qmatrix``; unknown item ids raise, naming them all.

    ``table`` is the model's input rows for ``qmatrix.items`` (``model.item_table(qmatrix)``);
    without it, the v1 features over ``concepts`` (default: the Q-matrix's) and ``text_dim``.
    """
    unknown = qmatrix.unknown_items(r.item_id for s in students for r in s.responses)
    if unknown:
        raise QMatrixError([f"responses name items unknown to Q-matrix '{qmatrix.id}': {', '.join(unknown[:20])}"])
    row = {item_id: r for r, item_id in enumerate(qmatrix.item_ids)}
    width = max([len(s.responses) for s in students] + [1])
    index = np.zeros((len(students), width), dtype=np.int64)
    scores = np.zeros((len(students), width), dtype=np.float32)
    observed = np.zeros((len(students), width), dtype=bool)
    for s, student in enumerate(students):
        n = len(student.responses)
        index[s, :n] = [row[r.item_id] for r in student.responses]
        scores[s, :n] = [r.score for r in student.responses]
        observed[s, :n] = True
    return ResponseTensors(
        student_ids=tuple(s.student_id for s in students),
        item_ids=qmatrix.item_ids,
        features=torch.from_numpy(table if table is not None else
                                  item_features(qmatrix, concepts or qmatrix.concepts, text_dim=text_dim)),
        item_index=torch.from_numpy(index),
        scores=torch.from_numpy(scores),
        observed=torch.from_numpy(observed),
    )


def encode_dataset(dataset: Dataset, *, concepts: Sequence[str] | None = None, text_dim: int = 0,
                   table: np.ndarray | None = None) -> ResponseTensors:
    """All students of ``dataset``; ``concepts`` defaults to the dataset's Q-matrix order."""
    return encode_students(
        dataset.qmatrix, dataset.students, concepts=concepts or dataset.qmatrix.concepts, text_dim=text_dim,
        table=table,
    )


def hidden_mask(observed: torch.Tensor, *, frac: float, generator: torch.Generator) -> torch.Tensor:
    """Choose ~``frac`` of each student's observed responses to hide (the masked-response split).

    A student with n >= 2 responses gets between 1 and n - 1 hidden ones, so there is always
    something to predict and something to predict it from; a student with fewer gets none.
    """
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac must be in (0, 1), got {frac}")
    n = observed.sum(1)
    n_hide = torch.clamp(torch.round(frac * n), min=1)
    n_hide = torch.minimum(n_hide, n - 1).clamp(min=0)
    noise = torch.rand(observed.shape, generator=generator)
    noise = torch.where(observed, noise, torch.full_like(noise, 2.0))  # unobserved sort last
    rank = noise.argsort(1).argsort(1)
    return observed & (rank < n_hide[:, None])


@dataclass(frozen=True)
class Split:
    """Student indices for training, validation and test; disjoint, together all students."""

    train: np.ndarray
    validation: np.ndarray
    test: np.ndarray


def split_student_indices(
    n_students: int, *, rng: np.random.Generator, validation: float = 0.1, test: float = 0.2
) -> Split:
    """A seeded random split of student indices (students, not responses, are held out): rows of the encoded
    tensors. Not :func:`qmatrix.split_students`, which splits ``StudentResponses`` by fractions for the evaluation
    and calibration jobs; the two draw differently, and each keeps its own committed numbers."""
    if validation < 0 or test < 0 or validation + test >= 1:
        raise ValueError(f"validation and test fractions must be >= 0 and sum to < 1, got {validation}, {test}")
    order = rng.permutation(n_students)
    n_test, n_val = round(test * n_students), round(validation * n_students)
    return Split(
        train=np.sort(order[n_test + n_val:]),
        validation=np.sort(order[n_test:n_test + n_val]),
        test=np.sort(order[:n_test]),
    )


def iid_partition(n_students: int, *, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle students and deal them out: client sizes differ by at most one."""
    if n_clients < 1 or n_clients > n_students:
        raise ValueError(f"n_clients must be in [1, {n_students}], got {n_clients}")
    return [np.sort(part) for part in np.array_split(rng.permutation(n_students), n_clients)]


def dirichlet_partition(
    proportion_correct: np.ndarray,
    *,
    n_clients: int,
    alpha: float,
    rng: np.random.Generator,
    n_groups: int = 5,
    min_size: int = 1,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Non-IID clients: students grouped by ability, each group spread over clients by Dirichlet(alpha).

    Real federations differ by *who* their students are (a selective school vs. a remedial
    class). Lacking school ids (ASSIST0910 has none), we mimic that with ability: students
    are cut into ``n_groups`` quantile groups of proportion correct, and each group's
    students are divided among clients in proportions drawn from Dirichlet(alpha * 1_C).
    Small alpha (0.1) gives clients dominated by one ability band; large alpha (100)
    approaches an IID split. Draws are repeated until every client holds ``min_size``
    students, and ``ValueError`` is raised after ``max_tries``.
    """
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    values = np.asarray(proportion_correct, dtype=float)
    n = len(values)
    if n_clients < 1 or n_clients * min_size > n:
        raise ValueError(f"cannot give {n_clients} clients {min_size} students each from {n}")
    # Rank-based quantile groups, so ties (many students at the same score) are split evenly.
    ranks = np.argsort(np.argsort(values + rng.uniform(0, 1e-9, n), kind="stable"), kind="stable")
    groups = np.minimum(ranks * n_groups // n, n_groups - 1)
    for _ in range(max_tries):
        parts: list[list[int]] = [[] for _ in range(n_clients)]
        for g in range(n_groups):
            members = rng.permutation(np.flatnonzero(groups == g))
            cuts = (np.cumsum(rng.dirichlet(np.full(n_clients, alpha))) * len(members)).round().astype(int)[:-1]
            for c, chunk in enumerate(np.split(members, cuts)):
                parts[c].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"no Dirichlet({alpha}) draw in {max_tries} tries gave every client {min_size} students")
