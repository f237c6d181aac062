"""Stacking: per concept y ≈ b + Σ_j w_j ŷ_j with w ≥ 0, fitted on the validation students' answers
at the noise diagnoses will use, so a strong entity keeps its weight and weak ones get little.

Rows are (student, concept) pairs where every entity answered. A concept with at least
``min_students`` rows gets its own weights; the rest use weights pooled over all concepts' rows
(one fit for the whole Q-matrix, so a concept seen by few validation students is not left to the
plain mean, which would drag a strong member down to the weak ones). With ``isotonic`` each
entity's answers are first mapped through a monotone curve fitted per concept.

With ``select`` (the default) the fitted stack must earn its place: by cross-validation over the validation
students it is compared with each member fitted alone, and kept only if it beats the best of them by more than
one standard error; otherwise that member is served alone (:mod:`calibration.selection`).

The served candidate's error is measured on the same held-out predictions (:mod:`calibration.measured`): the
intervals its diagnoses serve.

A DP release (``release_epsilon`` = ε) is made in three parts, by basic composition (:func:`split_epsilon
<calibration.release_error.split_epsilon>`): one stack pooled over all concepts from per-student sufficient
statistics (:mod:`calibration.release_stack`), a DP guard that serves it, one member alone or the plain mean,
whichever is best on the validation students (:mod:`calibration.release_guard`), and the served candidate's error (:mod:`calibration.release_error`). The record
states each part's ε (``params.release``, metrics ``release_epsilon_*``, a note).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression, nnls

from calibration.calibrators import DEFAULT_FOLDS, Calibrator, FittedCalibration, Released
from calibration.measured import measured_error
from calibration.params import CalibrationParams, StackingParams
from calibration.release_error import release_measured_error, split_epsilon
from calibration.release_guard import guard
from calibration.release_stack import release_stack
from calibration.selection import STACK, Selection, choose, cross_validated_losses, held_out_predictions
from calibration.validation import Predictions, Truth, ValidationSet, stacking_rows
from diagnosis import Aggregator
from diagnosis.aggregation import NEGLIGIBLE_WEIGHT
from diagnosis.aggregation import apply_isotonic

SINGLE = "single:"  # a candidate that serves one member alone: "single:<entity>"

__all__ = ["StackingCalibrator"]


class StackingCalibrator(Calibrator):
    """See the module docstring. ``ridge`` ≥ 0 shrinks the weights (NNLS on centred data)."""

    method = "stacking"
    scores_held_out = True  # the DP guard (calibration.release_guard)

    def __init__(
        self, *, ridge: float = 0.0, min_students: int = 20, isotonic: bool = False, select: bool = True,
        folds: int = DEFAULT_FOLDS,
    ) -> None:
        if ridge < 0:
            raise ValueError("ridge must be >= 0")
        if min_students < 2:
            raise ValueError("min_students must be >= 2")
        if folds < 2:
            raise ValueError("folds must be >= 2")
        self.ridge, self.min_students, self.isotonic = ridge, min_students, isotonic
        self.select, self.folds = select, folds

    def fit(self, data: ValidationSet, *, release_epsilon: float | None = None, **options: Any) -> FittedCalibration:
        """As :meth:`Calibrator.fit`; a DP release re-derives one pooled stack from noisy statistics and serves it
        only where a DP guard finds it beats the plain mean, so no selection is made then (its cross-validated scores
        are statistics of the students that are not privatized), and the served candidate's error is released with
        DP too (module docstring: ε split between the three)."""
        if release_epsilon is not None and self.select:
            plain = StackingCalibrator(ridge=self.ridge, min_students=self.min_students, isotonic=self.isotonic,
                                       select=False, folds=self.folds)
            return plain.fit(data, release_epsilon=release_epsilon, **options)
        fitted = super().fit(data, release_epsilon=release_epsilon, **options)
        # The choice also as metrics (flat numbers: what reports and the job's result show of every record).
        selection = getattr(fitted.params, "selection", {})
        for name, score in selection.get("scores", {}).items():
            fitted.metrics[f"selection_cv_mse:{name}"] = score
        if selection and release_epsilon is None:  # a DP release's choice is the guard's (its own metrics)
            fitted.metrics["selection_stack_kept"] = float(selection["chosen"] == STACK)
        kept = data.without(fitted.params.excluded)
        if release_epsilon is not None:
            rng = options.get("rng")
            rng = rng if rng is not None else np.random.default_rng()  # as Calibrator.fit, for the stack's release
            return self._released_error(fitted, kept, release_epsilon, rng)
        if selection:  # measured in _fit, on the held-out predictions the choice was made on
            return fitted
        return self._measured(fitted, kept)

    def _measured(self, fitted: FittedCalibration, kept: ValidationSet) -> FittedCalibration:
        """``fitted`` (a stack served without a selection) with its error measured on held-out validation students
        (the intervals its diagnoses serve: :mod:`calibration.measured`), and a note saying what was measured."""
        params = fitted.params
        if not isinstance(params, StackingParams) or len(kept) < 2:
            return fitted
        predicted = held_out_predictions(self._candidates([], []), kept, self.folds)[STACK]
        params, notes = self._with_error(params, predicted, kept, fitted.notes)
        return replace(fitted, params=params, notes=notes)

    def _with_error(self, params: StackingParams, predicted: Sequence[dict[str, float]], data: ValidationSet,
                    notes: list[str]) -> tuple[StackingParams, list[str]]:
        """``params`` with the served candidate's error measured from its held-out ``predicted``, and the note."""
        error, note = measured_error(predicted, data, self.folds, _weighed(params))
        return replace(params, measured_error=error.to_json() if error else {}), [*notes, note]

    def _released_error(self, fitted: FittedCalibration, kept: ValidationSet, epsilon: float,
                        rng: np.random.Generator) -> FittedCalibration:
        """``fitted`` (a DP-released stack or plain mean, from the stack's and the guard's shares of ``epsilon``) with
        its error released with the rest (:mod:`calibration.release_error`); the record states every part."""
        params = fitted.params
        if not isinstance(params, StackingParams):
            return fitted
        stack_epsilon, guard_epsilon, error_epsilon = split_epsilon(epsilon)
        released = release_measured_error(params.aggregator(), kept, _weighed(params), epsilon=error_epsilon, rng=rng)
        split = (f"ε = {epsilon:g} per validation student, split by basic composition: {stack_epsilon:g} on the "
                 f"stack's sufficient statistics, {guard_epsilon:g} on the DP guard, {error_epsilon:g} on its error's")
        metrics = {**fitted.metrics, "release_epsilon_stack": stack_epsilon, "release_epsilon_guard": guard_epsilon,
                   "release_epsilon_measured_error": error_epsilon}
        release = {**params.release, "measured_error": {"epsilon": error_epsilon}}
        return replace(fitted, params=replace(params, measured_error=released.to_json(), release=release),
                       metrics=metrics, notes=[*fitted.notes, split, released.note])

    def _nnls(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        x_mean, y_mean = x.mean(axis=0), y.mean()
        xc, yc = x - x_mean, y - y_mean
        if self.ridge > 0:
            xc = np.vstack([xc, np.sqrt(self.ridge) * np.eye(x.shape[1])])
            yc = np.concatenate([yc, np.zeros(x.shape[1])])
        w, _ = nnls(xc, yc)
        return w, float(y_mean - x_mean @ w)

    def _isotonic_maps(self, predictions: Sequence[Predictions], truths: Sequence[Truth]) -> dict[str, dict[str, list[list[float]]]]:
        pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for preds, truth in zip(predictions, truths):
            for entity, values in preds.items():
                for concept, value in values.items():
                    if concept in truth:
                        pairs.setdefault((entity, concept), []).append((float(value), truth[concept]))
        maps: dict[str, dict[str, list[list[float]]]] = {}
        for (entity, concept), rows in pairs.items():
            if len(rows) < self.min_students:
                continue
            rows.sort()
            x = np.array([r[0] for r in rows])
            y = isotonic_regression(np.array([r[1] for r in rows])).x
            knots_x, index = np.unique(x, return_index=True)  # np.interp needs increasing x
            ends = [*index[1:], len(x)]
            knots_y = [float(np.mean(y[i:j])) for i, j in zip(index, ends)]
            maps.setdefault(entity, {})[concept] = [knots_x.tolist(), knots_y]
        return maps

    def _fit(self, data: ValidationSet) -> tuple[CalibrationParams, list[str]]:
        stack, notes = self._fit_stack(data)
        entities = sorted({e for preds in data.answers for e, values in preds.items() if values})
        if not self.select or len(entities) < 2 or len(data) < 2:
            return stack, notes
        predicted = held_out_predictions(self._candidates(entities, entities), data, self.folds)
        selection = choose(*cross_validated_losses(predicted, data), min(self.folds, len(data)))
        notes.append(selection.note())
        if selection.chosen == STACK:
            chosen = replace(stack, selection=selection.to_json())
        else:
            chosen = self._single(selection.chosen.removeprefix(SINGLE), entities, stack.isotonic, data, selection)
        # the served candidate's error, measured on the held-out predictions the choice was just made on
        return self._with_error(chosen, predicted[selection.chosen], data, notes)

    def _candidates(self, alone: Sequence[str], entities: Sequence[str]) -> Callable[[ValidationSet], dict[str, Aggregator]]:
        """The full stack and each member of ``alone`` on its own (among ``entities``), fitted on a part of the
        validation students."""

        def fit(part: ValidationSet) -> dict[str, Aggregator]:
            stack = self._fit_stack(part)[0]
            out: dict[str, Aggregator] = {STACK: stack.aggregator()}
            for entity in alone:
                out[SINGLE + entity] = self._single(entity, entities, stack.isotonic, part, None).aggregator()
            return out

        return fit

    def _single(
        self, entity: str, entities: Sequence[str], isotonic: dict[str, dict[str, list[list[float]]]],
        data: ValidationSet, selection: Selection | None,
    ) -> StackingParams:
        """``entity`` alone, fitted as the stack is fitted (its scale calibrated per concept), every other entity at
        weight 0; where it did not answer, the stack of the other members (fitted on their own complete rows, so it
        does not lean on the missing one) answers: the ``fallback``."""
        alone = self._fit_stack(data.without([e for e in entities if e != entity]))[0]
        others = self._fit_stack(data.without([entity]))[0]
        zero = dict.fromkeys(entities, 0.0)
        return StackingParams(
            weights={c: {**zero, **w} for c, w in alone.weights.items()}, intercepts=alone.intercepts,
            isotonic=isotonic, pooled_weights={**zero, **alone.pooled_weights} if alone.pooled_weights else {},
            pooled_intercept=alone.pooled_intercept, selection=selection.to_json() if selection else {},
            fallback={"member": entity, "weights": others.weights, "intercepts": others.intercepts,
                      "pooled_weights": others.pooled_weights, "pooled_intercept": others.pooled_intercept},
        )

    def _fit_stack(self, data: ValidationSet) -> tuple[StackingParams, list[str]]:
        predictions = data.answers
        isotonic = self._isotonic_maps(predictions, data.truths) if self.isotonic else {}
        if isotonic:
            predictions = [apply_isotonic(p, isotonic) for p in predictions]
        entities = sorted({e for preds in predictions for e in preds})
        rows = stacking_rows(predictions, data.truths, entities)
        weights: dict[str, dict[str, float]] = {}
        intercepts: dict[str, float] = {}
        pooled: dict[str, float] = {}
        pooled_intercept = 0.0
        notes: list[str] = []
        thin = sorted(c for c, (_, y) in rows.items() if y.size < self.min_students)
        for concept, (x, y) in rows.items():
            if y.size >= self.min_students:
                w, b = self._nnls(x, y)
                weights[concept] = {e: float(wj) for e, wj in zip(entities, w)}
                intercepts[concept] = b
        if rows:
            x_all = np.vstack([x for x, _ in rows.values()])
            y_all = np.concatenate([y for _, y in rows.values()])
            if y_all.size >= 2:
                w, pooled_intercept = self._nnls(x_all, y_all)
                pooled = {e: float(wj) for e, wj in zip(entities, w)}
        if thin:
            notes.append(f"{len(thin)} concept(s) had fewer than {self.min_students} complete validation rows and use "
                         f"the weights pooled over all concepts: {', '.join(thin[:20])}{' …' if len(thin) > 20 else ''}")
        if isotonic:
            notes.append("each entity's answers are mapped through an isotonic curve per concept before weighting")
        return StackingParams(weights=weights, intercepts=intercepts, isotonic=isotonic, pooled_weights=pooled,
                              pooled_intercept=pooled_intercept), notes

    def _release(
        self, params: CalibrationParams, data: ValidationSet, epsilon: float, rng: np.random.Generator
    ) -> Released:
        """One pooled stack released with the stack's share of ε, then the DP guard's choice among it, each member
        alone and the plain mean with the guard's (the error's share is spent in :meth:`_released_error`)."""
        if self.isotonic:
            raise ValueError("isotonic maps have no DP release here: calibrate with release_epsilon \"none\" "
                             "(e.g. on simulated or public validation students) or without isotonic")
        stack_epsilon, guard_epsilon, _ = split_epsilon(epsilon)
        released = release_stack(data.answers, data.truths, epsilon=stack_epsilon, rng=rng)
        candidates = {STACK: StackingParams(pooled_weights=released.weights, pooled_intercept=released.intercept)}
        members = sorted(released.weights)
        if len(members) >= 2:
            candidates.update({SINGLE + member: _alone(member, members) for member in members})
        plain = StackingParams()  # no weights: the plain mean (over the kept entities), as an uncalibrated diagnosis aggregates
        decision = guard({name: c.aggregator() for name, c in candidates.items()}, plain.aggregator(), data,
                         epsilon=guard_epsilon, rng=rng, baseline=STACK)
        release = {"stack": {**released.to_json(), "weights": released.weights, "intercept": released.intercept},
                   "guard": decision.to_json()}
        served = replace(candidates.get(decision.served, plain), release=release)
        # only the guard's choice is published of the validation students (Calibrator.fit withholds the rest)
        return Released(served, notes=[released.note(), decision.note()],
                        metrics={"release_stack_served": float(decision.served == STACK),
                                 "release_single_served": float(decision.served.startswith(SINGLE))})


def _alone(member: str, members: Sequence[str]) -> StackingParams:
    """A DP release's candidate ``single:<member>``: its answers as they come (every other member at weight 0), the
    plain mean of the others where it did not answer; a function of the names only, so it costs no ε."""
    return StackingParams(pooled_weights={**dict.fromkeys(members, 0.0), member: 1.0},
                          selection={"chosen": SINGLE + member, "rule": "the DP guard (calibration.release_guard)"},
                          fallback={"member": member, "weights": {}, "intercepts": {}, "pooled_weights": {},
                                    "pooled_intercept": 0.0})


def _weighed(params: StackingParams) -> list[str]:
    """The entities the served candidate weighs: the member served alone, or every entity with a weight."""
    served = params.selection.get("chosen", STACK)
    if served != STACK:
        return [served.removeprefix(SINGLE)]
    return sorted({e for w in [*params.weights.values(), params.pooled_weights] for e, v in w.items()
                   if v >= NEGLIGIBLE_WEIGHT})
