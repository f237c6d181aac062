"""The privacy frontier: utility against ε for every mechanism, with and without Bayes post-processing.

For each dataset the students are split train / validation / test (seeded, as every protocol).
The entities answer each student's prompt once (``collect_predictions`` caches beneath the privacy
wrapper); that answer is privatized afresh for every (mechanism, ε) setting, ε = ∞ included, and
``repeats`` times per setting (independent noise draws, averaged; standard errors still count a
student once). Two protocols:

* **paper protocol** — the entities see all of a student's responses; the truth is the
  proportion correct per concept of those responses; **MAE** on test students.
* **held-out protocol** — 20 % of each student's responses are hidden (seeded, exactly as
  :mod:`evaluation.protocols`); the diagnosis of the rest predicts them through the
  logistic link fitted on validation students; **AUC** on test students.
* **SIMULATED data** additionally scores the paper-protocol estimates against the *true*
  (simulated) mastery (``true_mae``), next to the oracle (posterior under the true DINA
  parameters) when the data come from :func:`evaluation.simulation.simulate`.

Every (mechanism, ε) setting is aggregated three ways (``postprocessing``):

* ``mean`` — the plain mean of the entities' privatized reports, clipped to [0, 1] at the end
  (the paper's ``fed-dp-norc``). The Laplace and Gaussian mechanisms clip each report already;
  the bounded mechanisms (duchi / piecewise / hybrid) release unbiased values outside [0, 1], so
  only the final mean is clipped.
* ``posterior`` — Bayes post-processing (:mod:`diagnosis.posterior`): the posterior mean under
  each mechanism's exact likelihood (bounded reports modelled as released, unclipped), with a
  Beta prior per concept and each entity's error sd τ fitted on the validation students' *clean*
  answers (the ε = ∞ collection) against their truth — the ``posterior`` calibration the API
  serves (τ floored at :attr:`PosteriorCalibrator.min_sd <calibration.calibrators.PosteriorCalibrator>`).
* ``posterior-uniform`` — the same likelihood and τ under a uniform Beta(1, 1) prior: what the
  reports alone say, without the prior's shrinkage toward the validation mean.

References (information limits): the **constant predictor** (every test student gets the
per-concept validation mean of the truth), the **fitted prior's mean** (the posterior's own ε → 0
limit), the **noiseless federation** (the three aggregations at ε = ∞) and, for DINA-simulated
data, the **oracle**.

:func:`postprocessing_verdicts` says, per setting, whether the posterior beats the plain mean (paired
standard errors); :func:`recommend_default` picks the default (mechanism, ε) by a stated rule.

Post-processing uses only the released reports and public mechanism parameters (plus a
calibration fitted on other students), so it costs no privacy.

Public API: :func:`privacy_frontier` (what to sweep: :class:`FrontierSettings`), :func:`write_frontier_report`,
:func:`frontier_datasets` (:class:`FrontierDatasets`), :func:`run_privacy_frontier` (all three in one call, for the
CLI), :func:`postprocessing_verdicts`, :func:`recommend_default`.
"""

from __future__ import annotations

from evaluation.frontier.api import frontier_command as frontier_command  # the CLI imports it
from evaluation.frontier.api import FrontierDatasets, frontier_datasets, progress_total, run_privacy_frontier
from evaluation.frontier.compute import FrontierSettings, privacy_frontier
from evaluation.frontier.estimators import posterior_means as posterior_means  # the tests import it
from evaluation.frontier.recommend import (
    Recommendation,
    best_mechanisms,
    postprocessing_verdicts,
    recommend_default,
)
from evaluation.frontier.report import write_frontier_report
from evaluation.frontier.results import (
    DEFAULT_EPSILONS,
    POSTPROCESSING,
    DatasetFrontier,
    FrontierPoint,
    FrontierResult,
)

__all__ = [
    "DEFAULT_EPSILONS",
    "POSTPROCESSING",
    "DatasetFrontier",
    "FrontierDatasets",
    "FrontierPoint",
    "FrontierSettings",
    "FrontierResult",
    "Recommendation",
    "frontier_datasets",
    "postprocessing_verdicts",
    "privacy_frontier",
    "best_mechanisms",
    "progress_total",
    "recommend_default",
    "run_privacy_frontier",
    "write_frontier_report",
]
