"""Central differential privacy for cohort statistics (a trusted aggregator sees each
student's diagnosis and releases only noisy aggregates).

Per concept k over the students assessed on k, two statistics are released:

* the **sum** of their masteries (each contribution bounded to [0, 1], so adding or
  removing one student changes it by at most 1), and
* a **histogram** of their masteries over fixed bins (one student changes one count by 1).

Each gets Laplace noise of scale 1/ε_stat. A student can appear in all K concepts, so by
basic composition the report is ε-DP for each student with ε_stat = ε / (2·K). The mean is
the noisy sum over the noisy count (the histogram's total), clipped to [0, 1]. Noise is
drawn from a generator seeded from the OS CSPRNG unless a seed is injected (tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from privacy.ranges import Epsilon, check_dimension

__all__ = ["MAX_BINS", "CohortConceptStats", "cohort_statistics"]

MAX_BINS = 1_000  # histogram bins per concept: each is a noisy count, and all of them are released


@dataclass(frozen=True)
class CohortConceptStats:
    mean: float | None  # None when the noisy count is too small to divide by
    noisy_count: float
    bin_edges: list[float]
    counts: list[float]  # noisy, clipped at 0


def cohort_statistics(
    mastery: Sequence[Mapping[str, float]],
    concepts: Sequence[str],
    *,
    epsilon: float,
    bins: int,
    rng: np.random.Generator,
) -> tuple[dict[str, CohortConceptStats], float]:
    """(per-concept noisy statistics, ε per statistic). ``mastery``: one dict per student."""
    epsilon = Epsilon(epsilon)
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins must be an integer in [1, {MAX_BINS}], got {bins!r}")
    if not concepts:
        raise ValueError("no concept to report")
    check_dimension(len(concepts), name="number of concepts")
    eps_stat = epsilon / (2 * len(concepts))
    scale = 1.0 / eps_stat
    edges = np.linspace(0.0, 1.0, bins + 1)
    out: dict[str, CohortConceptStats] = {}
    for concept in concepts:
        raw = np.array([m[concept] for m in mastery if concept in m], dtype=float)
        if not np.all(np.isfinite(raw)):
            raise ValueError(f"mastery values of concept {concept!r} must be finite")
        values = np.clip(raw, 0.0, 1.0)
        counts, _ = np.histogram(values, bins=edges)
        noisy_counts = np.maximum(counts + rng.laplace(0.0, scale, size=bins), 0.0)
        noisy_sum = float(values.sum() + rng.laplace(0.0, scale))
        noisy_n = float(noisy_counts.sum())
        mean = float(np.clip(noisy_sum / noisy_n, 0.0, 1.0)) if noisy_n >= 1.0 else None
        out[concept] = CohortConceptStats(
            mean=mean, noisy_count=noisy_n, bin_edges=[float(e) for e in edges], counts=[float(c) for c in noisy_counts]
        )
    return out, eps_stat
