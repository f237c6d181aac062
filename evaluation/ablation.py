"""What training buys local-fed: the held-out protocol, one split, one fitted set of baselines, and local-fed
trained several ways (``fedcd evaluate --local-fed-ablation``).

Every variant is trained on the protocol's TRAIN students only (``evaluation.served.train_local_fed``:
simulated institutions, FedAvg, the same trainer ``fedcd train`` runs), then diagnoses the validation
and test students from their observed responses. Each variant is scored two ways on the same
held-out responses as every baseline:

* ``link``: its mastery of the concepts the student's observed responses assess, through the
  protocol's item-easiness link (fitted on validation): exactly how ``single:local-fed`` and
  ``served`` are scored;
* ``own``: its own posterior-predictive P(correct) for each held-out item (its item parameters):
  how IRT, DINA and NCDM are scored.

Paired bootstrap intervals over test students compare each variant with IRT, DINA and NCDM, and
the pairs the issue asks about: trained vs untrained, federated vs centralized, DP vs non-private.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.baselines import CDMBaseline, NCDMSettings, response_matrix
from evaluation.harness import baseline_mastery, baselines
from evaluation.heldout import HeldoutScorer, train_easiness
from evaluation.metrics import auc
from evaluation.rows import Estimates
from evaluation.forecasts import ForecastScorer
from evaluation.served import LocalFedTraining, local_fed_folder
from federated.models import DEFAULT_KIND
from evaluation.significance import BOOTSTRAP_RESAMPLES, paired_bootstrap_auc
from qmatrix.splits import split_holdout, split_students
from federated import ModelRegistry, PublishOptions, train_federated
from federated.predict import predict_heldout, predict_mastery_batch
from federated.registry import LoadedModel
from providers.item_response import ItemResponseFunction, ItemToForecast, item_response_function
from qmatrix import Dataset, QMatrix, Response, StudentResponses

__all__ = ["AblationResult", "DEFAULT_VARIANTS", "Variant", "run_ablation"]


@dataclass(frozen=True)
class Variant:
    name: str
    training: LocalFedTraining


DEFAULT_VARIANTS: tuple[Variant, ...] = (
    # v2 (higher-order IRT) throughout: the ablation measures what training buys one model kind; the kind chosen on
    # held-out students (model "auto") is measured by evaluation.kinds
    Variant("untrained", LocalFedTraining(rounds=0, model=DEFAULT_KIND)),
    Variant("1 round", LocalFedTraining(rounds=1, model=DEFAULT_KIND)),
    Variant("trained", LocalFedTraining(model=DEFAULT_KIND)),
    Variant("centralized", LocalFedTraining(clients=1, model=DEFAULT_KIND)),
    Variant("DP ε=1", LocalFedTraining(epsilon=1.0, model=DEFAULT_KIND)),
    Variant("DP ε=2", LocalFedTraining(epsilon=2.0, model=DEFAULT_KIND)),
    Variant("DP ε=8", LocalFedTraining(epsilon=8.0, model=DEFAULT_KIND)),
    Variant("v1 (evidence encoder)", LocalFedTraining(model="evidence-encoder")),
)
# (row, reference) pairs reported with a paired interval besides the CDM comparisons
PAIRS = (("trained", "untrained"), ("1 round", "untrained"), ("trained", "centralized"),
         ("DP ε=1", "trained"), ("DP ε=2", "trained"), ("DP ε=8", "trained"), ("trained", "v1 (evidence encoder)"))
CDMS = ("irt", "dina", "ncdm")
# link: the protocol's concept-mastery link; own: the model's posterior predictive; forecast: the item forecast
# /v1/diagnose returns from the model's answer (its item parameters, the concepts not assessed at its prior)
SCORINGS = ("link", "own", "forecast")


@dataclass
class AblationResult:
    dataset: str
    seed: int
    split: dict[str, int]
    rows: list[dict[str, Any]] = field(default_factory=list)  # name, scoring, auc, training facts
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def auc_of(self, name: str, scoring: str) -> float | None:
        return next((r["auc"] for r in self.rows if r["name"] == name and r["scoring"] == scoring), None)

    def to_json(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "seed": self.seed, "split": self.split, "rows": self.rows,
                "comparisons": self.comparisons, "seconds": round(self.seconds, 1), "resamples": BOOTSTRAP_RESAMPLES}


class _ServedModel:
    """A trained variant as the service reads it for item forecasts (``providers.item_response``): its signed
    registry version, every item of the Q-matrix readable by it."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded

    def item_response(self, qmatrix_id: str | None, tenant: str | None, items: Sequence[ItemToForecast],
                      concepts: Sequence[str]) -> ItemResponseFunction:
        return item_response_function(self.loaded, items, untrained=self.loaded)


def _assessed(q: QMatrix, mastery: Sequence[dict[str, float]], observed: Sequence[Sequence[Response]]
              ) -> list[dict[str, float]]:
    """Keep the concepts each student's observed responses assess (what the local-fed entity answers)."""
    return [{c: m[c] for c in q.concepts_for([r.item_id for r in o]) if c in m} for m, o in zip(mastery, observed)]


