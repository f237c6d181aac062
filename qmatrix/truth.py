"""The paper's truth rule for real data, where no true mastery is known: proportion correct per concept.

The evaluation protocols score against it, and a calibration job uses it for a validation student given without
truth, so it lives in the bottom layer that both import.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qmatrix.model import QMatrix
from qmatrix.responses import Response

__all__ = ["proportion_correct_truth"]


def proportion_correct_truth(qmatrix: QMatrix, responses: Sequence[Response]) -> dict[str, float]:
    """The paper's rule: y_k = mean score on the student's answered items requiring concept k.

    It is computed from the very responses the entities are shown, so under the paper
    protocol the "truth" is a function of the prompt's inputs.
    """
    scores: dict[str, list[float]] = {}
    for r in responses:
        for concept in qmatrix.item(r.item_id).concepts:
            scores.setdefault(concept, []).append(r.score)
    return {c: float(np.mean(scores[c])) for c in qmatrix.concepts if c in scores}
