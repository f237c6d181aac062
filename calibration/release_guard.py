"""The DP guard: which calibration a DP release serves — the released stack, one member alone, or the plain mean —
chosen on the validation students with differential privacy, so a cohort too small for the stack's noise, or a stack
that the noise pulled toward its weaker members, never serves worse than what the data support.

**The candidates.** The plain mean: the aggregator of an uncalibrated diagnosis (every answer counted equally, no
correction) over the entities the calibration kept, served as a stacking record with no weights. The released stack
(:mod:`calibration.release_stack`; public once released). And, with two or more entities, each member alone
(``single:<entity>``): its answer as it comes (no scale fitted: that would cost ε of its own), the plain mean of
the others where it did not answer. A member alone is public too (it is a function of nothing but its name). Why
the members: the released stack is ridged toward the plain mean by its noise (:mod:`calibration.release_stack`),
so on a few hundred students its weights stay near equal; where one member is much better than the rest, the
equal-weight pull lost to that member alone (ASSIST0910, 476 validation students: the served diagnosis scored
below ``single:local-fed`` on held-out responses, docs/results/dp-calibration). The non-DP fit makes the same
comparison by cross-validation (:mod:`calibration.selection`).

**The statistic.** Per validation student and candidate c, its gain g_c over the baseline (below), clipped. Where
the validation students' responses were split (``ValidationSet.checks``: the entities answered one part,
:mod:`calibration.held_out`), g_c is the Brier score of c's item forecasts minus the baseline's, summed over the
student's held-out responses and clipped to [−``FORECAST_CLIP``, ``FORECAST_CLIP``] (0 for a student with none kept
back): the candidates are compared on what the service is judged by, forecasts of responses nobody saw, each
response weighing as it does in the held-out scores (pooled over responses), up to the clip. Otherwise g_c = the
mean over its predicted concepts of |c − truth| − |baseline − truth| (the absolute error the calibration's MAE
reports; 0 for a student with no concept both predict), clipped to [−``GAIN_CLIP``, ``GAIN_CLIP``]. Why forecasts
first: the concept truth can prefer a blend that forecasts unseen responses worse (FrcSub seed 1: the concept error
chose ``sim:conservative`` alone, whose served AUC was 0.016 below the plain mean the forecasts keep;
docs/results/dp-calibration). Either way replace-one neighbours change one student's g_c by at most Δ = twice the
clip, so each candidate's utility u_c = −Σ g_c has sensitivity Δ.

**The baseline.** The gains are measured from the released stack (a DP release always has one; it is public: a
function of the noisy statistics and of which entities answered, which is released outside ε as the record's
``params.excluded`` is), not from the plain mean: g_c compares c with the stack, the stack's own utility is 0, and
the plain mean's is minus its clipped summed gain over the stack, plus the margin below. Without the clip the choice
is the same from any baseline (the exponential mechanism is shift-invariant: every utility moves by the same sum).
With it, measuring from far away levels the good candidates: where two candidates are both far ahead of the plain
mean on many students, both reach the clip there and their sums tie whatever their difference (ASSIST0910 seed 0:
measured from the plain mean the guard served the stack, 0.012 AUC below ``local-fed`` alone on the test students;
measured from the stack it served ``local-fed`` alone, docs/results/dp-calibration). Measuring from the stack, a
blend of the members, is a heuristic: where the good candidates are near it their differences from it are small and
the clip binds less (tests/calibration/test_held_out.py has a SIMULATED case).

**The choice** is the exponential mechanism (McSherry & Talwar 2007): c is served with probability ∝
exp(ε_guard·u_c / (2Δ)), which is ε_guard-DP whatever the number of candidates; only the choice is published. The
plain mean's utility gets (``MARGIN`` + ln k)·2Δ/ε_guard added for k other candidates: where none of them beats it
(every u_c at most the plain mean's own, before the margin) one of them is served with probability at most
1/(1 + e^MARGIN) < 5 %, together. "Beats" is read on the clipped sums from the baseline. The clip is monotone and
shrinks no difference's sign, so that is the raw comparison wherever no student's gain reaches the clip for c or the
plain mean (or no student prefers c to the plain mean at all); where the clip binds for students on whom the
baseline is far worse than both, a candidate can outscore the plain mean while forecasting a little worse in all.
The residuals are in-sample under the released stack (as for its error, :mod:`calibration.release_error`): its
few weights, fitted under DP noise to hundreds of students, learn little of any one.

**The constants**, argued from the noise:

* ``GAIN_CLIP`` C = 0.05 (concept error): |g_c| is at most the mean distance between the two candidates' answers,
  so the clip binds only for students a candidate moves by more than a twentieth of the mastery scale on average.
  Below that the sum is exact; above, every student still counts with its sign. The mechanism's temperature is
  2Δ/ε = 4C/ε, so a larger C buys the few large moves at the price of randomness on every decision; at C the size of
  a useful move, a candidate improving a fraction f of the students by s ≤ C is chosen once n·f·s exceeds about
  (MARGIN + ln k)·4C/ε_guard.
* ``FORECAST_CLIP`` 0.5 (held-out forecasts): one response's Brier difference is (p − p')(p + p' − 2y), at most
  2|p − p'|; between candidates whose forecasts differ by 0.05 a student's sum reaches 0.5 only past about five
  responses all moved the same way, so the clip binds on the few students with many held-out responses that a
  candidate serves much better or worse, and those still count fully up to it. The price is a temperature ten
  times the concept error's: a candidate is preferred once its summed gain passes (MARGIN + ln k)·2/ε_guard (about
  23 at ε_guard = 0.4 and k = 5), about 0.002 per held-out response on 10,000 of them, which a cohort of 100
  students with four held-out responses each does not reach (it keeps the plain mean).
* ``MARGIN`` 3: a candidate no better than the plain mean is served rarely (above), while at C = 0.05, ε_guard = 0.4
  (ε = 4) and k = 4 candidates one is preferred to the plain mean once its total gain passes (3 + ln 4)·0.5 ≈ 2.2 —
  a mean MAE gain of 0.007 per student at n = 300.
* ``GUARD_SHARE`` 0.1 of ε: the choice reads sums of sensitivity 0.1 (1 on held-out forecasts), against the
  stack's statistics of sensitivity 7 (three entities); 0.1 of ε already makes a gain worth serving decisive
  (above), and the stack's noise grows by only 1/0.7 against 1/0.8 without the guard.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibration.held_out import check_forecast
from calibration.validation import ValidationSet
from diagnosis import Aggregator

__all__ = ["CONCEPT_ERROR", "FORECAST_CLIP", "GAIN_CLIP", "GUARD_SHARE", "HELD_OUT_FORECASTS", "MARGIN", "PLAIN_MEAN",
           "GuardDecision", "choice_probabilities", "gain_clip", "guard", "guard_statistic", "student_gains"]

GAIN_CLIP = 0.05
FORECAST_CLIP = 0.5
MARGIN = 3.0
GUARD_SHARE = 0.1
PLAIN_MEAN = "plain mean"
HELD_OUT_FORECASTS = "held-out forecasts"  # the statistic: Brier score of forecasts of kept-back responses
CONCEPT_ERROR = "concept error"  # the statistic: absolute error against the concept truth


def guard_statistic(data: ValidationSet) -> str:
    """What the guard compares candidates on for ``data``: held-out forecasts where the students' responses were split
    (decided by how the cohort was prepared, not by its data: a student whose responses left nothing to keep back
    counts 0, so replacing one never changes the statistic or its sensitivity)."""
    return HELD_OUT_FORECASTS if data.checks is not None else CONCEPT_ERROR


def gain_clip(statistic: str) -> float:
    """The bound on one student's gain under ``statistic`` (module docstring): the sensitivity is twice it."""
    return FORECAST_CLIP if statistic == HELD_OUT_FORECASTS else GAIN_CLIP


