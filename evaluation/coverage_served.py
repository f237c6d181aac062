"""The served path of the coverage report: local-fed's answer and its own uncertainty, privatized, aggregated.

Each simulated student is diagnosed as a request would be: local-fed's mastery and its uncertainty curve
(:class:`providers.MasteryUncertainty`), released through the server's default mechanism (``anchored_piecewise``, ε 32, Δ = the
assessed concepts), combined by :func:`diagnosis.posterior.posterior_aggregate`. ``calibrated`` adds two SIMULATED stand-ins
for measured LLMs: each answers the truth plus independent N(0, 0.2²) error, clipped, and a calibration measured
their τ on 200 other simulated students (:func:`diagnosis.fit_entity_error_sd`). Their errors are independent of
local-fed's and of each other: a favourable assumption real LLMs, which read the same answers, do not meet.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from diagnosis.posterior import UncertainAnswer, fit_entity_error_sd, posterior_aggregate
from evaluation.coverage_sim import Simulated
from federated.hocdm import HigherOrderCDM
from privacy import AnchoredPiecewiseMechanism, Mechanism, requested_name
from privacy.registry import mechanism_for_request
from providers.local_fed import SPREAD_SHIFTS, uncertainty_curve

__all__ = ["EPSILON", "LLM_ERROR_SD", "MECHANISM", "SimulatedRequest", "served_intervals", "simulated_llm_answers",
           "simulated_requests"]

LLM_ERROR_SD = 0.2
EPSILON = 32.0
MECHANISM = requested_name(AnchoredPiecewiseMechanism)  # the server's default (app/settings/privacy.py)


def simulated_llm_answers(truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A SIMULATED stand-in for a measured LLM: the truth plus independent N(0, LLM_ERROR_SD²) error, clipped."""
    return np.clip(truth + rng.normal(0.0, LLM_ERROR_SD, truth.shape), 0.0, 1.0)


@dataclass(frozen=True)
class SimulatedRequest:
    """One simulated student as a request sees it: its answered concepts (``columns`` in the model's order and their
    names), the answers behind each, and the server's default mechanism for that many assessed concepts."""

    student: int
    columns: list[int]
    concepts: list[str]
    answers: dict[str, int]
    mechanism: Mechanism


def simulated_requests(names: Sequence[str], feats: torch.Tensor, sim: Simulated) -> Iterator[SimulatedRequest]:
    """Each of ``sim``'s students in turn (``names``: the model's concepts; ``feats``: the responses' features)."""
    k = len(names)
    counts = feats[..., :k].sum(1).numpy().astype(int)
    for b in range(sim.truth.shape[0]):
        columns = [j for j in range(k) if sim.answered[b, j]]
        mechanism = mechanism_for_request(name=MECHANISM, epsilon=EPSILON, mode="assessed", n_concepts_total=k,
                                          n_concepts_assessed=len(columns))
        yield SimulatedRequest(b, columns, [names[j] for j in columns], {names[j]: int(counts[b, j]) for j in columns},
                               mechanism)


def served_intervals(model: HigherOrderCDM, feats: torch.Tensor, sim: Simulated, *, measured: bool,
                     with_llms: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) per (student, concept) as served (NaN where the concept was not answered)."""
    rng = np.random.default_rng(seed)
    k = len(model.concepts)
    observed = torch.ones_like(sim.scores).bool()
    with torch.no_grad():
        mastery = model.mastery(feats, sim.scores, observed).double().numpy()
        at, sd = (t.double().numpy() for t in model.logit_sd_curve(feats, observed, SPREAD_SHIFTS))
    taus: dict[str, float] = {}
    if with_llms:  # a calibration measures each stand-in's τ on other simulated students
        truth = rng.random((200, k))
        taus = {name: fit_entity_error_sd(simulated_llm_answers(truth, rng).ravel(), truth.ravel()) for name in ("llm-a", "llm-b")}
    lower, upper = np.full(sim.truth.shape, np.nan), np.full(sim.truth.shape, np.nan)
    for request in simulated_requests(list(model.concepts), feats, sim):
        b, answered, concepts = request.student, request.columns, request.concepts
        spread = {c: uncertainty_curve(at[:, b, j], sd[:, b, j], answers=request.answers[c], measured=measured)
                  for j, c in zip(answered, concepts)}
        clean = {c: float(mastery[b, j]) for j, c in zip(answered, concepts)}
        predictions: dict[str, dict[str, float]] = {
            "local-fed": UncertainAnswer(request.mechanism.privatize(clean, rng), spread)}
        for name in taus:
            llm = simulated_llm_answers(sim.truth[b, answered], rng)
            predictions[name] = request.mechanism.privatize(dict(zip(concepts, llm.tolist())), rng)
        result = posterior_aggregate(predictions, concepts, request.mechanism, None, taus, default_error_sd=None)
        for j, c in zip(answered, concepts):
            lower[b, j], upper[b, j] = result.intervals[c]
    return lower, upper
