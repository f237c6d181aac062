"""SIMULATED students on a real Q-matrix, with known mastery and the oracle that knows the model.

Two generators:

* ``dina`` — each concept mastered independently with probability ½; slip 0.1, guess 0.2
  (``qmatrix.simulate_dina``). True mastery is binary.
* ``irt`` — a compensatory multidimensional model: θ ~ N(0, Σ) with unit variances and
  correlation 0.5 between concepts; P(correct_i) = sigmoid(1.7·(mean_{k∈Q_i} θ_k − b_i)),
  b_i ~ N(0, 0.7²). True mastery is Φ(θ_k), a number in (0, 1).

The oracle is the posterior mean of the true mastery given a student's responses under
the true generating parameters — the best any method can do on that Q-matrix. Items that
share one concept set cannot separate their concepts, so the oracle can sit far below 1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.special import expit
from scipy.stats import norm

from qmatrix import Dataset, QMatrix, Response, StudentResponses, simulate_dina

__all__ = ["MAX_ORACLE_CONCEPTS", "SimulatedStudents", "dataset_and_simulation", "dina_oracle", "simulate"]

MAX_ORACLE_CONCEPTS = 16
DINA_SLIP, DINA_GUESS = 0.1, 0.2
IRT_CORRELATION, IRT_SCALE, IRT_DIFFICULTY_SD = 0.5, 1.7, 0.7


@dataclass
class SimulatedStudents:
    dataset: Dataset
    generator: str
    oracle: dict[str, dict[str, float]]  # student -> concept -> posterior mean of true mastery


def dataset_and_simulation(item: Dataset | SimulatedStudents) -> tuple[Dataset, SimulatedStudents | None]:
    """The dataset of ``item``, and the simulation behind it when it was simulated (its oracle is then known)."""
    if isinstance(item, SimulatedStudents):
        return item.dataset, item
    return item, None


def dina_oracle(q: QMatrix, responses: np.ndarray, *, slip: float, guess: float, rate: float = 0.5) -> np.ndarray:
    """P(α_k = 1 | x) for each student (rows of ``responses``, 0/1), by enumerating all 2^K profiles."""
    k = len(q.concepts)
    if k > MAX_ORACLE_CONCEPTS:
        raise ValueError(f"the oracle enumerates 2^K profiles; K = {k} > {MAX_ORACLE_CONCEPTS}")
    profiles = np.array(list(itertools.product((0, 1), repeat=k)), dtype=bool)  # (P, K)
    qm = q.matrix.astype(bool)
    eta = ~((~profiles)[:, None, :] & qm[None, :, :]).any(axis=2)  # (P, items)
    p1 = np.where(eta, 1 - slip, guess)
    loglik = responses @ np.log(p1).T + (1 - responses) @ np.log(1 - p1).T  # (students, P)
    logprior = profiles.sum(axis=1) * np.log(rate) + (k - profiles.sum(axis=1)) * np.log(1 - rate)
    logpost = loglik + logprior
    post = np.exp(logpost - logpost.max(axis=1, keepdims=True))
    post /= post.sum(axis=1, keepdims=True)
    return post @ profiles.astype(float)


def _irt(q: QMatrix, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    k = len(q.concepts)
    cov = np.full((k, k), IRT_CORRELATION) + (1 - IRT_CORRELATION) * np.eye(k)
    theta = rng.multivariate_normal(np.zeros(k), cov, size=n)
    b = rng.normal(0, IRT_DIFFICULTY_SD, size=len(q.items))
    qm = q.matrix.astype(float)
    weights = qm / qm.sum(axis=1, keepdims=True)
    x = (rng.random((n, len(q.items))) < expit(IRT_SCALE * (theta @ weights.T - b))).astype(float)
    return theta, b, x


def _irt_oracle(q: QMatrix, x: np.ndarray, b: np.ndarray, rng: np.random.Generator, draws: int = 4000) -> np.ndarray:
    """Posterior mean of Φ(θ_k) by self-normalised importance sampling from the prior."""
    k = len(q.concepts)
    cov = np.full((k, k), IRT_CORRELATION) + (1 - IRT_CORRELATION) * np.eye(k)
    theta = rng.multivariate_normal(np.zeros(k), cov, size=draws)
    qm = q.matrix.astype(float)
    p = np.clip(expit(IRT_SCALE * (theta @ (qm / qm.sum(axis=1, keepdims=True)).T - b)), 1e-12, 1 - 1e-12)
    loglik = x @ np.log(p).T + (1 - x) @ np.log(1 - p).T  # (students, draws)
    w = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    return w @ norm.cdf(theta)


def simulate(q: QMatrix, *, generator: str, n_students: int, seed: int) -> SimulatedStudents:
    if len(q.concepts) > MAX_ORACLE_CONCEPTS:
        raise ValueError(
            f"the simulated protocol needs a Q-matrix with at most {MAX_ORACLE_CONCEPTS} concepts "
            f"(its oracle enumerates profiles); '{q.id}' has {len(q.concepts)}"
        )
    rng = np.random.default_rng(seed)
    if generator == "dina":
        data = simulate_dina(q, n_students=n_students, slip=DINA_SLIP, guess=DINA_GUESS, seed=seed, student_prefix="dina")
        x = np.array([[r.score for r in s.responses] for s in data.students])
        post = dina_oracle(q, x, slip=DINA_SLIP, guess=DINA_GUESS)
    elif generator == "irt":
        theta, b, x = _irt(q, n_students, rng)
        width = len(str(n_students))
        students = [
            StudentResponses(
                student_id=f"irt{s + 1:0{width}d}",
                responses=tuple(Response(item_id=item.id, correct=bool(x[s, i])) for i, item in enumerate(q.items)),
            )
            for s in range(n_students)
        ]
        truth = {st.student_id: {c: float(norm.cdf(theta[s, j])) for j, c in enumerate(q.concepts)} for s, st in enumerate(students)}
        data = Dataset(name=f"simulated-irt({q.id})", qmatrix=q, students=students, simulated=True, true_mastery=truth)
        post = _irt_oracle(q, x, b, rng)
    else:
        raise ValueError(f"unknown generator {generator!r} (use dina or irt)")
    oracle = {s.student_id: {c: float(post[i, j]) for j, c in enumerate(q.concepts)} for i, s in enumerate(data.students)}
    return SimulatedStudents(dataset=data, generator=generator, oracle=oracle)