def _diagnoses(aggregator: Aggregator, data: ValidationSet) -> list[dict[str, float]]:
    """Per validation student, the mastery ``aggregator`` serves from its answers (over its truth's concepts)."""
    return [aggregator.aggregate(answers, list(truth), mechanism=mechanism).mastery
            for answers, truth, mechanism in zip(data.answers, data.truths, data.mechanisms)]


def _gains(ours: Sequence[Mapping[str, float]], theirs: Sequence[Mapping[str, float]], data: ValidationSet
           ) -> np.ndarray:
    """:func:`student_gains` of diagnoses already made (the baseline's once for every candidate)."""
    statistic = guard_statistic(data)
    gains = np.zeros(len(data))
    for i, (mine, base, truth) in enumerate(zip(ours, theirs, data.truths)):
        if statistic == HELD_OUT_FORECASTS:
            checks = data.checks[i]  # type: ignore[index]
            if checks:
                gains[i] = sum((check_forecast(c, mine) - c.score) ** 2 - (check_forecast(c, base) - c.score) ** 2
                               for c in checks)
            continue
        shared = [c for c in truth if c in mine and c in base]
        if shared:
            gains[i] = np.mean([abs(mine[c] - truth[c]) - abs(base[c] - truth[c]) for c in shared])
    clip = gain_clip(statistic)
    return np.clip(gains, -clip, clip)


def student_gains(candidate: Aggregator, reference: Aggregator, data: ValidationSet) -> np.ndarray:
    """Per validation student, the clipped gain of ``candidate`` over ``reference`` (the baseline; module
    docstring): the summed Brier score difference of their forecasts of the student's held-out responses, clipped at
    :data:`FORECAST_CLIP`, or where none were kept back the mean of |candidate − truth| − |reference − truth| over
    the concepts both predict, clipped at :data:`GAIN_CLIP`."""
    return _gains(_diagnoses(candidate, data), _diagnoses(reference, data), data)


