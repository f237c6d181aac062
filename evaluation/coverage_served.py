"""The served path of the coverage report: local-fed's answer and its own uncertainty, privatized, aggregated.

Each simulated student is diagnosed as a request would be: local-fed's mastery and its uncertainty curve
(:class:`providers.MasteryUncertainty`), released through the server's default mechanism (``anchored_piecewise``, ε 32, Δ = the
assessed concepts), combined by :func:`diagnosis.posterior.posterior_aggregate`. ``calibrated`` adds two SIMULATED stand-ins
for measured LLMs: each answers the truth plus independent N(0, 0.2²) error, clipped, and a calibration measured
their τ on 200 other simulated students (:func:`diagnosis.fit_entity_error_sd`). Their errors are independent of
local-fed's and of each other: a favourable assumption real LLMs, which read the same answers, do not meet.
"""

from __future__ import annotations

import numpy as np
import torch

from diagnosis.posterior import UncertainAnswer, fit_entity_error_sd, posterior_aggregate
from evaluation.coverage_sim import Simulated
from federated.hocdm import HigherOrderCDM
from privacy import AnchoredPiecewiseMechanism, requested_name
from privacy.registry import mechanism_for_request
from providers.local_fed import SPREAD_SHIFTS, uncertainty_curve

__all__ = ["EPSILON", "LLM_ERROR_SD", "MECHANISM", "served_intervals", "simulated_llm_answers"]

LLM_ERROR_SD = 0.2
EPSILON = 32.0
MECHANISM = requested_name(AnchoredPiecewiseMechanism)  # the server's default (app/settings/privacy.py)


def simulated_llm_answers(truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A SIMULATED stand-in for a measured LLM: the truth plus independent N(0, LLM_ERROR_SD²) error, clipped."""
    return np.clip(truth + rng.normal(0.0, LLM_ERROR_SD, truth.shape), 0.0, 1.0)


def served_intervals(model: HigherOrderCDM, feats: torch.Tensor, sim: Simulated, *, measured: bool,
                     with_llms: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) per (student, concept) as served (NaN where the concept was not answered)."""
    rng = np.random.default_rng(seed)
    k = len(model.concepts)
    observed = torch.ones_like(sim.scores).bool()
    with torch.no_grad():
        mastery = model.mastery(feats, sim.scores, observed).double().numpy()
        at, sd = (t.double().numpy() for t in model.logit_sd_curve(feats, observed, SPREAD_SHIFTS))
    counts = feats[..., :k].sum(1).numpy().astype(int)
    taus: dict[str, float] = {}
    if with_llms:  # a calibration measures each stand-in's τ on other simulated students
        truth = rng.random((200, k))
        taus = {name: fit_entity_error_sd(simulated_llm_answers(truth, rng).ravel(), truth.ravel()) for name in ("llm-a", "llm-b")}
    lower, upper = np.full(sim.truth.shape, np.nan), np.full(sim.truth.shape, np.nan)
    names = list(model.concepts)
    for b in range(sim.truth.shape[0]):
        answered = [j for j in range(k) if sim.answered[b, j]]
        concepts = [names[j] for j in answered]
        mechanism = mechanism_for_request(name=MECHANISM, epsilon=EPSILON, mode="assessed", n_concepts_total=k,
                                          n_concepts_assessed=len(concepts))
        spread = {names[j]: uncertainty_curve(at[:, b, j], sd[:, b, j], answers=int(counts[b, j]), measured=measured)
                  for j in answered}
        clean = {names[j]: float(mastery[b, j]) for j in answered}
        predictions: dict[str, dict[str, float]] = {
            "local-fed": UncertainAnswer(mechanism.privatize(clean, rng), spread)}
        for name in taus:
            llm = simulated_llm_answers(sim.truth[b, answered], rng)
            predictions[name] = mechanism.privatize(dict(zip(concepts, llm.tolist())), rng)
        result = posterior_aggregate(predictions, concepts, mechanism, None, taus, default_error_sd=None)
        for j in answered:
            lower[b, j], upper[b, j] = result.intervals[names[j]]
    return lower, upper
