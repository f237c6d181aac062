"""DINA ("deterministic input, noisy and gate"), fitted by EM — exactly, or mean-field for many concepts.

Each student has a binary attribute profile α ∈ {0,1}^K (mastered or not, per concept).
Item i requires the concepts q_i; the student's ideal response η_i = Π_k α_k^{q_ik} is 1 iff
they master all of them. The observed response is noisy: they slip with probability s_i,
or guess with probability g_i,  P(correct | α) = (1 − s_i)^η_i · g_i^(1 − η_i).
Profiles are drawn from a population prior π. Slip and guess are kept in [1e-3, 0.499], so
s + g < 1 (a master is always more likely to succeed; this also removes label switching).
Partial credit counts as a Bernoulli weight (see ``common``).

**Exact EM over equivalence classes (K ≤ 16 by default).** Profiles with the same
ideal-response row η are indistinguishable by the likelihood, so they are merged exactly
into classes (unique η rows) and EM runs over classes. Within a class the prior mass is
split **uniformly over its profiles**: full-profile EM started from a uniform prior keeps
every within-class ratio fixed forever (the likelihood cannot move it), so this is exactly
full-profile EM, at the cost of the number of classes instead of 2^K. Mastery of k is
Σ_c P(c | x) · share_ck, with share_ck the fraction of class c's profiles having α_k = 1.

**Mean-field DINA (K > 16, e.g. ASSIST0910's 110 skills).** 2^K profiles cannot be
enumerated, so the posterior of a student is approximated by independent Bernoullis,
q(α) = Π_k Bern(m_k), under a prior Π_k Bern(ρ_k). Because η_i is a product of independent
attributes, E_q[η_i] = Π_{k∈q_i} m_k exactly, and the evidence lower bound
    ELBO = Σ_i E_q[η_i]·ℓ1_i + (1 − E_q[η_i])·ℓ0_i − Σ_k KL(Bern(m_k) ‖ Bern(ρ_k))
(ℓ1, ℓ0: log-likelihood of the response when η = 1 / 0) is maximized coordinate-wise in
closed form: logit m_k = logit ρ_k + Σ_{i∋k} (Π_{l∈q_i, l≠k} m_l)(ℓ1_i − ℓ0_i). The M-step
(s, g, ρ) is closed form too. It works on the list of answered (student, item) pairs, so a
sweep costs O(answers x concepts per item + students x K), whatever the size of the item
bank (ASSIST0910: 16.8k items, ~1% of them answered by a given student).

Both paths use MAP updates with weak priors — slip/guess as if ``param_pseudocount``
extra responses sat at ``init_slip``/``init_guess`` (items never answered keep exactly
those values), and ``class_pseudocount`` pseudo-students spread uniformly over profiles —
so ``loglik_trace_`` records the penalized log-likelihood (exact) or penalized ELBO
(mean-field), the quantities each EM step provably does not decrease.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Self

import numpy as np
from scipy.special import expit, logit, logsumexp

from evaluation.baselines.common import CDMBaseline, check_q, check_responses, select_items, split_scores

__all__ = ["DINA", "DINASettings", "ProfileClasses", "dina_log_likelihood", "dina_posterior", "profile_classes"]

Method = Literal["auto", "exact", "mean-field"]
_CHUNK_CELLS = 2**22  # students x classes per E-step chunk: bounds memory when there are many classes
_MF_EPS = 1e-6  # mean-field probabilities stay in [eps, 1 - eps] so their logs stay finite


@dataclass(frozen=True)
class ProfileClasses:
    """Attribute profiles merged by ideal-response row: η per class, profile sizes and α_k shares."""

    eta: np.ndarray  # classes x items, 0/1
    size: np.ndarray  # profiles per class
    share: np.ndarray  # classes x concepts: fraction of the class's profiles with α_k = 1
    class_of_profile: np.ndarray  # 2^K: class index of profile p, where α_k = bit k of p


def profile_classes(q: np.ndarray) -> ProfileClasses:
    """Enumerate all 2^K profiles (as bitmasks) and merge those with identical ideal responses."""
    q = np.asarray(q, dtype=np.int64)
    n_concepts = q.shape[1]
    profiles = np.arange(2**n_concepts, dtype=np.int64)
    masks = q @ (np.int64(1) << np.arange(n_concepts, dtype=np.int64))
    eta = (profiles[:, None] & masks[None, :]) == masks[None, :]
    _, first, inverse = np.unique(np.packbits(eta, axis=1), axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    size = np.bincount(inverse).astype(float)
    share = np.stack(
        [np.bincount(inverse, weights=(profiles >> k) & 1, minlength=size.size) for k in range(n_concepts)], axis=1
    )
    return ProfileClasses(eta=eta[first].astype(float), size=size, share=share / size[:, None], class_of_profile=inverse)


def dina_log_likelihood(responses: np.ndarray, eta: np.ndarray, slip: np.ndarray, guess: np.ndarray) -> np.ndarray:
    """Students x classes log P(observed responses | η row); nan responses are skipped."""
    _, correct, wrong = split_scores(np.asarray(responses, dtype=float))
    eta = np.asarray(eta, dtype=float)
    p = eta * (1 - np.asarray(slip))[None, :] + (1 - eta) * np.asarray(guess)[None, :]
    return correct @ np.log(p).T + wrong @ np.log1p(-p).T


def dina_posterior(
    responses: np.ndarray, eta: np.ndarray, slip: np.ndarray, guess: np.ndarray, prior: np.ndarray
) -> np.ndarray:
    """Students x classes P(class | observed responses) ∝ prior_c · P(x | η_c)."""
    with np.errstate(divide="ignore"):
        log_joint = dina_log_likelihood(responses, eta, slip, guess) + np.log(np.asarray(prior, dtype=float))[None, :]
    return np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))


@dataclass(frozen=True)
class _Observations:
    """Answered (student, item, score) triples, and for each concept the triples whose item requires it."""

    student: np.ndarray
    item: np.ndarray
    correct: np.ndarray
    wrong: np.ndarray
    by_concept: list[np.ndarray]
    pair_obs: np.ndarray  # every (observation, concept) incidence, concept-major
    pair_concept: np.ndarray

    @classmethod
    def build(cls, responses: np.ndarray, q: np.ndarray) -> _Observations:
        student, item = np.nonzero(~np.isnan(responses))
        y = responses[student, item]
        pair_concept, pair_obs = np.nonzero(q[item].T)
        splits = np.cumsum(np.bincount(pair_concept, minlength=q.shape[1]))[:-1]
        return cls(student, item, y, 1 - y, np.split(pair_obs, splits), pair_obs, pair_concept)

    def log_eta(self, log_m: np.ndarray) -> np.ndarray:
        """log E_q[η] per observation: Σ over the item's concepts of log m (η is a product of independents)."""
        weights = log_m[self.student[self.pair_obs], self.pair_concept]
        return np.bincount(self.pair_obs, weights=weights, minlength=self.student.size)


