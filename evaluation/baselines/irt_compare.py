"""Held-out AUC of the IRT baseline, its fixed-prior predecessor and a published package's 2PL on one split.

``python -m evaluation.baselines.irt_compare --datasets frcsub,assist0910 --seeds 0,1 --out docs/results/irt-baseline``

The split is the one ``fedcd evaluate --protocol heldout --seed S`` uses: students split 60/20/20 by
:func:`qmatrix.splits.split_students` (seed S, every student), 20 % of each test student's responses hidden
by :func:`qmatrix.splits.split_holdout` (seed S). Item parameters come from the train students only; each
test student's ability is the EAP over the same N(0, 1) Gauss–Hermite grid from their observed responses,
and every row scores the same hidden test responses (``evaluation.heldout`` scores the ``irt`` row the same
way, through :meth:`CDMBaseline.predict_pairs`).

Rows: ``irt`` (:class:`IRT2PL`, empirical item prior: what the harness runs), ``irt-fixed-prior`` (the same
EM with the fixed wide prior the baseline had before), and ``girth-2pl`` — the 2PL of the ``girth`` package
(PyPI, MIT; ``pip install 'fedcd[irt-yardstick]'``; a yardstick only, never a runtime dependency), fitted by
its marginal maximum likelihood (``girth.twopl_mml``) on the same train matrix, abilities by the same EAP.
girth needs every item to have a right and a wrong answer in training and costs O(items × students) per
item per iteration (about half an hour per ASSIST0910 iteration here), so on ASSIST0910 it runs on the
``--girth-items`` most-answered such items: all three rows are then refitted and scored on that subset
(train, observed and hidden responses restricted to those items), next to the full-bank rows of ours.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.baselines.common import response_matrix
from evaluation.baselines.irt import IRT2PL, eap, irt_2pl_prob, normal_quadrature
from evaluation.metrics import auc
from qmatrix import StudentResponses
from qmatrix.catalog import load_dataset
from qmatrix.splits import split_holdout, split_students

__all__ = ["HeldoutMatrices", "compare", "girth_2pl", "heldout_matrices", "main"]

OLD_PRIOR = {"slope_prior_sd": 2.0, "intercept_prior_sd": 5.0}  # the baseline's fixed prior before issue 31


@dataclass(frozen=True)
class HeldoutMatrices:
    """Train responses, test students' observed responses, and their hidden (student, item, score) triples."""

    train: np.ndarray
    q: np.ndarray
    test_observed: np.ndarray
    student: np.ndarray
    item: np.ndarray
    y: np.ndarray

    def restrict(self, items: np.ndarray) -> HeldoutMatrices:
        """The same split on the ``items`` columns only (hidden responses to other items dropped)."""
        keep = np.isin(self.item, items)
        column = np.full(self.train.shape[1], -1)
        column[items] = np.arange(items.size)
        q = self.q[items]
        q = q[:, q.sum(axis=0) > 0]  # the concepts of the kept items only (IRT reads the Q-matrix for mastery alone)
        return HeldoutMatrices(self.train[:, items], q, self.test_observed[:, items],
                               self.student[keep], column[self.item[keep]], self.y[keep])


def heldout_matrices(dataset: str, seed: int, data_dir: str | None) -> HeldoutMatrices:
    """The held-out protocol's split of every student of ``dataset`` at ``seed``, as matrices."""
    data = load_dataset(dataset, data_dir=data_dir, seed=seed)
    q = data.qmatrix
    split = split_students(data.students, seed=seed)
    observed, held = split_holdout(split.test, seed)
    column = {item: i for i, item in enumerate(q.item_ids)}
    test = [StudentResponses(student_id=str(i), responses=tuple(o)) for i, o in enumerate(observed)]
    return HeldoutMatrices(
        train=response_matrix(list(split.train), q), q=q.matrix, test_observed=response_matrix(test, q),
        student=np.array([s for s, h in enumerate(held) for _ in h], dtype=int),
        item=np.array([column[r.item_id] for h in held for r in h], dtype=int),
        y=np.array([r.score for h in held for r in h], dtype=float),
    )


