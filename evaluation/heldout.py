"""The held-out protocol: 20 % of each validation and test student's responses are hidden (seeded), the
diagnosis sees the rest, and every row predicts the hidden ones.

* ``served`` and ``single:local-fed`` are scored as served: by the item forecasts ``/v1/diagnose``
  returns (:mod:`evaluation.forecasts`), when the federation has ``local-fed``; their link scoring
  is beside them as ``served (link)`` and ``single:local-fed (link)``.
* The other federation rows (``single:*``, ``simple-ensemble``, ``fed-*``, ``full``) predict
  through the monotone link of :mod:`evaluation.link` (mastery and the item's train easiness,
  fitted on validation); ``item-difficulty`` is that link without mastery, the floor a diagnosis
  must clear.
* Baselines (``irt``, ``dina``, ``ncdm``) are fitted on the train students and predict from each
  test student's observed responses with their own item parameters. ``proportion-correct`` has no
  item model: its per-concept proportions go through the same item-easiness link as the federation
  rows (a fair floor for any diagnosis scored through the link).
* **Every row is scored on the same held-out responses.** A hidden item whose concepts a row did not
  diagnose for that student counts at the row's validation-mean estimate of those concepts
  (:func:`evaluation.harness.fill_uncovered`); the rows' ``filled`` says how often.
* ``served`` is compared with every baseline and with ``single:local-fed`` by a paired bootstrap
  over test students (:mod:`evaluation.significance`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from calibration.ability_truth import ability_truths, restrict, trained_scale
from calibration.held_out import item_checks
from evaluation.baselines import CDMBaseline, response_matrix
from evaluation.forecasts import FORECAST_ROWS, LINK_SUFFIX, ForecastScorer, item_responder
from evaluation.harness import (EvaluationConfig, Federation, Mastery, Progress, assessed, baseline_mastery, baselines,
                                collect, fill_uncovered, served_setting)
from evaluation.link import ItemEasiness, fit_link, item_easiness
from evaluation.metrics import accuracy, auc, ece, response_rmse
from evaluation.results import VIA_API_ROW, EvaluationResult, Row
from evaluation.rows import Estimates, federation_estimates, single_estimates
from evaluation.served import HeldoutStudents, ServedRowSource, ServedValidation, served_estimates
from evaluation.significance import BOOTSTRAP_RESAMPLES, PairedDifference, paired_bootstrap_auc
from qmatrix.splits import split_holdout
from qmatrix.truth import proportion_correct_truth
from qmatrix import QMatrix, Response, StudentResponses

__all__ = ["HeldoutScorer", "heldout_protocol", "train_easiness", "validation_truths"]

COMPARED_WITH = ("irt", "dina", "ncdm", "proportion-correct", "single:local-fed", "item-difficulty")


class HeldoutScorer:
    """Turns a row's mastery estimates into P(correct) for the held-out responses (validation and test); the
    link is fitted on the validation students, ``test_y`` holds the test responses it is scored on."""

    def __init__(self, q: QMatrix, easiness: ItemEasiness, val_held: Sequence[Sequence[Response]],
                 test_held: Sequence[Sequence[Response]]) -> None:
        self.q, self.easiness = q, easiness
        self.val_held, self.test_held = val_held, test_held
        self.val_y = np.array([r.score for h in val_held for r in h], dtype=float)
        self.test_y = np.array([r.score for h in test_held for r in h], dtype=float)
        self.val_d = easiness([r.item_id for h in val_held for r in h])
        self.test_d = easiness([r.item_id for h in test_held for r in h])
        self.owner = np.array([s for s, h in enumerate(test_held) for _ in h])

    def _mean_mastery(self, est: Sequence[Mastery], held: Sequence[Sequence[Response]]) -> np.ndarray:
        return np.array([np.mean([m[c] for c in self.q.item(r.item_id).concepts]) for m, h in zip(est, held) for r in h])

    def _needed(self, held: Sequence[Sequence[Response]]) -> list[set[str]]:
        return [{c for r in h for c in self.q.item(r.item_id).concepts} for h in held]

    def probabilities(self, est: Estimates) -> tuple[np.ndarray, int]:
        """Test P(correct) of one row, and how many concept values the uncovered-concept rule filled."""
        val, _ = fill_uncovered(est.validation, self._needed(self.val_held), est.validation)
        test, filled = fill_uncovered(est.test, self._needed(self.test_held), est.validation)
        link = fit_link(self._mean_mastery(val, self.val_held), self.val_y, self.val_d)
        return link(self._mean_mastery(test, self.test_held), self.test_d), filled

    def item_only(self) -> np.ndarray:
        link = fit_link(np.zeros_like(self.val_y), self.val_y, self.val_d)
        return link(np.zeros_like(self.test_y), self.test_d)


def _row(name: str, eps: float | None, probs: np.ndarray, y: np.ndarray, *, mechanism: str = "none", filled: int = 0) -> Row:
    return Row(name=name, epsilon=eps, auc=auc(probs, y), acc=accuracy(probs, y), rmse=response_rmse(probs, y),
               ece=ece(probs, y), n=int(probs.size), mechanism=mechanism, filled=filled)


def _baseline_probs(model: CDMBaseline, test_obs: Sequence[Sequence[Response]], test_held: Sequence[Sequence[Response]],
                    q: QMatrix) -> np.ndarray:
    x = response_matrix([StudentResponses(student_id=str(i), responses=tuple(o)) for i, o in enumerate(test_obs)], q)
    column = {item: i for i, item in enumerate(q.item_ids)}
    students = np.array([s for s, h in enumerate(test_held) for _ in h], dtype=int)
    items = np.array([column[r.item_id] for h in test_held for r in h], dtype=int)
    return model.predict_pairs(x, students, items)


def validation_truths(
    q: QMatrix, validation: Sequence[StudentResponses], observed: Sequence[Sequence[Response]]
) -> list[dict[str, float]]:
    """Calibration truth of validation students: proportion correct over all their responses, for the concepts
    their observed responses assess."""
    return [
        {c: v for c, v in proportion_correct_truth(q, list(s.responses)).items() if c in concepts}
        for s, concepts in zip(validation, assessed(q, observed))
    ]


def train_easiness(train: Sequence[StudentResponses]) -> ItemEasiness:
    """Each item's easiness from the train students' scores (the link's item term)."""
    scores: dict[str, list[float]] = {}
    for s in train:
        for r in s.responses:
            scores.setdefault(r.item_id, []).append(r.score)
    return item_easiness(scores)


async def heldout_protocol(
    fed: Federation, q: QMatrix, split, result: EvaluationResult, config: EvaluationConfig, *,  # type: ignore[no-untyped-def]
    progress: Progress | None, served_via: ServedRowSource | None = None,
) -> None:
    epsilons, served, ncdm, seed = config.epsilons, config.served, config.ncdm, config.seed
    options = config.collect_options(progress)
    val_obs, val_held = split_holdout(split.validation, seed)
    test_obs, test_held = split_holdout(split.test, seed)
    result.split = {"train": len(split.train), "validation": len(val_obs), "test": len(test_obs)}
    val_truth = validation_truths(q, split.validation, val_obs)
    responder = item_responder(fed.entities)
    forecasts = ForecastScorer(q, responder, test_held) if responder is not None else None
    # the served calibration's truth on the scale its forecasts read, as the calibrate job derives it; with a DP
    # release the job keeps responses back for its guard (calibration.held_out), here the hidden ones, and the truth
    # reads only the rest
    trained = forecasts is not None and trained_scale(forecasts.irf)
    kept_back = trained and served is not None and served.release_epsilon is not None
    checks = [item_checks(forecasts.irf, h) for h in val_held] if kept_back else None  # type: ignore[union-attr]
    served_truth = restrict(ability_truths(forecasts.irf, val_obs if kept_back else [  # type: ignore[union-attr]
        s.responses for s in split.validation]), val_truth) if trained else val_truth
    val_c, test_c, result.entity_failures = await collect(
        fed, q, val_obs, test_obs, epsilons, seed=seed, options=options, extra=served_setting(served),
    )
    estimates = federation_estimates(
        val_c, test_c, val_truths=val_truth, val_concepts=assessed(q, val_obs), test_concepts=assessed(q, test_obs),
        entity_names=list(fed.entities), epsilons=epsilons, method=result.method,
    )
    for setting in served_setting(served):
        estimates += single_estimates(val_c, test_c, entity_names=list(fed.entities), setting=setting)
    if served is not None:
        run = await served_estimates(fed.entities, q, validation=ServedValidation(val_obs, served_truth, checks),
                                     test=test_obs, config=served, seed=seed, concurrency=options.concurrency)
        estimates += run.estimates
        result.served["calibrations"] = run.calibrations
    if served_via is not None:  # the same students, diagnosed through a running gateway after an upload
        estimates.append(await served_via(HeldoutStudents(
            qmatrix=q, history=[*split.train, *split.validation], validation=val_obs, test=test_obs)))
    scorer = HeldoutScorer(q, train_easiness(split.train), val_held, test_held)
    y = scorer.test_y
    probs: dict[tuple[str, float | None, str], np.ndarray] = {}  # (row, ε, mechanism) -> test P(correct)
    for est in estimates:
        p, filled = scorer.probabilities(est)
        if forecasts is not None and est.name in FORECAST_ROWS:  # scored as served; the link beside it
            result.rows.append(_row(est.name + LINK_SUFFIX, est.epsilon, p, y, mechanism=est.mechanism, filled=filled))
            p, filled = forecasts.probabilities(est), 0
        probs[(est.name, est.epsilon, est.mechanism)] = p
        result.rows.append(_row(est.name, est.epsilon, p, y, mechanism=est.mechanism, filled=filled))
        if est.name.startswith("single:") and est.epsilon is None:
            result.reliability[est.name.removeprefix("single:")] = list(zip(p.tolist(), y.tolist()))
    if forecasts is not None:
        bases = ", ".join(f"{n} {b}" for b, n in sorted(forecasts.basis_counts().items()))
        result.notes.append(
            f"`served` and `single:local-fed` are scored by the item forecasts the API returns (forecast_items: the "
            f"diagnosis through {forecasts.irf.model}'s item parameters; held-out responses by item basis: {bases}); "
            f"the same rows through the concept-mastery link are `<row>{LINK_SUFFIX}`"
        )
    probs[("item-difficulty", None, "none")] = scorer.item_only()
    result.rows.append(_row("item-difficulty", None, probs[("item-difficulty", None, "none")], y))
    for name, model in baselines(split.train, q, ncdm).items():
        if name == "proportion-correct":  # no item model of its own: the same item-easiness link as the federation
            linked = Estimates(name=name, epsilon=None, validation=baseline_mastery(model, val_obs, q),
                               test=baseline_mastery(model, test_obs, q))
            probs[(name, None, "none")], filled = scorer.probabilities(linked)
            result.rows.append(_row(name, None, probs[(name, None, "none")], y, filled=filled))
            continue
        probs[(name, None, "none")] = _baseline_probs(model, test_obs, test_held, q)
        result.rows.append(_row(name, None, probs[(name, None, "none")], y))
        if name == "ncdm":
            result.baselines["ncdm"] = model.describe()  # type: ignore[attr-defined]
    result.significance = [d.to_json() for d in _significance(probs, y, scorer.owner, seed)]
    counts = sorted({r.filled for r in result.rows if r.filled})
    if counts:
        result.notes.append(
            "uncovered concepts (a hidden item's concept the row did not diagnose for that student) count at the row's "
            f"validation mean; values filled per federation row: {', '.join(map(str, counts))} (column 'filled')"
        )
    result.notes.append(
        "heldout protocol: link P(correct) = sigmoid(a·mean mastery of the item's concepts + c·item easiness + b), "
        "a ≥ 0 and c ≥ 0, fitted on validation (easiness: logit of the item's smoothed train proportion correct); "
        "every row scores the same held-out responses; partial credit y counts as y correct and 1 − y wrong"
    )


def _significance(probs: Mapping[tuple[str, float | None, str], np.ndarray], y: np.ndarray, owner: np.ndarray,
                  seed: int) -> list[PairedDifference]:
    """``served`` at each noise level against every baseline, and against ``single:local-fed`` at the same noise;
    ``single:local-fed`` without noise against every baseline; the row served through the API against ``served``
    at the same noise."""
    out = []
    for (name, eps, mechanism), p in probs.items():
        if name == "single:local-fed" and eps is None:
            compared: Sequence[str] = [b for b in COMPARED_WITH if not b.startswith("single:")]
        elif name == "served":
            compared = COMPARED_WITH
        elif name == VIA_API_ROW:
            compared = ("served",)
        else:
            continue
        for baseline in compared:
            same_noise = baseline.startswith("single:") or baseline == "served"
            q = probs.get((baseline, eps, mechanism) if same_noise else (baseline, None, "none"))
            if q is None:
                continue
            diff, low, high = paired_bootstrap_auc(p, q, y, owner, seed=seed)
            out.append(PairedDifference(row=name, epsilon=eps, baseline=baseline, diff=diff, low=low, high=high,
                                        resamples=BOOTSTRAP_RESAMPLES))
    return out
