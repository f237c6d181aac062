"""The federation's rows of an evaluation table, built from collected predictions.

Names are fixed (they are the paper's ablation, plus our own):

* ``single:<entity>`` — one entity's privatized answer, uncalibrated, at each ε (Laplace), and at
  the served noise when the ``served`` rows are measured;
* ``simple-ensemble`` — the plain mean, no noise, no residual correction (RC);
* ``fed-nodp-rc`` — no noise, calibrated on the validation split;
* ``fed-dp-norc`` — Laplace noise at ε, plain mean;
* ``gaussian-dp`` — analytic Gaussian noise at (ε, δ), calibrated at that noise;
* ``full`` — Laplace noise at ε, calibrated at that noise (the paper's full method).

"Calibrated" uses the calibrator named by ``method`` (``bias`` by default: the paper's own
residuals are a no-op), always fitted on validation students and applied to test students.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from diagnosis.aggregation import residual_aggregate
from calibration import ValidationSet, make_calibrator
from evaluation.collect import Collected, NoiseSetting

__all__ = ["Estimates", "federation_estimates", "single_estimates"]

Mastery = dict[str, float]


@dataclass
class Estimates:
    """One row's mastery estimates for the validation and the test students (input order)."""

    name: str
    epsilon: float | None
    validation: list[Mastery]
    test: list[Mastery]
    mechanism: str = "none"
    # the served rows' credible intervals per test student and their level (None: point estimates only)
    test_intervals: list[dict[str, tuple[float, float]]] | None = None
    interval_level: float | None = None
    # whether forecasts average over those intervals (a posterior's), or read the point (a stack's measured ones)
    forecast_averages: bool = True


def _plain(preds: Sequence[dict[str, dict[str, float]]], concepts: Sequence[Sequence[str]]) -> list[Mastery]:
    return [residual_aggregate(p, c, alpha=0.0).mastery for p, c in zip(preds, concepts)]


def single_estimates(val: Collected, test: Collected, *, entity_names: Sequence[str], setting: NoiseSetting) -> list[Estimates]:
    """``single:<entity>``: each entity's own answer privatized at ``setting``, uncalibrated."""
    return [
        Estimates(
            name=f"single:{entity}",
            epsilon=setting.epsilon,
            validation=[dict(p.get(entity, {})) for p in val.predictions[setting]],
            test=[dict(p.get(entity, {})) for p in test.predictions[setting]],
            mechanism=setting.mechanism if setting.epsilon is not None else "none",
        )
        for entity in entity_names
    ]


def federation_estimates(
    val: Collected,
    test: Collected,
    *,
    val_truths: Sequence[Mastery],
    val_concepts: Sequence[Sequence[str]],
    test_concepts: Sequence[Sequence[str]],
    entity_names: Sequence[str],
    epsilons: Sequence[float],
    method: str = "bias",
) -> list[Estimates]:
    out: list[Estimates] = []

    def calibrated(setting: NoiseSetting, name: str) -> Estimates:
        data = ValidationSet(answers=val.predictions[setting], truths=val_truths, clean=val.predictions[clean],
                             mechanisms=val.mechanisms[setting])
        fitted = make_calibrator(method).fit(data)
        return Estimates(
            name=name,
            epsilon=setting.epsilon,
            validation=[fitted.predict(p, c, mechanism=m) for p, c, m in zip(val.predictions[setting], val_concepts, val.mechanisms[setting])],
            test=[fitted.predict(p, c, mechanism=m) for p, c, m in zip(test.predictions[setting], test_concepts, test.mechanisms[setting])],
            mechanism=setting.mechanism if setting.epsilon is not None else "none",
        )

    clean = NoiseSetting("laplace", None)
    for eps in [None, *epsilons]:
        out += single_estimates(val, test, entity_names=entity_names, setting=NoiseSetting("laplace", eps))
    out.append(
        Estimates(
            name="simple-ensemble",
            epsilon=None,
            validation=_plain(val.predictions[clean], val_concepts),
            test=_plain(test.predictions[clean], test_concepts),
        )
    )
    out.append(calibrated(clean, "fed-nodp-rc"))
    for eps in epsilons:
        laplace = NoiseSetting("laplace", eps)
        out.append(
            Estimates(
                name="fed-dp-norc",
                epsilon=eps,
                validation=_plain(val.predictions[laplace], val_concepts),
                test=_plain(test.predictions[laplace], test_concepts),
                mechanism="laplace",
            )
        )
        out.append(calibrated(NoiseSetting("gaussian", eps), "gaussian-dp"))
        out.append(calibrated(laplace, "full"))
    return out
