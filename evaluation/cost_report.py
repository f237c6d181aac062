"""The files of ``fedcd bench cost``: results.json, report.md and the cost–AUC curve (cost_auc.png)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from evaluation.cost import AUC_TOLERANCE, CostBenchResult, ModeRow  # noqa: E402

__all__ = ["write_cost_report"]


def _label(row: ModeRow) -> str:
    return row.mode if row.threshold is None else f"selective {row.threshold:g}"


def _plot(result: CostBenchResult, folder: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    selective = [r for r in result.rows if r.mode == "selective"]
    ax.plot([r.cost_usd_per_student * 1000 for r in selective], [r.auc for r in selective], "o-", label="selective")
    for r in selective:
        ax.annotate(f"{r.threshold:g}", (r.cost_usd_per_student * 1000, r.auc), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    base = result.baseline
    ax.plot([base.cost_usd_per_student * 1000], [base.auc], "s", color="black", label="all")
    ax.axhline(base.auc - AUC_TOLERANCE, color="grey", linestyle=":", linewidth=1, label=f"all − {AUC_TOLERANCE:g} AUC")
    ax.set_xlabel("estimated cost per student (US$ / 1000 students), SIMULATED hosted entities")
    ax.set_ylabel("held-out AUC (test students)")
    ax.set_title(f"{result.dataset}: cost–AUC of selective federation (threshold labels)")
    ax.legend(fontsize=8)
    path = folder / "cost_auc.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _markdown(result: CostBenchResult, command: str) -> str:
    base, best = result.baseline, result.recommended()
    embedded = [e["name"] for e in result.entities if e["tier"] == 0 and e["name"] != "local-fed"]
    lines = [
        f"# fedcd bench cost: {result.dataset}" + (" (with the embedded LLMs)" if embedded else ""),
        "",
        f"Reproduce: `{command}`",
        "",
        f"Held-out protocol, split {result.split['train']} train / {result.split['validation']} validation / "
        f"{result.split['test']} test students; {result.seconds:.0f} s. Noise: {result.noise['mechanism']} "
        f"ε = {result.noise['epsilon']} per entity answer, Δ = {result.noise['sensitivity']}; calibration "
        f"`{result.calibration_method}` fitted on the validation split with every entity answering.",
        "",
        "**Entities.** Tier 0: `local-fed`, trained federatedly on the train split (free)"
        + ("; the embedded LLMs " + ", ".join(f"`{n}`" for n in embedded) + " (real CPU inference, free)" if embedded
           else "") + ". Tier 1: the SIMULATED hosted "
        "family (`providers/simulated.py`, not LLMs), each priced as the hosted model it stands in for, with ESTIMATED "
        "token counts (`providers/tokens.py`, ~4 characters per token of the real prompt): the dollar figures estimate "
        "what those models would cost, they are not bills.",
        "",
        "| entity | tier | stands for | $ / M input | $ / M output |",
        "|---|---|---|---|---|",
    ]
    for e in result.entities:
        lines.append(f"| `{e['name']}` | {e['tier']} | {e.get('stands_for') or '—'} | "
                     f"{e.get('input_usd_per_mtok', 0):g} | {e.get('output_usd_per_mtok', 0):g} |")
    lines += [
        "",
        "Cost and calls are averaged over every diagnosed student (validation and test); AUC is on the test students' "
        "held-out responses; the AUC loss against `all` has a 95 % paired-bootstrap interval over test students "
        f"({result.to_json()['bootstrap_resamples']} resamples). A paid call is one asked of a tier ≥ 1 entity.",
        "",
        "| mode | AUC | AUC loss vs all [95 % CI] | $ / 1000 students | paid calls / student | paid-call cut | calls / student "
        "| ε / student | latency p50 / p95 ms | escalated | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        lines.append(
            f"| {_label(r)} | {r.auc:.4f} | {r.auc_loss:+.4f} [{r.auc_loss_low:+.4f}, {r.auc_loss_high:+.4f}] | "
            f"{r.cost_usd_per_student * 1000:.3f} | "
            f"{r.paid_calls_per_student:.2f} | {result.paid_call_cut(r):.1%} | {r.calls_per_student:.2f} | "
            f"{r.epsilon_per_student:.1f} | {r.latency_ms_p50:.0f} / {r.latency_ms_p95:.0f} | "
            f"{r.escalated_share:.1%} | {r.failed} |"
        )
    lines += ["", "![cost–AUC](cost_auc.png)", ""]
    if best is None:
        lines.append(f"**No selective threshold stays within {AUC_TOLERANCE:g} AUC of `all`** on this dataset.")
    else:
        lines.append(
            f"**Largest paid-call cut within {AUC_TOLERANCE:g} AUC of `all`: threshold {best.threshold:g}** — paid calls "
            f"{result.paid_call_cut(best):.1%} fewer ({best.paid_calls_per_student:.2f} vs "
            f"{base.paid_calls_per_student:.2f} per student), cost ${best.cost_usd_per_student * 1000:.3f} vs "
            f"${base.cost_usd_per_student * 1000:.3f} per 1000 students, AUC {best.auc:.4f} vs {base.auc:.4f}."
        )
    cache = result.cache
    lines += [
        "",
        f"**Response cache.** Each of the dataset's {cache['students']} students (all responses) asked once through "
        f"the in-process response cache in front of each hosted stand-in: hit rate {cache['hit_rate']:.1%} "
        "(prompts identical to an earlier student's). A hit is billed nothing but privatized afresh and charged ε "
        "like a call (docs/privacy.md).",
        "",
        "| entity | lookups | hits | hit rate | $ with the cache |",
        "|---|---|---|---|---|",
    ]
    for name, c in cache["entities"].items():
        lines.append(f"| `{name}` | {c['lookups']} | {c['hits']} | {c['hit_rate']:.1%} | {c['cost_usd_with_cache']:.4f} |")
    return "\n".join(lines) + "\n"


def write_cost_report(result: CostBenchResult, folder: str | Path, *, command: str) -> list[Path]:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    data = {**result.to_json(), "command": command}
    json_path = out / "results.json"
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path = out / "report.md"
    md_path.write_text(_markdown(result, command), encoding="utf-8")
    return [json_path, md_path, _plot(result, out)]
