"""The promotion gate: should a freshly trained model replace the active one?

Two checks, both against the currently active model, on the same inputs:

* **Held-out AUC.** Both models predict the same hidden responses of the candidate's
  held-out students (one seeded mask); the candidate is refused if its AUC is more than
  ``max_auc_drop`` below the active model's.
* **Canary shift.** A fixed set of canary students, SIMULATED from the Q-matrix by DINA
  with a fixed seed, is diagnosed by both models; the candidate is refused if the mean
  absolute change in mastery (over students and concepts) exceeds ``max_canary_shift``.
  This catches a model that scores as well but tells the same students something very
  different (a broken aggregation, a sign flip in a client's update, heavy DP noise).

With no active model, the candidate is accepted. If the active model cannot read the
candidate's Q-matrix (it lacks some of its concepts) nothing can be compared: the
candidate is refused unless ``allow_incomparable``. ``force`` accepts anyway; ``forced`` is
True only when it overrode a refusal, and ``reasons`` then keeps what it overrode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from federated.data import encode_students, hidden_mask
from federated.metrics import evaluate_masked
from federated.model import CDModel
from federated.predict import predict_mastery_batch
from qmatrix import QMatrix, StudentResponses, simulate_dina

__all__ = ["GateDecision", "GatePolicy", "canary_shift", "canary_students", "heldout_auc", "promotion_gate"]


@dataclass(frozen=True, kw_only=True)
class GatePolicy:
    max_auc_drop: float = 0.02
    max_canary_shift: float = 0.15
    canary_count: int = 200
    canary_seed: int = 7919
    eval_mask_frac: float = 0.2
    eval_seed: int = 0
    allow_incomparable: bool = False

    def __post_init__(self) -> None:
        if self.max_auc_drop < 0 or not 0 <= self.max_canary_shift <= 1 or self.canary_count < 1:
            raise ValueError(f"need max_auc_drop >= 0, max_canary_shift in [0, 1], canary_count >= 1: {self}")


@dataclass(frozen=True)
class GateDecision:
    accepted: bool
    reasons: tuple[str, ...]  # why refused (or what an acceptance checked / a force overrode)
    forced: bool = False
    active_version: str | None = None
    candidate_auc: float | None = None
    active_auc: float | None = None
    canary_shift: float | None = None

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        return out


def canary_students(qmatrix: QMatrix, *, count: int = 200, seed: int = 7919) -> list[StudentResponses]:
    """SIMULATED canary students (DINA, fixed seed): the same students every time for one Q-matrix."""
    return simulate_dina(qmatrix, n_students=count, seed=seed, student_prefix="canary").students


def canary_shift(
    candidate: CDModel, active: CDModel, qmatrix: QMatrix, students: Sequence[StudentResponses]
) -> float:
    """Mean |mastery_candidate - mastery_active| over ``students`` and the Q-matrix's concepts."""
    new = predict_mastery_batch(candidate, qmatrix, students)
    old = predict_mastery_batch(active, qmatrix, students)
    return float(np.mean([abs(a[c] - b[c]) for a, b in zip(new, old, strict=True) for c in qmatrix.concepts]))


def heldout_auc(
    model: CDModel, qmatrix: QMatrix, students: Sequence[StudentResponses], *, mask_frac: float = 0.2, seed: int = 0
) -> float:
    """AUC on a seeded ``mask_frac`` of each student's responses, predicted from the rest."""
    data = encode_students(qmatrix, students, table=model.item_table(qmatrix))
    hidden = hidden_mask(data.observed, frac=mask_frac, generator=torch.Generator().manual_seed(seed))
    return evaluate_masked(model, data, hidden).auc


def _finite(x: float | None) -> bool:
    return x is not None and x == x


def promotion_gate(
    candidate: CDModel,
    *,
    active: CDModel | None,
    qmatrix: QMatrix,
    heldout: Sequence[StudentResponses],
    active_version: str | None = None,
    policy: GatePolicy | None = None,
    force: bool = False,
) -> GateDecision:
    """Compare ``candidate`` with the ``active`` model; see the module docstring."""
    policy = policy or GatePolicy()
    auc_new = heldout_auc(candidate, qmatrix, heldout, mask_frac=policy.eval_mask_frac, seed=policy.eval_seed) \
        if heldout else None
    if active is None:
        return GateDecision(accepted=True, reasons=("no active model: nothing to compare with",),
                            candidate_auc=auc_new)
    unknown = [c for c in qmatrix.concepts if c not in active.concepts]
    if unknown:
        reason = (f"active {active_version or 'model'} does not know concepts {', '.join(unknown[:10])}: "
                  "the two models cannot be compared")
        accepted = force or policy.allow_incomparable
        return GateDecision(accepted=accepted, reasons=(reason,), forced=force and not policy.allow_incomparable,
                            active_version=active_version, candidate_auc=auc_new)
    refusals, checks = [], []
    auc_old = heldout_auc(active, qmatrix, heldout, mask_frac=policy.eval_mask_frac, seed=policy.eval_seed) \
        if heldout else None
    if _finite(auc_new) and _finite(auc_old):
        drop = auc_old - auc_new  # type: ignore[operator]
        line = f"held-out AUC {auc_new:.4f} vs active {auc_old:.4f} (drop {drop:+.4f}, limit {policy.max_auc_drop})"
        (refusals if drop > policy.max_auc_drop else checks).append(line)
    else:
        checks.append("held-out AUC not comparable (no held-out responses or a single class)")
    shift = canary_shift(candidate, active, qmatrix,
                         canary_students(qmatrix, count=policy.canary_count, seed=policy.canary_seed))
    line = f"canary mastery shift {shift:.4f} (limit {policy.max_canary_shift}, {policy.canary_count} students)"
    (refusals if shift > policy.max_canary_shift else checks).append(line)
    accepted = force or not refusals
    reasons = tuple(refusals + checks) if refusals else tuple(checks)
    return GateDecision(accepted=accepted, reasons=reasons, forced=force and bool(refusals),
                        active_version=active_version, candidate_auc=auc_new, active_auc=auc_old,
                        canary_shift=shift)
