"""Adaptive item selection measured on real responses (issue 34, part 4): ``fedcd bench next-items``.

``local-fed`` is trained on the train split only (:func:`evaluation.served.train_local_fed`); each test student's
responses are cut into a pool and a held-out fifth (:func:`qmatrix.splits.split_holdout`). At every step the next item
is chosen **among the pool** — items this student actually answered, so the answer is known — by each policy:

* ``adaptive``: :func:`diagnosis.next_items.select` with the service's default criterion (randomesque off),
  targeting the concepts the student's responses assess;
* ``adaptive-r<n>``: the same with the API's default randomesque exposure control (a draw among the n best);
* ``adaptive-<criterion>``: another criterion of :data:`diagnosis.next_items.CRITERIA` (randomesque off), to compare;
* ``random``: a seeded random order of the pool;
* ``fixed``: the bank's order (the Q-matrix's item order).

After k = 1…``k_max`` items: the held-out AUC (every test student's held-out responses pooled, predicted by the
posterior predictive of the serving model after those k answers) and the mean 90 % interval width (mastery scale)
over the concepts the student's responses assess. A student whose pool is used up before k keeps their last state.
The latency part times one selection (posterior + ranking, the service's work once the bank is read) against the
whole bank.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diagnosis.next_items import CRITERIA, Posterior, SelectionRule, concept_states, posterior, predict, select
from evaluation.metrics import auc
from providers.item_response import items_to_forecast
from providers.serving_bank import ServingBank, serving_bank
from qmatrix import QMatrix, Response, StudentResponses

__all__ = ["NextItemsRun", "StudentCase", "bank_for", "bench_policies", "items_to_width", "latency", "simulate",
           "student_cases"]

POLICIES = ("adaptive", "random", "fixed")


def bench_policies(randomesque: int) -> tuple[str, ...]:
    """What ``fedcd bench next-items`` compares: the default criterion without and with the API's ``randomesque``,
    every other criterion, random and fixed order."""
    others = tuple(f"adaptive-{c}" for c in CRITERIA if c != SelectionRule().criterion)
    return ("adaptive", f"adaptive-r{randomesque}", *others, "random", "fixed")


@dataclass(frozen=True)
class StudentCase:
    """One test student: the pool (bank positions, scores), the held-out (positions, scores), the concepts assessed."""

    student_id: str
    pool: np.ndarray
    pool_scores: np.ndarray
    held: np.ndarray
    held_scores: np.ndarray
    concepts: tuple[str, ...]


@dataclass
class NextItemsRun:
    """Per policy and k (1-based index k−1): pooled held-out AUC and mean interval width."""

    k_max: int
    auc: dict[str, list[float]] = field(default_factory=dict)
    width: dict[str, list[float]] = field(default_factory=dict)
    widths_by_student: dict[str, np.ndarray] = field(default_factory=dict)  # (students, k_max)
    seconds: float = 0.0


def bank_for(q: QMatrix, loaded: Any, untrained: Any) -> ServingBank:
    return serving_bank(loaded, items_to_forecast(q), untrained=untrained)


def student_cases(bank: ServingBank, observed: Sequence[Sequence[Response]], held: Sequence[Sequence[Response]],
                  students: Sequence[StudentResponses]) -> list[StudentCase]:
    """The test students with at least one usable pool item and one usable held-out response."""
    cases = []
    for s, obs, hid in zip(students, observed, held, strict=True):
        pool = [(int(p), r.score) for r in obs for p in bank.positions([r.item_id]) if bank.usable[p]]
        out = [(int(p), r.score) for r in hid for p in bank.positions([r.item_id]) if bank.usable[p]]
        if not pool or not out:
            continue
        concepts = sorted({c for p, _ in pool + out for c in bank.item_concepts[p]})
        cases.append(StudentCase(s.student_id, np.asarray([p for p, _ in pool]), np.asarray([y for _, y in pool]),
                                 np.asarray([p for p, _ in out]), np.asarray([y for _, y in out]), tuple(concepts)))
    return cases


def _mean_width(bank: ServingBank, post: Posterior, concepts: Sequence[str]) -> float:
    states = {s.concept: s.width for s in concept_states(bank, post)}
    return float(np.mean([states[c] for c in concepts]))


def _order(policy: str, case: StudentCase, seed: int) -> list[int] | None:
    """A non-adaptive policy's order of the pool's indices (None: adaptive)."""
    if policy == "random":
        rng = np.random.default_rng([seed, zlib.crc32(case.student_id.encode())])
        return rng.permutation(len(case.pool)).tolist()
    if policy == "fixed":
        return np.argsort(case.pool, kind="stable").tolist()
    return None


def _rule(policy: str) -> SelectionRule:
    """``adaptive``: the default rule; ``adaptive-r<n>``: randomesque n; ``adaptive-<criterion>``: that criterion."""
    name = policy.removeprefix("adaptive").removeprefix("-")
    if name in CRITERIA:
        return SelectionRule(criterion=name)  # type: ignore[arg-type]  (checked: one of CRITERIA)
    return SelectionRule(randomesque=int(name.removeprefix("r")) if name else 1)


def simulate(bank: ServingBank, cases: Sequence[StudentCase], *, k_max: int = 20, seed: int = 0,
             policies: Sequence[str] = POLICIES, progress: Callable[[int], None] | None = None) -> NextItemsRun:
    """Every policy over every case for k = 1…k_max (module docstring)."""
    started = time.perf_counter()
    run = NextItemsRun(k_max=k_max)
    for policy in policies:
        probs = np.zeros((k_max, sum(len(c.held) for c in cases)))
        widths = np.zeros((len(cases), k_max))
        offset = 0
        for n, case in enumerate(cases):
            order = _order(policy, case, seed)
            rng = np.random.default_rng([seed, zlib.crc32(case.student_id.encode()), 1])
            asked: list[int] = []  # indices into the pool
            post: Posterior | None = None
            for k in range(k_max):
                if len(asked) < len(case.pool):
                    if order is not None:
                        asked.append(order[len(asked)])
                    else:
                        current = post or posterior(bank, [], [])
                        left = np.setdiff1d(np.arange(len(case.pool)), asked)
                        chosen = select(bank, current, candidates=case.pool[left], targets=case.concepts, count=1,
                                        rule=_rule(policy), rng=rng)
                        j = chosen.picks[0].position if chosen.picks else int(case.pool[left[0]])
                        asked.append(int(left[np.flatnonzero(case.pool[left] == j)[0]]))
                    post = posterior(bank, case.pool[asked].tolist(), case.pool_scores[asked].tolist())
                assert post is not None
                probs[k, offset:offset + len(case.held)] = predict(bank, post, case.held)
                widths[n, k] = _mean_width(bank, post, case.concepts)
            offset += len(case.held)
            if progress is not None:
                progress(1)
        y = np.concatenate([c.held_scores for c in cases])
        run.auc[policy] = [auc(probs[k], y) for k in range(k_max)]
        run.width[policy] = widths.mean(axis=0).tolist()
        run.widths_by_student[policy] = widths
    run.seconds = time.perf_counter() - started
    return run


def items_to_width(run: NextItemsRun, width: float) -> dict[str, dict[str, float | None]]:
    """Per policy: the first k whose mean width is ≤ ``width`` (None: not within k_max), and the median over students
    of each one's first such k among those who reach it, with the share who do."""
    out: dict[str, dict[str, float | None]] = {}
    for policy, curve in run.width.items():
        first = next((k + 1 for k, w in enumerate(curve) if w <= width), None)
        per = run.widths_by_student[policy] <= width
        reached = per.any(axis=1)
        ks = per.argmax(axis=1)[reached] + 1
        out[policy] = {"mean_curve_k": first, "median_student_k": float(np.median(ks)) if ks.size else None,
                       "share_reaching": float(reached.mean()) if reached.size else 0.0}
    return out


def latency(bank: ServingBank, cases: Sequence[StudentCase], *, count: int, randomesque: int, repeats: int,
            seed: int = 0) -> dict[str, float]:
    """Milliseconds of one selection as the service computes it, against the whole bank (every item not answered is
    a candidate): the posterior from the student's pool answers, ``count`` items for every concept of the Q-matrix,
    every concept's interval. p50/p90/max over ``repeats`` calls (the cases in turn)."""
    times = []
    rng = np.random.default_rng(seed)
    for n in range(repeats):
        case = cases[n % len(cases)]
        started = time.perf_counter()
        post = posterior(bank, case.pool.tolist(), case.pool_scores.tolist())
        open_items = np.ones(len(bank.item_ids), dtype=bool)
        open_items[case.pool] = False
        select(bank, post, candidates=np.flatnonzero(open_items), targets=bank.concepts, count=count,
               rule=SelectionRule(randomesque=randomesque), rng=rng)
        concept_states(bank, post)
        times.append((time.perf_counter() - started) * 1000)
    ms = np.asarray(times)
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)), "max_ms": float(ms.max()),
            "calls": float(repeats), "bank_items": float(len(bank.item_ids)), "count": float(count),
            "randomesque": float(randomesque)}