def girth_2pl(train: np.ndarray, *, max_iteration: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` of girth's marginal-ML 2PL on a students x items 0/1 matrix (nan: unanswered)."""
    try:
        from girth import twopl_mml
        from girth.utilities import INVALID_RESPONSE
    except ImportError as exc:  # a yardstick, not a dependency: say how to get it
        raise RuntimeError("the girth yardstick needs `pip install 'fedcd[irt-yardstick]'` (girth==0.8.0)") from exc
    seen = ~np.isnan(train)
    if not np.isin(train[seen], (0.0, 1.0)).all():
        raise ValueError("girth's 2PL takes 0/1 responses only")
    data = np.where(seen, np.nan_to_num(train), INVALID_RESPONSE).astype(int).T  # girth: items x students
    fitted = twopl_mml(data, {"max_iteration": max_iteration})
    return np.asarray(fitted["Discrimination"], dtype=float), np.asarray(fitted["Difficulty"], dtype=float)


def _score(a: np.ndarray, b: np.ndarray, m: HeldoutMatrices, n_nodes: int = 41) -> float:
    nodes, weights = normal_quadrature(n_nodes)
    _, post = eap(m.test_observed, a, b, nodes, weights)
    p = np.einsum("sk,sk->s", post[m.student], irt_2pl_prob(nodes, a, b)[:, m.item].T)
    return auc(p, m.y)


def _rows(m: HeldoutMatrices, *, with_girth: bool, items: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    fits = [("irt", lambda: IRT2PL().fit(m.train, m.q)),
            ("irt-fixed-prior", lambda: IRT2PL(**OLD_PRIOR).fit(m.train, m.q))]
    for name, fit in fits:
        start = time.perf_counter()
        model = fit()
        seconds = time.perf_counter() - start
        out.append({"row": name, "items": items, "auc": _score(model.a_, model.b_, m), "fit_seconds": seconds,
                    "hidden_responses": int(m.y.size)})
    if with_girth:
        start = time.perf_counter()
        a, b = girth_2pl(m.train)
        out.append({"row": "girth-2pl", "items": items, "auc": _score(a, b, m),
                    "fit_seconds": time.perf_counter() - start, "hidden_responses": int(m.y.size)})
    return out


def compare(dataset: str, seed: int, *, data_dir: str | None = None, girth_items: int | None = 200,
            with_girth: bool = True) -> list[dict[str, object]]:
    """Every row on the whole item bank; girth on it too when it can fit every item, else on a subset (see above)."""
    m = heldout_matrices(dataset, seed, data_dir)
    seen = ~np.isnan(m.train)
    answered, right = seen.sum(0), np.nansum(m.train, axis=0)
    fittable = np.flatnonzero((right > 0) & (right < answered))
    girth_on_all = with_girth and fittable.size == m.train.shape[1]
    rows = _rows(m, with_girth=girth_on_all, items=f"all {m.train.shape[1]}")
    if with_girth and not girth_on_all and girth_items:
        top = np.sort(fittable[np.argsort(-answered[fittable], kind="stable")[:girth_items]])
        rows += _rows(m.restrict(top), with_girth=True, items=f"{top.size} most answered")
    for row in rows:
        row.update(dataset=dataset, seed=seed)
    return rows


def _table(rows: list[dict[str, object]]) -> str:
    lines = ["| dataset | seed | items | row | held-out AUC | hidden responses | fit s |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['seed']} | {r['items']} | `{r['row']}` | {r['auc']:.3f} | "
                     f"{r['hidden_responses']} | {r['fit_seconds']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="frcsub,assist0910")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--girth-items", type=int, default=200, help="ASSIST0910-sized banks: girth's item subset")
    parser.add_argument("--no-girth", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json and table.md")
    args = parser.parse_args(argv)
    rows = [row for d in args.datasets.split(",") for s in args.seeds.split(",")
            for row in compare(d.strip(), int(s), data_dir=args.data_dir, girth_items=args.girth_items,
                               with_girth=not args.no_girth)]
    print(_table(rows))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
        (args.out / "table.md").write_text(_table(rows) + "\n")


if __name__ == "__main__":
    main()