@dataclass(frozen=True, kw_only=True)
class DINASettings:
    """How :class:`DINA` is fitted (checked here, on construction): EM over merged profile classes up to
    ``max_exact_concepts`` concepts (``auto``) or mean-field attributes; slip and guess start at ``init_*`` and stay
    within ``bounds`` (low < high < ½, so slip + guess < 1); pseudocounts smooth the M-step."""

    method: Method = "auto"
    max_exact_concepts: int = 16
    max_iter: int = 1000
    tol: float = 1e-6
    init_slip: float = 0.2
    init_guess: float = 0.2
    param_pseudocount: float = 1.0
    class_pseudocount: float = 1.0
    bounds: tuple[float, float] = (1e-3, 0.499)
    mean_field_sweeps: int = 1
    mean_field_max_sweeps: int = 200

    def __post_init__(self) -> None:
        if self.method not in ("auto", "exact", "mean-field"):
            raise ValueError(f"method must be 'auto', 'exact' or 'mean-field', got {self.method!r}")
        if not 0 <= self.max_exact_concepts <= 20:  # 2^20 profiles is already a large enumeration
            raise ValueError(f"max_exact_concepts must be in [0, 20], got {self.max_exact_concepts}")
        if self.max_iter < 1 or self.mean_field_sweeps < 1 or self.mean_field_max_sweeps < 1:
            raise ValueError("max_iter and the sweep counts must be >= 1")
        if self.tol <= 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")
        lo, hi = self.bounds
        if not 0 < lo < hi < 0.5:
            raise ValueError(f"bounds must satisfy 0 < low < high < 0.5 (so slip + guess < 1), got {self.bounds}")
        for label, value in (("init_slip", self.init_slip), ("init_guess", self.init_guess)):
            if not lo <= value <= hi:
                raise ValueError(f"{label} must lie within bounds {self.bounds}, got {value}")
        if self.param_pseudocount < 0 or self.class_pseudocount < 0:
            raise ValueError("pseudocounts must be >= 0")


