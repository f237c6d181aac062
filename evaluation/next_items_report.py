"""``fedcd bench next-items``'s report: results.json, report.md and next_items.png (AUC and mean interval width
against the number of items asked, per policy), one folder per dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from diagnosis.next_items import SelectionRule  # noqa: E402
from evaluation.next_items import NextItemsRun, items_to_width  # noqa: E402

__all__ = ["targets", "write_next_items_report"]

_COMPARE_K = 10  # the comparison point: random order after 10 items
_ADAPTIVE_WITHIN = 7  # … reached by adaptive selection within this many
_AUC_MARGIN = 0.01
_LATENCY_BANK = 16_804  # ASSIST0910's bank: where the latency target (p50 ≤ 20 ms) is set


def targets(run: NextItemsRun) -> dict[str, Any]:
    """The issue's two curve targets, met or missed and by how much."""
    random_width = run.width["random"][_COMPARE_K - 1]
    reach = items_to_width(run, random_width)
    first = reach["adaptive"]["mean_curve_k"]
    auc_gap = run.auc["adaptive"][_COMPARE_K - 1] - run.auc["random"][_COMPARE_K - 1]
    return {
        "random_width_at_10": random_width,
        "adaptive_items_to_that_width": first,
        "width_target_met": first is not None and first <= _ADAPTIVE_WITHIN,
        "auc_adaptive_minus_random_at_10": auc_gap,
        "auc_target_met": auc_gap >= _AUC_MARGIN,
        "items_to_width": reach,
    }


def _plot(run: NextItemsRun, title: str, path: Path) -> None:
    ks = list(range(1, run.k_max + 1))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for policy in run.auc:
        left.plot(ks, run.auc[policy], marker="o", markersize=3, label=policy)
        right.plot(ks, run.width[policy], marker="o", markersize=3, label=policy)
    left.set(xlabel="items asked (k)", ylabel="held-out AUC", title=f"{title}: held-out AUC")
    right.set(xlabel="items asked (k)", ylabel="mean 90 % interval width", title=f"{title}: interval width")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_next_items_report(run: NextItemsRun, folder: str | Path, *, dataset: str, facts: dict[str, Any],
                            latency: dict[str, float] | None, command: str) -> list[Path]:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    met = targets(run)
    data = {"dataset": dataset, "facts": facts, "k_max": run.k_max, "auc": run.auc, "width": run.width,
            "targets": met, "latency": latency, "seconds": run.seconds, "command": command}
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    _plot(run, dataset, out / "next_items.png")
    policies = list(run.auc)
    lines = [
        f"# Adaptive item selection: {dataset}", "",
        f"Reproduce: `{command}`", "",
        f"Test students simulated: {facts['test_students']} (of {facts['test_split']} in the test split"
        + (f"; subsampled, seed {facts['seed']}" if facts["test_students"] < facts["test_split"] else "") + "); "
        f"train students: {facts['train_students']}; local-fed: {facts['model']} ({facts['kind']}, "
        f"{facts['rounds']} rounds); bank: {facts['bank_items']} items, {facts['concepts']} concepts. "
        "At each step the next item is chosen among the items the student actually answered (minus a held-out "
        "fifth), so every answer is real; AUC pools every test student's held-out responses.", "",
        f"Policies: `adaptive` ranks by the service's default criterion (`{SelectionRule().criterion}`), "
        "randomesque off; `adaptive-r<n>` the same with the API's default randomesque draw among the n best; "
        "`adaptive-<criterion>` another criterion (docs/next-items.md), randomesque off; `random` a seeded random "
        "order; `fixed` the bank's order.", "",
        "![AUC and interval width against items asked](next_items.png)", "",
        "| k | " + " | ".join(f"AUC {p}" for p in policies) + " | " + " | ".join(f"width {p}" for p in policies) + " |",
        "|---" * (1 + 2 * len(policies)) + "|",
    ]
    for k in range(run.k_max):
        lines.append(f"| {k + 1} | " + " | ".join(f"{run.auc[p][k]:.4f}" for p in policies) + " | "
                     + " | ".join(f"{run.width[p][k]:.4f}" for p in policies) + " |")
    first = met["adaptive_items_to_that_width"]
    lines += [
        "", "## Targets", "",
        f"- Width: random order reaches a mean width of {met['random_width_at_10']:.4f} after {_COMPARE_K} items; "
        f"adaptive selection reaches it after {first if first is not None else f'more than {run.k_max}'} items "
        f"(target ≤ {_ADAPTIVE_WITHIN}): **{'met' if met['width_target_met'] else 'missed'}**.",
        f"- AUC after {_COMPARE_K} items: adaptive − random = {met['auc_adaptive_minus_random_at_10']:+.4f} "
        f"(target ≥ +{_AUC_MARGIN}): **{'met' if met['auc_target_met'] else 'missed'}**.", "",
        f"Items to reach a mean width of {met['random_width_at_10']:.4f} (per student: the median first k among "
        f"students who reach it within {run.k_max}, and their share):", "",
        "| policy | mean curve k | median student k | share reaching |", "|---|---|---|---|",
    ]
    for policy, row in met["items_to_width"].items():
        lines.append(f"| {policy} | {row['mean_curve_k'] or '—'} | {row['median_student_k'] or '—'} | "
                     f"{row['share_reaching']:.2f} |")
    if latency is not None:
        lines += ["", "## Selection latency", "",
                  f"One selection as the service computes it (the student's posterior from their pool answers, "
                  f"{int(latency['count'])} items ranked for every concept, randomesque {int(latency['randomesque'])}, "
                  f"every concept's interval) against all {int(latency['bank_items'])} bank items, "
                  f"{int(latency['calls'])} calls, in-process, one thread, bank parameters already read (the service "
                  "keeps them per model and Q-matrix version; reading them took "
                  f"{facts.get('bank_seconds', float('nan')):.2f} s): "
                  f"p50 {latency['p50_ms']:.1f} ms, p90 {latency['p90_ms']:.1f} ms, max {latency['max_ms']:.1f} ms "
                  + (f"(target at ASSIST0910's bank, p50 ≤ 20 ms: **{'met' if latency['p50_ms'] <= 20 else 'missed'}**). "
                     if latency["bank_items"] >= _LATENCY_BANK else "(the latency target is set at ASSIST0910's bank). ")
                  + 
                  f"Load average at the start: {facts.get('load_average', 'n/a')}."]
    lines += ["", f"Run time of the simulation: {run.seconds:.0f} s.", ""]
    (out / "report.md").write_text("\n".join(lines))
    return [out / "results.json", out / "report.md", out / "next_items.png"]
