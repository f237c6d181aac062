"""Adaptive item selection (CD-CAT, issue 34): which items to ask a student next so that the concepts still uncertain
are pinned down in the fewest questions.

**The posterior.** The serving model's (:mod:`providers.serving_bank`): the mode ``θ̂`` of its fold-in objective
(``federated.foldin``'s split likelihood under its prior, maximised here in numpy by Newton's method with a backtracking
line search: the same concave objective, so the same mode, in a fraction of torch's time) and the Laplace covariance of
the model that predicts responses (full curvature, covariances kept)::

    H = Σ⁻¹ + Σ_i a_i w_i w_iᵀ,  a_i = α_i² p_i (1 − p_i),  p_i = σ(α_i w_i·θ̂ + c_i),   C = H⁻¹

Concept ``k``'s mastery is ``σ(θ̂_d)`` (``d`` its ability dimension) with the interval ``σ(θ̂_d ± z √C_dd)``.
The same Newton solver finds the mode of the model that predicts (:func:`predictive_mode`: each response one
Bernoulli on ``η_i``, not split), which calibration reads a validation student's ability truth from.

**The criteria.** Asking item ``j`` adds ``a_j w_j w_jᵀ`` to ``H`` — a rank-one update whose size does not depend
on the answer under the Laplace approximation, only through ``a_j``, which is averaged over the posterior predictive
of ``η_j`` (``E[p(1−p)]`` by the probit approximation: a posterior-weighted Fisher information, not the information at
the point estimate). By Sherman–Morrison, with ``g = C w_j`` and ``s = w_jᵀ C w_j``, each dimension's variance falls
by ``shrink_d = a_j g_d² / (1 + a_j s)``. Two scores are read off that drop, summed over the *open* targeted concepts
(a targeted concept whose interval is still wider than the caller's width):

* ``width`` (the default): the expected narrowing of their credible intervals **in mastery space**,
  ``W(θ̂_d, C_dd) − E_y[W(θ̂_d + Δ_d(y), C_dd − shrink_d)]`` with ``W(θ, v) = σ(θ + z√v) − σ(θ − z√v)`` — what the
  caller's ``target_width`` and the intervals a diagnosis reports are measured in. The answer ``y`` also moves the
  mode (``Δ(y)``, one Newton step: :func:`_scores`), and where it lands matters in mastery space, so the width after
  is averaged over ``y``'s posterior-predictive chance (a one-step preposterior analysis). A concept whose mastery
  interval is already narrow (a small variance, or an ability far from 0, where σ is flat) gains little from a
  further relative drop.
* ``entropy``: the drop in their Gaussian entropy ``−½ log(1 − shrink_d / C_dd)`` (nats), the Shannon-entropy family
  of CD-CAT criteria (Tatsuoka 2002; Cheng 2009's posterior-weighted indices; Wang 2013's mutual information) on a
  continuous posterior. It values a relative drop on an already narrow concept as much as one on a wide concept;
  ``fedcd bench next-items`` measured it behind ``width`` on FrcSub and ASSIST0910 (docs/results/next-items).

Under either, an item on a concept already well measured, or one whose answer is nearly certain (too easy or too
hard for this student), scores little; an item on a correlated concept scores through ``C``'s off-diagonal entries.
Every pick reports both numbers; ``min_gain`` is read against the entropy drop (nats) whichever criterion ranks.

**Against a whole bank** (ASSIST0910: 16,804 items), every candidate is first ranked by the first-order form of the
score (``Σ_d u_d shrink_d`` with ``u_d`` the score's slope in ``C_dd``: ``1/C_dd`` for entropy, ``∂W/∂v`` at θ̂
for width; a quadratic form per item read off the few dimensions it touches), and the exact score is computed for
the best ``_SHORTLIST`` of them.

**Several items at once** are chosen greedily: after each pick its expected information is added to ``C`` (the
answer is not known yet, only how much it will tell), so a list of five does not ask the same thing five times.

**Exposure control: randomesque** (Kingsbury & Zara 1989). Each slot is drawn at random among the ``randomesque``
best remaining items, so a bank's most informative items are not shown to every student; 1 switches it off. The
draw is seeded by the caller (the service seeds it from the student and the responses: a repeat gets the same list).

Pure numpy, no I/O: this reads no entity and spends no ε (docs/next-items.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
from scipy.special import expit, logit
from scipy.stats import norm

from providers.serving_bank import ServingBank

__all__ = ["CRITERIA", "ConceptState", "Criterion", "Pick", "Posterior", "Selection", "SelectionRule", "concept_states",
           "fold_in_mode", "posterior", "posterior_from_intervals", "predict", "predictive_mode", "select"]

Criterion = Literal["width", "entropy"]  # module docstring; the first is the default (measured ahead)
CRITERIA: tuple[str, ...] = get_args(Criterion)
DEFAULT_LEVEL = 0.9
_SHORTLIST = 64  # candidates scored exactly (and rescored after each greedy pick)
_WHY = 5  # concepts listed per item, most informed first
_NEWTON_STEPS = 50
_STEP_SIZES = (1.0, 0.5, 0.25, 0.125, 0.0625)
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Posterior:
    """θ̂ (D,) and its covariance C (D, D)."""

    theta: np.ndarray
    cov: np.ndarray


@dataclass(frozen=True)
class ConceptState:
    concept: str
    mastery: float
    interval: tuple[float, float]
    width: float


@dataclass(frozen=True)
class Pick:
    """One chosen item: its bank position, the expected entropy reduction of the open targeted concepts (``gain``,
    nats) and the expected narrowing of the sum of their interval widths (``narrowing``, mastery scale) — the rule's
    criterion ranked by one of them — P(correct) and, per targeted concept it informs, the expected entropy
    reduction and the interval width now and expected after the answer."""

    position: int
    gain: float
    narrowing: float
    p_correct: float
    informs: tuple[tuple[str, float, float, float], ...]


@dataclass(frozen=True)
class SelectionRule:
    """How items are chosen: stop once every targeted concept's interval (at credible ``level``) is narrower than
    ``target_width``; rank by ``criterion`` (module docstring); draw each pick at random among the ``randomesque``
    best (exposure control); never suggest an item whose expected entropy reduction is ``min_gain`` nats or less."""

    target_width: float | None = None
    randomesque: int = 1
    min_gain: float = 0.0
    level: float = DEFAULT_LEVEL
    criterion: Criterion = "width"

    def __post_init__(self) -> None:
        if self.randomesque < 1 or self.min_gain < 0:
            raise ValueError(f"need randomesque >= 1, min_gain >= 0; got {self.randomesque}, {self.min_gain}")
        if self.criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}; got {self.criterion!r}")


@dataclass(frozen=True)
class _Focus:
    """What a pick is scored and explained against: the targeted concepts still open, their ability dimensions
    (distinct), how many open concepts read each (a one-factor model reads them all from one), the z of the credible
    level."""

    open_concepts: Sequence[str]
    dims: np.ndarray
    counts: np.ndarray
    z: float


@dataclass(frozen=True)
class Selection:
    picks: list[Pick]
    stop_reason: str | None  # "target_width_reached" | "nothing_worth_asking" | "no_items_left" | None


@functools.lru_cache(maxsize=32)
def _z(level: float) -> float:
    return float(norm.ppf(0.5 + level / 2))


def _rows(values: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
    return values if rows is None else values[rows]


def _eta(bank: ServingBank, rows: np.ndarray | None, theta: np.ndarray) -> np.ndarray:
    """The mean linear predictor ``α_i w_i·θ + c_i`` of the items at ``rows`` (None: the whole bank)."""
    w, idx = _rows(bank.weight, rows), _rows(bank.index, rows)
    return _rows(bank.alpha, rows) * (w * theta[idx]).sum(-1) + _rows(bank.intercept, rows)


def _quadratic(bank: ServingBank, rows: np.ndarray | None, m: np.ndarray) -> np.ndarray:
    """``w_iᵀ M w_i`` of the items at ``rows`` (None: the whole bank), read off the few dimensions each item
    touches (``ServingBank.pair_index``)."""
    pairs, weights = _rows(bank.pair_index, rows), _rows(bank.pair_weight, rows)  # type: ignore[attr-defined]
    return (m.ravel()[pairs] * weights).sum(axis=(1, 2))


def _times(bank: ServingBank, rows: np.ndarray, m: np.ndarray, dims: np.ndarray | slice = slice(None)) -> np.ndarray:
    """``(M w_i)[dims]`` of the items at ``rows`` (n, |dims|)."""
    return np.einsum("nr,dnr->nd", bank.weight[rows], m[dims][:, bank.index[rows]])


def _objective(bank: ServingBank, rows: np.ndarray, y: np.ndarray, theta: np.ndarray) -> float:
    """The fold-in's log posterior (``federated.foldin._log_posterior``), up to a constant."""
    z = bank.alpha[rows, None] * theta[bank.index[rows]] + bank.intercept[rows, None]
    loglik = (bank.weight[rows] * (y[:, None] * -np.logaddexp(0, -z) + (1 - y[:, None]) * -np.logaddexp(0, z))).sum()
    d = theta - bank.prior_mean
    return float(loglik - 0.5 * d @ bank.prior_precision @ d)  # type: ignore[attr-defined]