def _students(observed: Sequence[Sequence[Response]]) -> list[StudentResponses]:
    return [StudentResponses(student_id=str(i), responses=tuple(o)) for i, o in enumerate(observed)]


def run_ablation(
    dataset: Dataset,
    *,
    seed: int = 0,
    variants: Sequence[Variant] = DEFAULT_VARIANTS,
    pairs: Sequence[tuple[str, str]] = PAIRS,
    ncdm: NCDMSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> AblationResult:
    """Train every variant on the train split and score it against the baselines (module docstring)."""
    started = time.perf_counter()
    say = progress or (lambda _: None)
    q = dataset.qmatrix
    split = split_students(dataset.students, seed=seed)
    val_obs, val_held = split_holdout(split.validation, seed)
    test_obs, test_held = split_holdout(split.test, seed)
    scorer = HeldoutScorer(q, train_easiness(split.train), val_held, test_held)
    y, owner = scorer.test_y, scorer.owner
    result = AblationResult(dataset=dataset.name, seed=seed,
                            split={"train": len(split.train), "validation": len(val_obs), "test": len(test_obs)})
    probs: dict[tuple[str, str], np.ndarray] = {}

    def add(name: str, scoring: str, p: np.ndarray, **facts: Any) -> None:
        probs[(name, scoring)] = p
        result.rows.append({"name": name, "scoring": scoring, "auc": auc(p, y), **facts})

    say("fitting the baselines on the train split")
    add("item-difficulty", "link", scorer.item_only())
    fitted: dict[str, CDMBaseline] = baselines(split.train, q, ncdm)
    x_test = response_matrix(_students(test_obs), q)
    column = {item: i for i, item in enumerate(q.item_ids)}
    items = np.array([column[r.item_id] for h in test_held for r in h], dtype=int)
    for name, model in fitted.items():
        if name == "proportion-correct":
            linked = Estimates(name=name, epsilon=None, validation=baseline_mastery(model, val_obs, q),
                               test=baseline_mastery(model, test_obs, q))
            add(name, "link", scorer.probabilities(linked)[0])
        else:
            add(name, "own", model.predict_pairs(x_test, owner, items))
    for variant in variants:
        say(f"training local-fed: {variant.name}")
        with local_fed_folder() as folder:
            trained = train_federated(
                dataset=Dataset(name=f"{q.id}-train", qmatrix=q, students=list(split.train),
                                simulated=dataset.simulated),
                registry=ModelRegistry(Path(folder)), config=variant.training.training_config(seed),
                publish=PublishOptions(force=True, activate=False),  # every variant is measured, gate or not
            )
            served_irf = _ServedModel(ModelRegistry(Path(folder)).load(trained.version)) if trained.version else None
        model = trained.model
        spent = trained.epsilon if variant.training.epsilon is not None else None
        selection = trained.selection or {}
        facts = {**variant.training.describe(), "rounds_run": len(trained.history), "epsilon_spent": spent,
                 "seconds": round(trained.seconds, 1), "kind_served": selection.get("chosen", ""),
                 "served_round": selection.get("served_round")}
        estimates = Estimates(
            name=variant.name, epsilon=None,
            validation=_assessed(q, predict_mastery_batch(model, q, _students(val_obs)), val_obs),
            test=_assessed(q, predict_mastery_batch(model, q, _students(test_obs)), test_obs))
        add(variant.name, "link", scorer.probabilities(estimates)[0], **facts)
        add(variant.name, "own", predict_heldout(model, q, test_obs, test_held), **facts)
        if served_irf is not None:  # as /v1/diagnose forecasts an item from this model's answer (no noise)
            add(variant.name, "forecast", ForecastScorer(q, served_irf, test_held).probabilities(estimates), **facts)
    for (name, scoring), p in probs.items():
        if name in CDMS or name in ("item-difficulty", "proportion-correct"):
            continue
        for cdm in CDMS + ("proportion-correct",):
            reference = probs.get((cdm, "own")) if cdm in CDMS else probs.get((cdm, "link"))
            if reference is not None:
                result.comparisons.append(_compare(name, scoring, cdm, p, reference, y, owner, seed))
    for name, reference in pairs:
        for scoring in SCORINGS:
            if (name, scoring) in probs and (reference, scoring) in probs:
                result.comparisons.append(_compare(name, scoring, reference, probs[(name, scoring)],
                                                   probs[(reference, scoring)], y, owner, seed))
    result.seconds = time.perf_counter() - started
    return result


def _compare(name: str, scoring: str, reference: str, a: np.ndarray, b: np.ndarray, y: np.ndarray,
             owner: np.ndarray, seed: int) -> dict[str, Any]:
    diff, low, high = paired_bootstrap_auc(a, b, y, owner, seed=seed)
    return {"row": name, "scoring": scoring, "reference": reference, "diff": diff, "low": low, "high": high,
            "excludes_zero": bool(low > 0 or high < 0)}
