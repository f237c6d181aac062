"""The DP guard: a released stack is served only where it beats the plain mean on the validation students, decided
by a noisy comparison, so a cohort too small for its noise gets the plain mean — never worse than no calibration.

**The candidates.** The released stack (:mod:`calibration.release_stack`; public once released) and the plain mean:
the aggregator of an uncalibrated diagnosis (every answer counted equally, no correction), over the entities the
calibration kept. Served as a stacking record with no weights, which ``diagnosis.stacked_aggregate`` reads as the
plain mean.

**The statistic.** Per validation student, its gain g = mean over its predicted concepts of
|stack − truth| − |plain mean − truth| (the absolute error the calibration's MAE reports), clipped to
[−``GAIN_CLIP``, ``GAIN_CLIP``] (0 for a student with no concept both predict). Replace-one neighbours change one
student's g by at most 2C: the sum G = Σ g has L1 sensitivity 2·``GAIN_CLIP`` and is released with Laplace noise of
scale 2C/ε_guard. The stack is served only when the noisy G < −``MARGIN`` noise scales; otherwise the plain mean.
Post-processing of one Laplace release: for two candidates this is report-noisy-min on their difference. The
residuals are in-sample under the released stack (as for its error, :mod:`calibration.release_error`): its few
weights, fitted under DP noise to hundreds of students, learn little of any one.

**The constants**, argued from the noise:

* ``GAIN_CLIP`` C = 0.05: |g| is at most the mean distance between the two candidates' answers, so the clip binds
  only for students the stack moves by more than a twentieth of the mastery scale on average. Below that G is exact;
  above, every student still counts with its sign. The noise scale is 2C/ε, so a larger C buys the few large moves
  at the price of noise on every decision: a stack that moves students by s ≤ C and improves a fraction f of that
  (G ≈ n·f·s) is detected once n·f·s > MARGIN·2C/ε_guard, so C at the size of a useful move keeps the cohort needed
  near its floor of 2·MARGIN/(ε_guard·f) students.
* ``MARGIN`` 3 noise scales: a stack no better than the plain mean is served with probability at most e⁻³/2 < 2.5 %
  (Laplace tail), while at C = 0.05 and ε_guard = 0.4 (ε = 4) the stack needs a total gain of only
  3·0.1/0.4 = 0.75 — a mean MAE gain of 0.0025 per student at n = 300.
* ``GUARD_SHARE`` 0.1 of ε: the statistic is one number of sensitivity 0.1, against the stack's 14 of sensitivity
  7 (three entities); 0.1 of ε already puts its noise far below any gain worth serving (above), and the stack's
  noise grows by only 1/0.7 against 1/0.8 without the guard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from calibration.validation import ValidationSet
from diagnosis import Aggregator

__all__ = ["GAIN_CLIP", "GUARD_SHARE", "MARGIN", "GuardDecision", "guard", "student_gains"]

GAIN_CLIP = 0.05
MARGIN = 3.0
GUARD_SHARE = 0.1


def student_gains(stack: Aggregator, plain: Aggregator, data: ValidationSet) -> np.ndarray:
    """Per validation student, the clipped mean of |stack − truth| − |plain − truth| over the concepts both predict."""
    gains = np.zeros(len(data))
    for i, (answers, truth, mechanism) in enumerate(zip(data.answers, data.truths, data.mechanisms)):
        ours = stack.aggregate(answers, list(truth), mechanism=mechanism).mastery
        mean = plain.aggregate(answers, list(truth), mechanism=mechanism).mastery
        shared = [c for c in truth if c in ours and c in mean]
        if shared:
            gains[i] = np.mean([abs(ours[c] - truth[c]) - abs(mean[c] - truth[c]) for c in shared])
    return np.clip(gains, -GAIN_CLIP, GAIN_CLIP)


@dataclass(frozen=True)
class GuardDecision:
    """What the guard publishes: the choice, the noisy mean change per student (stack − plain mean, clipped MAE;
    negative: the stack is better) and the ε it spent."""

    stack_served: bool
    noisy_change: float
    epsilon: float
    scale: float

    def to_json(self) -> dict[str, Any]:
        return {"served": "stack" if self.stack_served else "plain mean", "epsilon": self.epsilon,
                "mechanism": "laplace", "sensitivity": 2 * GAIN_CLIP, "gain_clip": GAIN_CLIP, "margin": MARGIN,
                "noisy_mean_change": self.noisy_change,
                "statistic": "sum over students of the clipped mean |stack - truth| - |plain mean - truth|"}

    def note(self) -> str:
        head = (f"DP guard (ε = {self.epsilon:g}, Laplace, sensitivity {2 * GAIN_CLIP:g}, per-student MAE changes "
                f"clipped at ±{GAIN_CLIP:g}): the noisy mean MAE change from the plain mean to the stack is "
                f"{self.noisy_change:+.4f} per student; the stack is served only if the noisy sum is below "
                f"−{MARGIN:g} noise scales (−{MARGIN * self.scale:.3g})")
        if self.stack_served:
            return f"{head}: it is, the released stack is served"
        return (f"{head}: it is not, the PLAIN MEAN is served (no weights, no intercept, over the kept entities, as an "
                "uncalibrated diagnosis aggregates): this cohort is too small for the stack's noise, or the stack does not beat the plain "
                "mean")


def guard(stack: Aggregator, plain: Aggregator, data: ValidationSet, *, epsilon: float,
          rng: np.random.Generator) -> GuardDecision:
    """Serve ``stack`` or ``plain`` (module docstring), with ``epsilon``-DP over ``data``'s students."""
    scale = 2 * GAIN_CLIP / epsilon
    noisy = float(student_gains(stack, plain, data).sum() + rng.laplace(0.0, scale))
    return GuardDecision(stack_served=noisy < -MARGIN * scale, noisy_change=noisy / max(len(data), 1),
                         epsilon=epsilon, scale=scale)
