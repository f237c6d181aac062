"""The frontier's estimators: the plain mean of the reports and the (vectorized) Bayes posterior with its fit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from diagnosis.aggregation import residual_aggregate
from calibration.calibrators import PosteriorCalibrator
from evaluation.collect import NoiseSetting
from evaluation.frontier.results import Mastery, Predictions
from diagnosis.posterior import (
    UNIFORM_PRIOR,
    BetaPrior,
    ReportModel,
    fit_concept_priors,
    fit_entity_error_sd,
    posterior_summaries,
)
from privacy import Mechanism, mechanism_for_request
from qmatrix import QMatrix, Response

# --------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------


def assessed_concepts(q: QMatrix, students: Sequence[Sequence[Response]]) -> list[tuple[str, ...]]:
    return [q.concepts_for([r.item_id for r in s]) for s in students]


def plain_mean(preds: Sequence[Predictions], concepts: Sequence[Sequence[str]]) -> list[Mastery]:
    return [residual_aggregate(p, c, alpha=0.0).mastery for p, c in zip(preds, concepts)]


def release_mechanisms(q: QMatrix, concepts: Sequence[Sequence[str]], setting: NoiseSetting, *, sensitivity: str, delta: float) -> list[Mechanism]:
    """Per student, the mechanism their answers were released through (the registry builds each once)."""
    return [
        mechanism_for_request(
            name=setting.mechanism, epsilon=setting.epsilon, mode=sensitivity,  # type: ignore[arg-type]
            n_concepts_total=len(q.concepts), n_concepts_assessed=len(assessed), delta=delta,
        )
        for assessed in concepts
    ]


def posterior_means(
    preds: Sequence[Predictions],
    concepts: Sequence[Sequence[str]],
    mechanisms: Sequence[Mechanism],
    entity_names: Sequence[str],
    priors: Mapping[str, BetaPrior],
    taus: Mapping[str, float],
) -> list[Mastery]:
    """Posterior means per student and concept — :func:`posterior_aggregate`'s numbers, vectorized over students."""
    out: list[Mastery] = [{} for _ in preds]
    groups: dict[Mechanism, list[int]] = {}  # students released through the same mechanism share its models
    for i, mechanism in enumerate(mechanisms):
        groups.setdefault(mechanism, []).append(i)
    for mechanism, rows in groups.items():
        models = [ReportModel(mechanism, float(taus.get(e, 0.0))) for e in entity_names]
        for concept in dict.fromkeys(c for i in rows for c in concepts[i]):
            idx = [i for i in rows if concept in concepts[i] and any(concept in preds[i].get(e, {}) for e in entity_names)]
            if not idx:
                continue
            reports = np.array([[preds[i].get(e, {}).get(concept, np.nan) for e in entity_names] for i in idx], dtype=float)
            summary = posterior_summaries(reports, models, priors.get(concept, UNIFORM_PRIOR))
            for i, m in zip(idx, summary.mean):
                out[i][concept] = float(m)
    return out


@dataclass(frozen=True)
class PosteriorFit:
    priors: dict[str, BetaPrior]
    taus: dict[str, float]

    def prior_means(self, concepts: Sequence[str]) -> Mastery:
        return {c: self.priors.get(c, UNIFORM_PRIOR).mean for c in concepts}

    def to_json(self) -> dict[str, Any]:
        u_shaped = sum(1 for p in self.priors.values() if p.a == p.b == 0.5)
        return {
            "entity_error_sd": {e: round(t, 4) for e, t in self.taus.items()},
            "n_concepts_with_prior": len(self.priors),
            "n_priors_uniform_or_u_shaped": sum(1 for p in self.priors.values() if p.a == p.b and p.a in (0.5, 1.0)),
            "n_priors_u_shaped_floor": u_shaped,
            "priors": {c: [round(p.a, 3), round(p.b, 3)] for c, p in self.priors.items()},
        }


def fit_posterior(clean: Sequence[Predictions], truths: Sequence[Mastery], entity_names: Sequence[str]) -> PosteriorFit:
    """The API's ``posterior`` calibration: Beta priors from the truth, τ = RMS error of the clean answers."""
    floor = PosteriorCalibrator().min_sd
    answers: dict[str, tuple[list[float], list[float]]] = {e: ([], []) for e in entity_names}
    for preds, truth in zip(clean, truths):
        for e in entity_names:
            for concept, value in preds.get(e, {}).items():
                if concept in truth:
                    answers[e][0].append(value)
                    answers[e][1].append(truth[concept])
    taus = {e: max(floor, fit_entity_error_sd(a, t)) for e, (a, t) in answers.items()}
    return PosteriorFit(priors=fit_concept_priors(truths), taus=taus)