def _ascend(value: Callable[[np.ndarray], float], newton: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
            theta: np.ndarray) -> np.ndarray:
    """The maximum of a concave ``value`` from ``theta``: Newton's method (``newton(θ)``: the gradient and the negative
    Hessian) with a backtracking line search, so every accepted step ascends; it stops when no step size ascends or a
    step gains less than ``_TOLERANCE``."""
    current = value(theta)
    for _ in range(_NEWTON_STEPS):
        grad, hessian = newton(theta)
        step = np.linalg.solve(hessian, grad)
        for size in _STEP_SIZES:
            candidate = theta + size * step
            candidate_value = value(candidate)
            if candidate_value >= current:
                break
        else:
            break
        theta, improved, current = candidate, candidate_value - current, candidate_value
        if improved < _TOLERANCE:
            break
    return theta


def fold_in_mode(bank: ServingBank, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The mode of the fold-in objective: a response to item ``i`` adds ``w_ik`` of log σ(±(α_i θ_k + c_i)) to each
    dimension ``k`` it reads, under the model's Gaussian prior (the objective is concave: one mode)."""
    theta = bank.prior_mean.astype(np.float64).copy()
    if rows.size == 0:
        return theta
    d_count = theta.size
    alpha, idx, w = bank.alpha[rows, None], bank.index[rows], bank.weight[rows]
    precision = bank.prior_precision  # type: ignore[attr-defined]

    def newton(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = expit(alpha * theta[idx] + bank.intercept[rows, None])
        grad = np.bincount(idx.ravel(), (w * alpha * (y[:, None] - p)).ravel(), d_count)
        info = np.bincount(idx.ravel(), (w * alpha**2 * p * (1 - p)).ravel(), d_count)
        return grad - precision @ (theta - bank.prior_mean), precision + np.diag(info)

    return _ascend(functools.partial(_objective, bank, rows, y), newton, theta)


def predictive_mode(bank: ServingBank, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The mode under the model that *predicts* responses, ``P(correct on i) = σ(α_i w_i·θ + c_i)`` (one Bernoulli
    per response, not split between its dimensions), and the bank's Gaussian prior: concave, so one mode."""
    theta = bank.prior_mean.astype(np.float64).copy()
    if rows.size == 0:
        return theta
    d_count, idx, w = theta.size, bank.index[rows], bank.weight[rows]
    precision = bank.prior_precision  # type: ignore[attr-defined]

    def value(theta: np.ndarray) -> float:
        eta, d = _eta(bank, rows, theta), theta - bank.prior_mean
        return float((y * -np.logaddexp(0, -eta) + (1 - y) * -np.logaddexp(0, eta)).sum() - 0.5 * d @ precision @ d)

    def newton(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = expit(_eta(bank, rows, theta))
        grad = np.bincount(idx.ravel(), (w * (bank.alpha[rows] * (y - p))[:, None]).ravel(), d_count)
        return grad - precision @ (theta - bank.prior_mean), _precision(bank, rows, bank.alpha[rows] ** 2 * p * (1 - p))

    return _ascend(value, newton, theta)


def _precision(bank: ServingBank, rows: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``Σ⁻¹ + Σ_i a_i w_i w_iᵀ`` over the items at ``rows`` (the negative Hessian of the model that predicts)."""
    precision = bank.prior_precision.copy()  # type: ignore[attr-defined]
    if rows.size:
        idx, w = bank.index[rows], bank.weight[rows]
        pairs = (a[:, None, None] * w[:, :, None] * w[:, None, :]).ravel()
        np.add.at(precision, (np.broadcast_to(idx[:, :, None], (*idx.shape, idx.shape[1])).ravel(),
                              np.broadcast_to(idx[:, None, :], (*idx.shape, idx.shape[1])).ravel()), pairs)
    return precision


def _information(bank: ServingBank, rows: np.ndarray | None, theta: np.ndarray, spread: np.ndarray | None
                 ) -> np.ndarray:
    """``α² E[p(1−p)]`` of the items at ``rows`` (None: the whole bank): at θ̂ (``spread`` None) or averaged over η's
    posterior spread ``w_iᵀ C w_i`` (probit approximation)."""
    alpha, eta = _rows(bank.alpha, rows), _eta(bank, rows, theta)
    if spread is None:
        p = expit(eta)
        return alpha**2 * p * (1 - p)
    kappa = 1 / np.sqrt(1 + math.pi / 8 * alpha**2 * spread)
    p = expit(kappa * eta)
    return alpha**2 * kappa * p * (1 - p)


def posterior(bank: ServingBank, positions: Sequence[int], scores: Sequence[float]) -> Posterior:
    """The student's posterior after ``scores`` on the bank items at ``positions`` (module docstring); items the
    model cannot read are left out."""
    keep = [n for n, p in enumerate(positions) if bank.usable[p]]
    rows = np.asarray([positions[n] for n in keep], dtype=np.int64)
    theta = fold_in_mode(bank, rows, np.asarray([scores[n] for n in keep], dtype=np.float64))
    cov = np.linalg.inv(_precision(bank, rows, _information(bank, rows, theta, None)))
    return Posterior(theta=theta, cov=(cov + cov.T) / 2)


def posterior_from_intervals(
    bank: ServingBank, beliefs: Mapping[str, tuple[float, float, float]], *, level: float = DEFAULT_LEVEL
) -> Posterior:
    """A posterior read off a released diagnosis — per concept (mastery, interval low, high) — where the responses
    are not at hand (the student report): θ_d = logit(mastery), sd from the interval's logit width; concepts not in
    ``beliefs`` keep the prior. Only marginals are released, so the covariance is diagonal (correlations unknown)."""
    z, clip = _z(level), 1e-4
    theta = bank.prior_mean.astype(np.float64).copy()
    var = np.diag(bank.prior_cov).astype(np.float64).copy()
    column = {c: k for k, c in enumerate(bank.concepts)}
    for concept, (mastery, low, high) in beliefs.items():
        if concept not in column:
            continue
        d = int(bank.dim_of[column[concept]])
        lo, hi, m = (float(logit(np.clip(v, clip, 1 - clip))) for v in (low, high, mastery))
        theta[d], var[d] = m, min(var[d], max((hi - lo) / (2 * z), 1e-3) ** 2)
    return Posterior(theta=theta, cov=np.diag(var))


def predict(bank: ServingBank, post: Posterior, positions: np.ndarray) -> np.ndarray:
    """Posterior-predictive P(correct) of the bank items at ``positions`` (probit approximation)."""
    spread = _quadratic(bank, positions, post.cov)
    return expit(_eta(bank, positions, post.theta) / np.sqrt(1 + math.pi / 8 * bank.alpha[positions] ** 2 * spread))


def _interval(theta: float, var: float, z: float) -> tuple[float, float]:
    sd = math.sqrt(max(var, 0.0))
    return float(expit(theta - z * sd)), float(expit(theta + z * sd))


def concept_states(bank: ServingBank, post: Posterior, *, level: float = DEFAULT_LEVEL) -> list[ConceptState]:
    """Every concept the model reads: mastery, credible interval at ``level``, its width (mastery scale)."""
    z, out = _z(level), []
    for concept, d in zip(bank.concepts, bank.dim_of, strict=True):
        lo, hi = _interval(float(post.theta[d]), float(post.cov[d, d]), z)
        out.append(ConceptState(concept, float(expit(post.theta[d])), (lo, hi), hi - lo))
    return out


def _width(theta: np.ndarray, var: np.ndarray, z: float) -> np.ndarray:
    """``W(θ, v) = σ(θ + z√v) − σ(θ − z√v)``: the credible interval's width in mastery space."""
    sd = np.sqrt(np.maximum(var, 0.0))
    return expit(theta + z * sd) - expit(theta - z * sd)


def _width_slope(theta: np.ndarray, var: np.ndarray, z: float) -> np.ndarray:
    """``∂W/∂v = z / (2√v) · (σ'(θ + z√v) + σ'(θ − z√v))``."""
    sd = np.sqrt(np.maximum(var, 1e-12))
    hi, lo = expit(theta + z * sd), expit(theta - z * sd)
    return z / (2 * sd) * (hi * (1 - hi) + lo * (1 - lo))


@dataclass(frozen=True)
class _Scores:
    """The candidates' expected effects: per item (n,) the entropy drop (nats), the narrowing of the summed widths,
    the information ``a``, ``s = w_jᵀ C w_j`` and P(correct) (posterior predictive); per item and open dimension
    (n, dims) the variance lost and the expected interval width after the answer."""

    entropy: np.ndarray
    narrowing: np.ndarray
    a: np.ndarray
    s: np.ndarray
    p_correct: np.ndarray
    shrink: np.ndarray
    width_after: np.ndarray


def _scores(bank: ServingBank, post: Posterior, rows: np.ndarray, focus: _Focus) -> _Scores:
    """The candidate ``rows``' scores (module docstring). The width after an answer ``y`` is read at the mode moved by
    one Newton step from θ̂ — ``Δθ = α_j (y − p_j) C' w_j = α_j (y − p_j) g / (1 + a_j s)`` — with the reduced
    variance, and averaged over ``y`` by its posterior-predictive chance: the mastery width depends on where θ̂ lands,
    not only on the variance."""
    dims, z = focus.dims, focus.z
    s = _quadratic(bank, rows, post.cov)
    a = _information(bank, rows, post.theta, s)
    g = _times(bank, rows, post.cov, dims)
    shrink = (a / (1 + a * s))[:, None] * g**2
    var, theta = np.diag(post.cov)[dims][None, :], post.theta[dims][None, :]
    drop = np.clip(shrink / var, 0.0, 1 - 1e-12)
    after = var * (1 - drop)
    alpha, eta = bank.alpha[rows], _eta(bank, rows, post.theta)
    p_bar = expit(eta / np.sqrt(1 + math.pi / 8 * alpha**2 * s))[:, None]  # P(correct), posterior predictive
    p_hat = expit(eta)[:, None]  # at θ̂: the Newton step's gradient
    step = (alpha / (1 + a * s))[:, None] * g
    width_after = (p_bar * _width(theta + step * (1 - p_hat), after, z)
                   + (1 - p_bar) * _width(theta - step * p_hat, after, z))
    narrowing = (focus.counts * (_width(theta, var, z) - width_after)).sum(axis=1)
    return _Scores(-0.5 * np.log1p(-drop).sum(axis=1), narrowing, a, s, p_bar[:, 0], shrink, width_after)


def _shortlist(bank: ServingBank, post: Posterior, pool: np.ndarray, focus: _Focus, criterion: Criterion,
               size: int) -> np.ndarray:
    """The ``size`` candidates with the best first-order score ``a/(1+as) · w_jᵀ C U C w_j`` (U = diag u_d on the open
    dimensions, the criterion's slope in each variance), computed for the whole bank at once from each item's own few
    dimensions."""
    if pool.size <= size:
        return pool
    var = np.diag(post.cov)[focus.dims]
    slope = (1 / var if criterion == "entropy"
             else focus.counts * _width_slope(post.theta[focus.dims], var, focus.z))
    c_open = post.cov[:, focus.dims]
    m = (c_open * slope[None, :]) @ c_open.T
    s = _quadratic(bank, None, post.cov)
    a = _information(bank, None, post.theta, s)
    first = (a / (1 + a * s) * _quadratic(bank, None, m))[pool]
    return pool[np.argpartition(-first, size - 1)[:size]]


def select(
    bank: ServingBank, post: Posterior, *, candidates: np.ndarray, targets: Sequence[str], count: int,
    rule: SelectionRule = SelectionRule(), rng: np.random.Generator | None = None,
) -> Selection:
    """Up to ``count`` items among ``candidates`` (bank positions), best first, for the ``targets`` concepts."""
    if count < 1:
        raise ValueError(f"need count >= 1, got {count}")
    target_width, randomesque, min_gain, level = rule.target_width, rule.randomesque, rule.min_gain, rule.level
    z, rng = _z(level), rng or np.random.default_rng(0)
    column = {c: k for k, c in enumerate(bank.concepts)}
    wanted = [t for t in targets if t in column]
    widths = {c: s.width for c, s in zip(bank.concepts, concept_states(bank, post, level=level), strict=True)}
    open_concepts = [t for t in wanted if target_width is None or widths[t] > target_width]
    if not open_concepts:
        return Selection([], "target_width_reached" if wanted else "nothing_worth_asking")
    dims, counts = np.unique(bank.dim_of[[column[t] for t in open_concepts]], return_counts=True)
    focus = _Focus(open_concepts, dims, counts.astype(np.float64), z)
    pool = np.asarray(candidates, dtype=np.int64)
    pool = pool[bank.usable[pool]]
    if pool.size == 0:
        return Selection([], "no_items_left")
    pool = _shortlist(bank, post, pool, focus, rule.criterion, max(_SHORTLIST, 2 * count * randomesque))
    picks: list[Pick] = []
    cov = post.cov
    for _ in range(count):
        if pool.size == 0:
            break
        current = Posterior(post.theta, cov)
        scored = _scores(bank, current, pool, focus)
        score = scored.entropy if rule.criterion == "entropy" else scored.narrowing
        ranked = np.argsort(-score, kind="stable")
        worth = ranked[scored.entropy[ranked] > min_gain][:randomesque]
        if worth.size == 0:
            break
        n = int(worth[rng.integers(worth.size)])
        picks.append(_pick(bank, current, int(pool[n]), scored, n, focus))
        wc = _times(bank, pool[[n]], cov)[0]  # C ← C − a (Cw)(Cw)ᵀ / (1 + a s): the answer's expected information
        a, s = scored.a[n], scored.s[n]
        cov = cov - (a / (1 + a * s)) * np.outer(wc, wc)
        pool = np.delete(pool, n)
    return Selection(picks, None if picks else "nothing_worth_asking")


def _pick(bank: ServingBank, post: Posterior, j: int, scored: _Scores, n: int, focus: _Focus) -> Pick:
    """Item ``j`` (the ``n``-th scored)'s why: the open targeted concepts it informs most (at least 1 % of the most),
    at most ``_WHY``, each with its entropy drop and its interval width now and expected after the answer."""
    open_concepts, dims, z = focus.open_concepts, focus.dims, focus.z
    column = {c: k for k, c in enumerate(bank.concepts)}
    at = {int(d): m for m, d in enumerate(dims)}
    informs = []
    for concept in open_concepts:
        d = int(bank.dim_of[column[concept]])
        var = float(post.cov[d, d])
        after = max(var - float(scored.shrink[n, at[d]]), 1e-12)
        lo, hi = _interval(float(post.theta[d]), var, z)
        informs.append((concept, 0.5 * math.log(var / after), hi - lo, float(scored.width_after[n, at[d]])))
    top = max((r for _, r, _, _ in informs), default=0.0)
    informs = [i for i in informs if i[1] > 0 and i[1] >= 0.01 * top]
    informs.sort(key=lambda x: -x[1])
    return Pick(position=j, gain=float(scored.entropy[n]), narrowing=float(scored.narrowing[n]),
                p_correct=float(scored.p_correct[n]), informs=tuple(informs[:_WHY]))
