"""Seeded splits: students into train / validation / test, and responses into observed / held out.

The same functions serve the evaluation harness and ``/v1/calibrate`` dataset references,
so a calibration fitted on "validation" never sees a "test" student. They live in the bottom layer
so the gateway splits a dataset without importing the evaluation package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import zlib

import numpy as np

from qmatrix.responses import Response, StudentResponses

__all__ = ["HOLDOUT_FRACTION", "StudentSplit", "holdout_responses", "split_holdout", "split_students"]

HOLDOUT_FRACTION = 0.2


@dataclass(frozen=True)
class StudentSplit:
    train: list[StudentResponses]
    validation: list[StudentResponses]
    test: list[StudentResponses]

    def part(self, name: str) -> list[StudentResponses]:
        if name not in ("train", "validation", "test"):
            raise ValueError(f"unknown split part {name!r} (use train, validation or test)")
        return getattr(self, name)


def split_students(
    students: Sequence[StudentResponses],
    *,
    seed: int,
    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
) -> StudentSplit:
    """Shuffle with ``seed`` and cut by ``fractions`` (train, validation, test)."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or not np.isclose(sum(fractions), 1.0):
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    order = np.random.default_rng(seed).permutation(len(students))
    n_train = int(round(fractions[0] * len(students)))
    n_val = int(round(fractions[1] * len(students)))
    pick = [students[i] for i in order]
    return StudentSplit(train=pick[:n_train], validation=pick[n_train : n_train + n_val], test=pick[n_train + n_val :])


def holdout_responses(
    responses: Sequence[Response], *, fraction: float, rng: np.random.Generator
) -> tuple[list[Response], list[Response]]:
    """(observed, held out): ``fraction`` of the responses, at least one, never all."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    n = len(responses)
    if n < 2:
        return list(responses), []
    k = min(n - 1, max(1, int(round(fraction * n))))
    held = set(rng.choice(n, size=k, replace=False).tolist())
    return [r for i, r in enumerate(responses) if i not in held], [r for i, r in enumerate(responses) if i in held]


def split_holdout(
    students: Sequence[StudentResponses], seed: int, *, fraction: float = HOLDOUT_FRACTION
) -> tuple[list[list[Response]], list[list[Response]]]:
    """(observed, held out) per student, seeded by (seed, student id): the held-out protocol's hiding."""
    observed, held = [], []
    for s in students:
        rng = np.random.default_rng([seed, zlib.crc32(s.student_id.encode())])
        o, h = holdout_responses(s.responses, fraction=fraction, rng=rng)
        observed.append(o)
        held.append(h)
    return observed, held