def choice_probabilities(total_gains: Mapping[str, float], *, epsilon: float, clip: float, plain_gain: float = 0.0
                         ) -> dict[str, float]:
    """The exponential mechanism's probability of serving each candidate (and :data:`PLAIN_MEAN`), from each
    candidate's summed clipped gains over the baseline (negative: better; the baseline's own is 0) and the plain
    mean's, ``plain_gain`` (0 where the plain mean is the baseline). Module docstring."""
    temperature = 2 * (2 * clip) / epsilon
    names = list(total_gains)
    plain = MARGIN + math.log(max(len(names), 1)) - plain_gain / temperature
    scores = np.array([plain, *(-np.array([total_gains[n] for n in names]) / temperature)])
    weights = np.exp(scores - scores.max())
    return dict(zip([PLAIN_MEAN, *names], (weights / weights.sum()).tolist()))


@dataclass(frozen=True)
class GuardDecision:
    """What the guard publishes: the candidate served (:data:`PLAIN_MEAN`, ``stack`` or ``single:<entity>``), the
    candidates it chose among, and the ε it spent. No statistic of the students: only the choice is released."""

    served: str
    candidates: tuple[str, ...]
    epsilon: float
    statistic: str = CONCEPT_ERROR
    baseline: str = PLAIN_MEAN  # the candidate every gain is measured from

    @property
    def plain_served(self) -> bool:
        return self.served == PLAIN_MEAN

    def to_json(self) -> dict[str, Any]:
        clip = gain_clip(self.statistic)
        return {"served": self.served, "candidates": [PLAIN_MEAN, *self.candidates], "epsilon": self.epsilon,
                "mechanism": "exponential", "sensitivity": 2 * clip, "gain_clip": clip, "margin": MARGIN,
                "statistic": self.statistic, "baseline": self.baseline,
                "utility": f"minus the sum over students of the clipped {self._gain()}, each measured from the "
                           "baseline; the plain mean's gets (margin + ln k) * 2 * sensitivity / epsilon added"}

    def _gain(self) -> str:
        if self.statistic == HELD_OUT_FORECASTS:
            return ("Brier score of the candidate's item forecasts minus the baseline's, summed over the "
                    "student's held-out responses")
        return "mean |candidate - truth| - |baseline - truth| over the student's concepts"

    def note(self) -> str:
        forecasts = self.statistic == HELD_OUT_FORECASTS
        change = "summed Brier score changes of held-out forecasts" if forecasts else "MAE changes"
        head = (f"DP guard (ε = {self.epsilon:g}, the exponential mechanism over {', '.join([PLAIN_MEAN, *self.candidates])}; "
                f"per-student {change} from the {self.baseline} clipped at ±{gain_clip(self.statistic):g}, a margin of "
                f"{MARGIN:g} for "
                "the plain mean)")
        if self.plain_served:
            return (f"{head}: the PLAIN MEAN is served (no weights, no intercept, over the kept entities, as an "
                    "uncalibrated diagnosis aggregates): this cohort is too small for the noise, or no candidate beats "
                    "the plain mean")
        if self.served.startswith("single:"):
            member = self.served.removeprefix("single:")
            return (f"{head}: {member} ALONE is served (its answers as they come; the plain mean of the others where "
                    f"it did not answer)")
        return f"{head}: the released {self.served} is served"


def guard(candidates: Mapping[str, Aggregator], plain: Aggregator, data: ValidationSet, *, epsilon: float,
          rng: np.random.Generator, baseline: str | None = None) -> GuardDecision:
    """Serve one of ``candidates`` or ``plain`` (module docstring), with ``epsilon``-DP over ``data``'s students;
    every gain measured from the candidate named ``baseline`` (None or :data:`PLAIN_MEAN`: from the plain mean)."""
    if baseline == PLAIN_MEAN:
        baseline = None
    if baseline is not None and baseline not in candidates:
        raise ValueError(f"the guard's baseline {baseline!r} is not among its candidates: {', '.join(candidates)}")
    reference = _diagnoses(plain if baseline is None else candidates[baseline], data)  # once, for every candidate
    totals = {name: 0.0 if name == baseline else float(_gains(_diagnoses(candidate, data), reference, data).sum())
              for name, candidate in candidates.items()}
    plain_gain = 0.0 if baseline is None else float(_gains(_diagnoses(plain, data), reference, data).sum())
    statistic = guard_statistic(data)
    probabilities = choice_probabilities(totals, epsilon=epsilon, clip=gain_clip(statistic), plain_gain=plain_gain)
    names = list(probabilities)
    served = names[int(rng.choice(len(names), p=np.array(list(probabilities.values()))))]
    return GuardDecision(served=served, candidates=tuple(candidates), epsilon=epsilon, statistic=statistic,
                         baseline=baseline or PLAIN_MEAN)
