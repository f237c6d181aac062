"""The frontier's metrics: MAE and held-out AUC with paired standard errors, the held-out split and the references."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from evaluation.frontier.results import BOOTSTRAP, Mastery
from evaluation.link import fit_link
from evaluation.simulation import DINA_GUESS, DINA_SLIP
from evaluation.metrics import auc as auc_score
from qmatrix import QMatrix, Response

# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def abs_errors(est: Sequence[Mastery], truths: Sequence[Mastery]) -> list[np.ndarray]:
    """Per student, |estimate − truth| over the concepts both have (truth order)."""
    return [np.array([abs(e[c] - v) for c, v in t.items() if c in e], dtype=float) for e, t in zip(est, truths)]


def mean_abs_error(errors: Sequence[np.ndarray]) -> tuple[float, int]:
    flat = np.concatenate([*errors, np.empty(0)])
    return (float(flat.mean()) if flat.size else float("nan")), int(flat.size)


def paired_mae_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray], n_units: int) -> tuple[float, float]:
    """MAE(a) − MAE(b) over the same (row, concept) pairs, with its standard error over students.

    Row i belongs to student i mod ``n_units`` (rows are the test students repeated once per noise
    draw), so the standard error treats a student's repeated draws as one unit.
    """
    sums = np.zeros(n_units)
    n_pairs = 0
    for i, (x, y) in enumerate(zip(a, b)):
        if x.size == y.size and x.size:
            sums[i % n_units] += x.sum() - y.sum()
            n_pairs += x.size
    if n_pairs == 0:
        return float("nan"), float("nan")
    diff = float(sums.sum() / n_pairs)
    se = float(np.sqrt(n_units) * sums.std(ddof=1) / n_pairs) if n_units > 1 else float("nan")
    return diff, se


def _item_scores(est: Sequence[Mastery], held: Sequence[Sequence[Response]], q: QMatrix) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per row: mean estimated mastery of each held-out item's concepts, and the outcomes (unscorable items dropped)."""
    scores, outcomes = [], []
    for mastery, responses in zip(est, held):
        m, y = [], []
        for r in responses:
            values = [mastery[c] for c in q.item(r.item_id).concepts if c in mastery]
            if values:
                m.append(float(np.mean(values)))
                y.append(r.score)
        scores.append(np.array(m, dtype=float))
        outcomes.append(np.array(y, dtype=float))
    return scores, outcomes


class HeldoutScores:
    """Predicted P(correct) and outcomes of the test rows' held-out responses; row i is student i mod n_units."""

    def __init__(self, probs: Sequence[np.ndarray], outcomes: Sequence[np.ndarray], n_units: int) -> None:
        self.p = np.concatenate([np.empty(0), *probs])
        self.y = np.concatenate([np.empty(0), *outcomes])
        owner = np.concatenate([np.empty(0, dtype=int), *(np.full(len(p), i % n_units) for i, p in enumerate(probs))])
        self.by_unit = [np.flatnonzero(owner == u) for u in range(n_units)]
        self.n_units = n_units

    @property
    def n(self) -> int:
        return int(self.p.size)

    def auc(self, units: np.ndarray | None = None) -> float:
        if units is None:
            return auc_score(self.p, self.y) if self.p.size else float("nan")
        idx = np.concatenate([np.empty(0, dtype=int), *(self.by_unit[u] for u in units)])
        return auc_score(self.p[idx], self.y[idx]) if idx.size else float("nan")


def heldout_scores(val_est: Sequence[Mastery], test_est: Sequence[Mastery], val_held, test_held, q: QMatrix, n_units: int) -> HeldoutScores | None:  # type: ignore[no-untyped-def]
    vm, vy = _item_scores(val_est, val_held, q)
    tm, ty = _item_scores(test_est, test_held, q)
    m, y = np.concatenate([np.empty(0), *vm]), np.concatenate([np.empty(0), *vy])
    if m.size == 0 or sum(t.size for t in tm) == 0:
        return None
    link = fit_link(m, y)
    return HeldoutScores([link(t) for t in tm], ty, n_units)


def paired_auc_diff(a: HeldoutScores, b: HeldoutScores, rng: np.random.Generator) -> tuple[float, float]:
    """AUC(a) − AUC(b), with a paired bootstrap standard error over test students."""
    diff = a.auc() - b.auc()
    boots = []
    for _ in range(BOOTSTRAP):
        units = rng.integers(0, a.n_units, size=a.n_units)
        d = a.auc(units) - b.auc(units)
        if not math.isnan(d):
            boots.append(d)
    return float(diff), (float(np.std(boots, ddof=1)) if len(boots) > 1 else float("nan"))


def constant_predictions(val_truths: Sequence[Mastery], concepts: Sequence[Sequence[str]]) -> list[Mastery]:
    by: dict[str, list[float]] = {}
    for t in val_truths:
        for c, v in t.items():
            by.setdefault(c, []).append(v)
    means = {c: float(np.mean(v)) for c, v in by.items()}
    overall = float(np.mean([v for vs in by.values() for v in vs])) if by else 0.5
    return [{c: means.get(c, overall) for c in cs} for cs in concepts]


def dina_heldout_oracle(q: QMatrix, observed: Sequence[Sequence[Response]], held: Sequence[Sequence[Response]]) -> list[np.ndarray]:
    """P(correct) of each held-out response under the true DINA parameters given the observed ones."""
    import itertools

    k = len(q.concepts)
    profiles = np.array(list(itertools.product((0, 1), repeat=k)), dtype=bool)
    qm = q.matrix.astype(bool)
    eta = ~((~profiles)[:, None, :] & qm[None, :, :]).any(axis=2)  # (profiles, items)
    p1 = np.where(eta, 1 - DINA_SLIP, DINA_GUESS)
    index = {item: i for i, item in enumerate(q.item_ids)}
    out = []
    for obs, hid in zip(observed, held):
        logpost = np.zeros(len(profiles))  # uniform prior over profiles (mastery rate ½, as the generator)
        for r in obs:
            p = p1[:, index[r.item_id]]
            logpost += r.score * np.log(p) + (1 - r.score) * np.log(1 - p)
        w = np.exp(logpost - logpost.max())
        w /= w.sum()
        out.append(np.array([float(w @ p1[:, index[r.item_id]]) for r in hid]))
    return out