class DINA(CDMBaseline):
    """DINA with per-item slip and guess, EM over merged profile classes or mean-field attributes."""

    name = "dina"

    def __init__(self, settings: DINASettings | None = None) -> None:
        s = settings or DINASettings()
        lo, hi = s.bounds
        self.method, self.max_exact_concepts = s.method, s.max_exact_concepts
        self.max_iter, self.tol = s.max_iter, s.tol
        self.init_slip, self.init_guess, self.bounds = s.init_slip, s.init_guess, (float(lo), float(hi))
        self.param_pseudocount, self.class_pseudocount = s.param_pseudocount, s.class_pseudocount
        self.mean_field_sweeps, self.mean_field_max_sweeps = s.mean_field_sweeps, s.mean_field_max_sweeps
        self.slip_: np.ndarray | None = None
        self.guess_: np.ndarray | None = None
        self.classes_: ProfileClasses | None = None
        self.class_prior_: np.ndarray | None = None  # exact path
        self.attribute_rate_: np.ndarray | None = None  # mean-field path: ρ_k
        self.method_: str | None = None
        self.loglik_trace_: list[float] = []
        self.converged_ = False

    # --- shared M-step -------------------------------------------------------------------
    def _slip_guess(self, n1: np.ndarray, r1: np.ndarray, n0: np.ndarray, r0: np.ndarray) -> None:
        """MAP slip/guess from expected counts (answered / correct, when η = 1 and η = 0).

        Each is a 1-D concave problem, so clipping the closed-form optimum to the bounds is exact.
        """
        c = self.param_pseudocount
        with np.errstate(invalid="ignore", divide="ignore"):
            slip = np.where(n1 + c > 0, (n1 - r1 + c * self.init_slip) / (n1 + c), self.init_slip)
            guess = np.where(n0 + c > 0, (r0 + c * self.init_guess) / (n0 + c), self.init_guess)
        self.slip_, self.guess_ = np.clip(slip, *self.bounds), np.clip(guess, *self.bounds)

    def _log_param_prior(self) -> float:
        c, s0, g0, s, g = self.param_pseudocount, self.init_slip, self.init_guess, self.slip_, self.guess_
        return float(c * (s0 * np.log(s) + (1 - s0) * np.log1p(-s) + g0 * np.log(g) + (1 - g0) * np.log1p(-g)).sum())

    def _converged(self, trace: list[float]) -> bool:
        return len(trace) > 1 and trace[-1] - trace[-2] < self.tol * (1 + abs(trace[-1]))

    # --- exact path ----------------------------------------------------------------------
    def _class_estep(
        self, responses: np.ndarray, prior: np.ndarray
    ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """Chunked posterior pass: (log-likelihood, class mass, P(η=1|x), mastery)."""
        cl = self.classes_
        assert cl is not None
        rows = max(1, _CHUNK_CELLS // cl.size.size)
        log_prior = np.log(prior)[None, :]
        total, mass = 0.0, np.zeros(cl.size.size)
        w = np.empty(responses.shape)
        mastery = np.empty((responses.shape[0], cl.share.shape[1]))
        for start in range(0, responses.shape[0], rows):
            part = slice(start, start + rows)
            log_joint = dina_log_likelihood(responses[part], cl.eta, self.slip_, self.guess_) + log_prior
            log_marg = logsumexp(log_joint, axis=1, keepdims=True)
            post = np.exp(log_joint - log_marg)
            total += float(log_marg.sum())
            mass += post.sum(0)
            w[part], mastery[part] = post @ cl.eta, post @ cl.share
        return total, mass, w, mastery

    def _fit_exact(self, responses: np.ndarray) -> None:
        cl = self.classes_ = profile_classes(self.q_)
        observed, correct, _ = split_scores(responses)
        pseudo = self.class_pseudocount * cl.size / cl.size.sum()
        prior = cl.size / cl.size.sum()
        trace: list[float] = []
        for _ in range(self.max_iter):
            self.class_prior_ = prior  # the E-step of new students uses it too
            loglik, mass, w, _ = self._class_estep(responses, prior)
            trace.append(loglik + self._log_param_prior() + float((pseudo * np.log(prior)).sum()))
            if self._converged(trace):
                self.converged_ = True
                break
            n1, r1 = (observed * w).sum(0), (correct * w).sum(0)
            self._slip_guess(n1, r1, observed.sum(0) - n1, correct.sum(0) - r1)
            prior = (mass + pseudo) / (mass.sum() + pseudo.sum())
        self.class_prior_, self.loglik_trace_ = prior, trace

    # --- mean-field path (sparse: only answered (student, item) pairs are touched) ---------
    def _mf_delta(self, obs: _Observations) -> np.ndarray:
        """ℓ1 − ℓ0 per observation: log-likelihood gain of the response when η = 1 rather than 0."""
        s, g = self.slip_[obs.item], self.guess_[obs.item]
        return obs.correct * np.log((1 - s) / g) + obs.wrong * np.log(s / (1 - g))

    def _mf_sweep(self, m: np.ndarray, obs: _Observations, delta: np.ndarray) -> float:
        """One in-place coordinate-ascent pass over the concepts; returns the largest change in m."""
        log_m = np.log(m)
        log_eta = obs.log_eta(log_m)
        prior_logit = logit(self.attribute_rate_)
        biggest = 0.0
        for k, pairs in enumerate(obs.by_concept):
            st = obs.student[pairs]
            others = np.exp(log_eta[pairs] - log_m[st, k])  # E[Π_{l≠k} α_l] for each response on an item needing k
            field = np.bincount(st, weights=others * delta[pairs], minlength=m.shape[0])
            new = np.clip(expit(prior_logit[k] + field), _MF_EPS, 1 - _MF_EPS)
            log_new = np.log(new)
            log_eta[pairs] += log_new[st] - log_m[st, k]
            biggest = max(biggest, float(np.abs(new - m[:, k]).max()))
            m[:, k], log_m[:, k] = new, log_new
        return biggest

    def _fit_mean_field(self, responses: np.ndarray) -> None:
        obs = _Observations.build(responses, self.q_)
        rho = self.attribute_rate_ = np.full(self.q_.shape[1], 0.5)
        m = np.full((responses.shape[0], self.q_.shape[1]), 0.5)
        n_items = self.q_.shape[0]
        trace: list[float] = []
        for _ in range(self.max_iter):
            delta = self._mf_delta(obs)
            for _ in range(self.mean_field_sweeps):
                self._mf_sweep(m, obs, delta)
            eta_bar = np.exp(obs.log_eta(np.log(m)))
            g = self.guess_[obs.item]
            kl = m * np.log(m / rho) + (1 - m) * np.log((1 - m) / (1 - rho))
            elbo = (obs.correct * np.log(g) + obs.wrong * np.log1p(-g) + eta_bar * delta).sum() - kl.sum()
            trace.append(float(elbo) + self._log_param_prior())
            if self._converged(trace):
                self.converged_ = True
                break
            n1 = np.bincount(obs.item, weights=eta_bar, minlength=n_items)
            r1 = np.bincount(obs.item, weights=obs.correct * eta_bar, minlength=n_items)
            n = np.bincount(obs.item, minlength=n_items).astype(float)
            r = np.bincount(obs.item, weights=obs.correct, minlength=n_items)
            self._slip_guess(n1, r1, n - n1, r - r1)
            rho = self.attribute_rate_ = np.clip(m.mean(0), _MF_EPS, 1 - _MF_EPS)
        self.loglik_trace_ = trace

    def _mf_posterior(self, responses: np.ndarray) -> np.ndarray:
        """Variational m for new students: coordinate ascent to convergence with parameters fixed."""
        m = np.tile(self.attribute_rate_, (responses.shape[0], 1))
        obs = _Observations.build(responses, self.q_)
        delta = self._mf_delta(obs)
        for _ in range(self.mean_field_max_sweeps):
            if self._mf_sweep(m, obs, delta) < 1e-5:
                break
        return m

    # --- public API ----------------------------------------------------------------------
    def fit(self, responses: np.ndarray, q: np.ndarray) -> Self:
        """EM from slip = ``init_slip``, guess = ``init_guess`` and a uniform profile prior."""
        self._q = q = check_q(q)
        responses = check_responses(responses, n_items=q.shape[0])
        self.slip_ = np.full(q.shape[0], self.init_slip)
        self.guess_ = np.full(q.shape[0], self.init_guess)
        self.converged_ = False
        exact = self.method == "exact" or (self.method == "auto" and q.shape[1] <= self.max_exact_concepts)
        self.method_ = "exact" if exact else "mean-field"
        (self._fit_exact if exact else self._fit_mean_field)(responses)
        return self

    def _posterior(self, responses: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mastery, P(η_i = 1 | x) for the items ``idx``) by whichever path was fitted."""
        responses = self._new_responses(responses)
        if self.method_ == "exact":
            _, _, w, mastery = self._class_estep(responses, self.class_prior_)
            return mastery, w[:, idx]
        m = self._mf_posterior(responses)
        return m, np.exp(np.log(m) @ self.q_[idx].T)

    def mastery(self, responses: np.ndarray) -> np.ndarray:
        """Posterior P(α_k = 1 | observed responses) (mean-field: the variational m_k)."""
        return self._posterior(responses, np.arange(0))[0]

    def predict_proba(self, responses: np.ndarray, items: np.ndarray | None = None) -> np.ndarray:
        """Σ_class P(class | x) P(correct | class) = P(η=1|x)(1 − s) + P(η=0|x) g."""
        idx = select_items(items, self.q_.shape[0])
        w = self._posterior(responses, idx)[1]
        return w * (1 - self.slip_[idx]) + (1 - w) * self.guess_[idx]
