"""The coverage report (issue 33): nominal 90 % intervals of local-fed vs how often they hold the simulated truth.

    python -m evaluation.coverage --out docs/results/coverage/README.md [--students 200] [--seed 0]

Generators and truth are stated in :mod:`evaluation.coverage_sim`. Configurations (local-fed's interval, no privacy
noise, no other entity weighed: that is what the aggregator serves when nothing else was measured):

* ``trained``: the generator's own parameters (a model trained perfectly on the platform's history: an upper bound
  on what training can give, not a trained run);
* ``cold start``: local-fed's untrained evidence model (providers.local_fed.untrained_model), as a fresh server
  answers a new Q-matrix, with the aggregator's unknown-skill floor (diagnosis.posterior.spread).

and, for the first ``--served`` students, the same diagnosed as served (``…, served``: local-fed's answer and its own
uncertainty privatized by the default mechanism, anchored_piecewise ε 32, combined by the posterior aggregator;
:mod:`evaluation.coverage_served`), where ``calibrated, served`` adds two simulated entities whose τ a calibration
measured (their stated error model is in that module), and ``stacked, served`` diagnoses every student under the
default calibration method, a stack fitted on SIMULATED validation students with mixed amounts of evidence, with
the intervals its measured error gives (:mod:`evaluation.coverage_stacked`). Everything is simulated and labelled so.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from diagnosis.posterior import beta_floor_width
from evaluation.coverage_served import served_intervals
from evaluation.coverage_stacked import fit_stacks, stacked_rows
from evaluation.coverage_sim import (
    Simulated,
    binned_calibration,
    coverage,
    generator_model,
    simulate_dina,
    simulate_model,
)
from federated.hocdm import HigherOrderCDM
from providers.local_fed import untrained_model
from qmatrix import QMatrix
from qmatrix.datasets import load_assist0910, load_frcsub

__all__ = ["COUNTS", "coverage_rows", "main"]

COUNTS = (5, 10, 20, 50, 100)
LEVEL = 0.9


def _intervals(model: HigherOrderCDM, feats: torch.Tensor, scores: torch.Tensor, floor: bool
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with torch.no_grad():
        m, lo, hi = (t.double().numpy() for t in model.mastery_interval(feats, scores, torch.ones_like(scores).bool()))
    if floor:  # the aggregator's unknown-skill floor, per (student, concept), on the answers behind each
        k = len(model.concepts)
        counts = feats[..., :k].sum(1).numpy()
        for b, j in zip(*np.nonzero(counts)):
            width = beta_floor_width(int(counts[b, j]), LEVEL, float(m[b, j]))
            if hi[b, j] - lo[b, j] < width:
                centre = float(np.clip(m[b, j], width / 2, 1 - width / 2))
                lo[b, j], hi[b, j] = centre - width / 2, centre + width / 2
    return m, lo, hi


def coverage_rows(q: QMatrix, *, students: int, seed: int, served: int = 0, counts: Sequence[int] = COUNTS
                  ) -> list[dict]:
    """One row per (generator, configuration, responses): coverage (all answered concepts, the worst concept),
    mean width; for DINA the ECE of mastery read as P(attribute held). ``served``: how many of the students are also
    diagnosed through the served path (:mod:`evaluation.coverage_served`; slower: one aggregation per student)."""
    truth_model = generator_model(q, seed)
    cold = untrained_model(tuple(q.concepts)).model
    stacks = fit_stacks(q, truth_model, students=2 * students, counts=counts, seed=seed + 500) if served else {}
    rows = []
    for n in counts:
        sim = simulate_model(q, truth_model, n_students=students, n_responses=n, seed=seed + n)
        dina = simulate_dina(q, truth_model, n_students=students, n_responses=n, seed=seed + 1000 + n)
        for config, model, floor in (("trained", truth_model, False), ("cold start", cold, True)):
            feats = sim.feats if model is truth_model else torch.from_numpy(model.item_table(q))[
                _bank_index(sim.feats)]
            m, lo, hi = _intervals(model, feats, sim.scores, floor)
            overall, worst = coverage(sim.truth, lo, hi, sim.answered)
            width = float((hi - lo)[sim.answered].mean())
            rows.append({"generator": "model", "config": config, "responses": n, "coverage": overall,
                         "worst": worst, "width": width})
            if model is truth_model:  # each stacking calibration's measured (or DP-released) intervals
                rows += stacked_rows(stacks, truth_model, sim, responses=n, seed=seed + n)
            if served:  # the same students, diagnosed as a request is: privatized, through the aggregator
                variants = [(f"{config}, served", False)] + ([("calibrated, served", True)] if model is cold else [])
                for label, llms in variants:
                    few = _first(sim, served)
                    lo_s, hi_s = served_intervals(model, feats[:served], few, measured=model is truth_model,
                                                  with_llms=llms, seed=seed + n)
                    overall, worst = coverage(few.truth, lo_s, hi_s, few.answered)
                    rows.append({"generator": "model", "config": label, "responses": n, "coverage": overall,
                                 "worst": worst, "width": float(np.nanmean(hi_s - lo_s))})
            feats_d = dina.feats if model is truth_model else torch.from_numpy(model.item_table(q))[
                _bank_index(dina.feats)]
            md, _, _ = _intervals(model, feats_d, dina.scores, False)
            ece, _ = binned_calibration(md[dina.answered], dina.truth[dina.answered])
            rows.append({"generator": "dina", "config": config, "responses": n, "ece": ece})
    return rows


def _first(sim: Simulated, n: int) -> Simulated:
    return Simulated(sim.feats[:n], sim.scores[:n], sim.truth[:n], sim.answered[:n])


def _bank_index(feats: torch.Tensor) -> torch.Tensor:
    """The 0-based bank row of each simulated response (the last feature is the 1-based bank index)."""
    return (feats[..., -1].round().long() - 1).clamp(min=0)


def _markdown(results: dict[str, list[dict]], command: str) -> str:
    out = ["# Coverage of local-fed's 90 % intervals (simulated students)", "",
           f"Command: `{command}` (every number below comes from it; seeded).", "",
           "SIMULATED: students drawn from stated generators (evaluation/coverage_sim.py). `model`: local-fed's own "
           "family with drawn parameters, truth σ(θ_k); `dina`: DINA (slip 0.1, guess 0.2), binary truth, so the "
           "mastery is checked as a probability of mastery (ECE against the true attributes), not by coverage. "
           "`trained` uses the generator's own parameters (an upper bound on training); `cold start` is the "
           "untrained evidence model with the aggregator's unknown-skill floor, both without privacy noise; `…, served` "
           "rows diagnose the first students as a request is (privatized by anchored_piecewise at ε 32, aggregated; "
           "`calibrated` adds two simulated entities with measured τ, errors independent N(0, 0.2²); `stacked` is a "
           "stacking calibration (the default method), a stack of local-fed and those two fitted on twice as many SIMULATED validation "
           "students with mixed response counts, its intervals from its measured error and each student's answer "
           "counts; `stacked, served, DP-released`: the same validation students released as a real cohort is by "
           "default, with differential privacy at ε 4 per student, the stack, a DP guard (which may serve the plain mean) and its error each getting a share). "
           "Target: 85–95 %.", ""]
    for name, rows in results.items():
        out += [f"## {name}", "", "| generator | configuration | responses | coverage | worst concept | mean width |"
                " DINA ECE |", "|---|---|---|---|---|---|---|"]
        for r in rows:
            if r["generator"] == "model" and r["coverage"] != r["coverage"]:  # NaN: the calibration serves none
                out.append(f"| model | {r['config']} | {r['responses']} | no interval | | | |")
            elif r["generator"] == "model":
                out.append(f"| model | {r['config']} | {r['responses']} | {r['coverage']:.3f} | {r['worst']:.3f} | "
                           f"{r['width']:.3f} | |")
            else:
                out.append(f"| dina | {r['config']} | {r['responses']} | | | | {r['ece']:.3f} |")
        out.append("")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/coverage/README.md"))
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--served", type=int, default=60, help="students also diagnosed through the served path")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--datasets", nargs="+", default=["frcsub", "assist0910"])
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    loaders = {"frcsub": lambda: load_frcsub(args.data_dir).qmatrix,
               "assist0910": lambda: load_assist0910(args.data_dir, max_students=1).qmatrix}
    results = {f"{name} Q-matrix": coverage_rows(loaders[name](), students=args.students, seed=args.seed,
                                                 served=args.served)
               for name in args.datasets}
    command = "python -m evaluation.coverage " + " ".join(argv if argv is not None else [])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_markdown(results, command.strip()))
    print(args.out.read_text())


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
