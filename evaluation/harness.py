"""Pieces every protocol shares: the federation under evaluation (with ``local-fed`` trained on the
train split), collecting its answers, the baselines, and how a row's uncovered concepts count."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.baselines import DINA, IRT2PL, NCDM, CDMBaseline, NCDMSettings, ProportionCorrect, response_matrix
from evaluation.collect import CollectOptions, Collected, NoiseSetting, collect_predictions
from evaluation.served import ServedConfig, train_local_fed
from providers import Entity
from providers.wrappers import Cached
from qmatrix import QMatrix, Response, StudentResponses

__all__ = [
    "EvaluationConfig",
    "Federation",
    "Progress",
    "Mastery",
    "assessed",
    "baselines",
    "baseline_mastery",
    "collect",
    "federation",
    "fill_uncovered",
    "noise_settings",
    "served_setting",
]

Mastery = dict[str, float]
Progress = Callable[[int], None]


def served_setting(served: ServedConfig | None) -> list[NoiseSetting]:
    """The served noise as a collection setting (none without a served configuration, or when it is no noise)."""
    if served is None or served.noise.noiseless:
        return []
    return [NoiseSetting(served.noise.mechanism_name, served.noise.epsilon, served.noise.sensitivity)]


def noise_settings(epsilons: Sequence[float]) -> list[NoiseSetting]:
    return [NoiseSetting("laplace", None), *(NoiseSetting(m, e) for e in epsilons for m in ("laplace", "gaussian"))]


def assessed(q: QMatrix, students: Sequence[Sequence[Response]]) -> list[tuple[str, ...]]:
    return [q.concepts_for([r.item_id for r in s]) for s in students]


@dataclass
class Federation:
    """The entities under evaluation, each ``Cached`` once for the whole run (every noise setting and the
    served rows reuse one answer per prompt), and what was trained for it."""

    entities: dict[str, Cached]
    local_fed: dict[str, Any] = field(default_factory=dict)

    def calls(self) -> dict[str, int]:
        return {n: c.misses for n, c in self.entities.items()}


@dataclass(frozen=True, kw_only=True)
class EvaluationConfig:
    """One evaluation run: the ``protocol``, the finite noise levels (ε = ∞ is always included), the seed of every
    split and draw, the calibration ``method`` of the federation rows, the sensitivity mode and δ of every release,
    students diagnosed at once, SIMULATED students per generator (simulated protocol), ``served``: add the served
    rows (held-out and simulated protocols) and train ``local-fed`` on the train split, and ``ncdm``: fit NCDM with
    these settings next to the classical baselines."""

    protocol: str
    epsilons: Sequence[float]
    seed: int = 0
    method: str = "bias"
    sensitivity: str = "paper"
    delta: float = 1e-5
    concurrency: int = 4
    n_simulated: int = 500
    served: ServedConfig | None = None
    ncdm: NCDMSettings | None = None

    def collect_options(self, progress: Progress | None) -> CollectOptions:
        """How this run's protocols ask for answers (``progress``: 1 per answered student and setting)."""
        return CollectOptions(sensitivity=self.sensitivity, delta=self.delta, concurrency=self.concurrency,
                              on_progress=progress)


def federation(
    entities: Mapping[str, Entity], train: Sequence[StudentResponses], q: QMatrix, *, simulated: bool,
    served: ServedConfig | None, seed: int, folder: Path,
) -> Federation:
    """``entities`` plus, when the served configuration has one, ``local-fed`` trained on ``train`` only."""
    members = dict(entities)
    facts: dict[str, Any] = {}
    if served is not None and served.local_fed is not None:
        members["local-fed"], facts = train_local_fed(train, q, simulated=simulated, training=served.local_fed,
                                                       seed=seed, folder=folder)
    return Federation(entities={n: Cached(e) for n, e in members.items()}, local_fed=facts)


async def collect(
    fed: Federation, q: QMatrix, val: Sequence[Sequence[Response]], test: Sequence[Sequence[Response]],
    epsilons: Sequence[float], *, seed: int, options: CollectOptions, extra: Sequence[NoiseSetting] = (),
) -> tuple[Collected, Collected, dict[str, int]]:
    """The federation's privatized answers for validation and test students at every noise setting (and
    the ``extra`` ones), and how many requests failed per entity."""
    settings = [*noise_settings(epsilons), *(x for x in extra if x not in noise_settings(epsilons))]
    val_c = await collect_predictions(fed.entities, q, val, settings, seed=seed, options=options)
    test_c = await collect_predictions(fed.entities, q, test, settings, seed=seed + 1, options=options)
    failures = {n: val_c.failures.get(n, 0) + test_c.failures.get(n, 0) for n in fed.entities
                if val_c.failures.get(n) or test_c.failures.get(n)}
    return val_c, test_c, failures


def baselines(train: Sequence[StudentResponses], q: QMatrix, ncdm: NCDMSettings | None) -> dict[str, CDMBaseline]:
    """The cognitive-diagnosis baselines fitted on the train split (``ncdm`` None: NCDM left out)."""
    x = response_matrix(list(train), q)
    models: dict[str, CDMBaseline] = {"irt": IRT2PL().fit(x, q.matrix), "dina": DINA().fit(x, q.matrix)}
    if ncdm is not None:
        models["ncdm"] = NCDM(ncdm).fit(x, q.matrix)
    models["proportion-correct"] = ProportionCorrect().fit(x, q.matrix)
    return models


def baseline_mastery(model: CDMBaseline, students: Sequence[Sequence[Response]], q: QMatrix) -> list[Mastery]:
    x = response_matrix([StudentResponses(student_id=str(i), responses=tuple(r)) for i, r in enumerate(students)], q)
    m = model.mastery(x)
    out = []
    for i, responses in enumerate(students):
        concepts = q.concepts_for([r.item_id for r in responses])
        out.append({c: float(m[i, q.concepts.index(c)]) for c in concepts if not np.isnan(m[i, q.concepts.index(c)])})
    return out


def fill_uncovered(
    estimates: Sequence[Mastery], needed: Sequence[Iterable[str]], reference: Sequence[Mastery]
) -> tuple[list[Mastery], int]:
    """Every needed concept gets a value, so every row is scored on the same responses or concepts.

    A concept the row did not diagnose for a student (no entity answered it, or the student's
    observed responses never assessed it) counts at the row's mean estimate of that concept over
    the validation students (``reference``) — what the row says about an average student — or, for
    a concept the row never estimated, at its mean over all concepts; a row with no validation
    estimate at all counts at ½. Returns the filled estimates and how many values were filled.
    """
    per_concept: dict[str, list[float]] = {}
    for est in reference:
        for c, v in est.items():
            per_concept.setdefault(c, []).append(v)
    means = {c: float(np.mean(v)) for c, v in per_concept.items()}
    overall = float(np.mean([v for vs in per_concept.values() for v in vs])) if per_concept else 0.5
    filled, count = [], 0
    for est, concepts in zip(estimates, needed):
        row = dict(est)
        for c in concepts:
            if c not in row:
                row[c] = means.get(c, overall)
                count += 1
        filled.append(row)
    return filled, count
