"""The local-fed ablation as files: results.json, report.md (tables, targets) and ablation.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evaluation.ablation import CDMS, AblationResult

__all__ = ["write_ablation_report"]

BEAT_MARGIN = 0.005  # trained local-fed ≥ max(IRT, DINA, NCDM) + this
TRAINING_GAIN = 0.01  # trained − untrained
FEDERATED_GAP = 0.005  # |federated − centralized|
DP_GAP = 0.02  # non-private − DP at ε = 2


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def _comparison(result: AblationResult, row: str, scoring: str, reference: str) -> dict[str, Any] | None:
    return next((c for c in result.comparisons
                 if c["row"] == row and c["scoring"] == scoring and c["reference"] == reference), None)


def _interval(c: dict[str, Any] | None) -> str:
    return "–" if c is None else f"{c['diff']:+.4f} [{c['low']:+.4f}, {c['high']:+.4f}]"


def _targets(result: AblationResult) -> list[str]:
    out = ["## Targets (computed from the rows above)", ""]
    cdm = {name: result.auc_of(name, "own") for name in CDMS}
    known = {k: v for k, v in cdm.items() if v is not None}
    if not known:
        return []
    best = max(known, key=lambda k: known[k])
    for scoring in ("link", "own"):
        trained = result.auc_of("trained", scoring)
        if trained is not None:
            gap = trained - (known[best] + BEAT_MARGIN)
            out.append(f"- trained local-fed ({scoring}) {trained:.4f} vs max CDM `{best}` {known[best]:.4f} + "
                       f"{BEAT_MARGIN}: {'met' if gap >= 0 else 'missed'} ({gap:+.4f}); interval against `{best}`: "
                       f"{_interval(_comparison(result, 'trained', scoring, best))}")
    for scoring in ("link", "own"):
        c = _comparison(result, "trained", scoring, "untrained")
        if c is not None:
            met = c["diff"] >= TRAINING_GAIN and c["low"] > 0
            out.append(f"- training adds ({scoring}) {_interval(c)}: ≥ {TRAINING_GAIN} with the interval above 0? "
                       f"{'met' if met else 'missed'}")
        c = _comparison(result, "trained", scoring, "centralized")
        if c is not None:
            out.append(f"- federated − centralized ({scoring}) {_interval(c)}: within {FEDERATED_GAP}? "
                       f"{'met' if abs(c['diff']) <= FEDERATED_GAP else 'missed'}")
        c = _comparison(result, "DP ε=2", scoring, "trained")
        if c is not None:
            out.append(f"- DP ε=2 − non-private ({scoring}) {_interval(c)}: within {DP_GAP}? "
                       f"{'met' if c['diff'] >= -DP_GAP else 'missed'}")
    return [*out, ""]


def write_ablation_report(result: AblationResult, out: Path, *, command: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = {**result.to_json(), "command": command}
    (out / "results.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    lines = [f"# local-fed ablation: {result.dataset}", "", f"Reproduce: `{command}`", "",
             f"- split {result.split} (seed {result.seed}); 20 % of each validation and test student's responses "
             "held out; every row scores the same held-out responses; wall time "
             f"{result.seconds:.0f} s on this machine",
             "- `link`: mastery of the assessed concepts through the protocol's item-easiness link (how "
             "`single:local-fed` and `served` are scored); `own`: the model's own posterior-predictive P(correct) "
             "(how IRT, DINA and NCDM are scored)",
             "- institutions are SIMULATED: the train split dealt out IID to 3 clients (1 = centralized)", "",
             "| row | scoring | AUC | model | clients | rounds | DP ε (spent) | seconds |", "|---|---|---|---|---|---|---|---|"]
    for r in result.rows:
        spent = "" if r.get("epsilon_spent") is None else f" ({r['epsilon_spent']:.2f})"
        eps = "–" if r.get("epsilon") is None else f"{r['epsilon']:g}{spent}"
        lines.append(f"| `{r['name']}` | {r['scoring']} | {_fmt(r['auc'])} | {r.get('model', '')} | "
                     f"{r.get('clients', '')} | {r.get('rounds_run', '')} | {eps} | {r.get('seconds', '')} |")
    lines += ["", "## Paired differences", "",
              f"AUC(row) − AUC(reference) on the same held-out responses, 95 % interval from a paired bootstrap over "
              f"test students ({data['resamples']} resamples).", "",
              "| row | scoring | reference | ΔAUC [95 % interval] | excludes 0 |", "|---|---|---|---|---|"]
    for c in result.comparisons:
        lines.append(f"| `{c['row']}` | {c['scoring']} | `{c['reference']}` | {_interval(c)} | "
                     f"{'yes' if c['excludes_zero'] else 'no'} |")
    lines += ["", *_targets(result)]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    written = [out / "results.json", out / "report.md"]
    written.append(_plot(result, out / "ablation.png"))
    return written


def _plot(result: AblationResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.rows if r["auc"] == r["auc"]]
    labels = [f"{r['name']} ({r['scoring']})" for r in rows]
    colors = ["#4c72b0" if r["name"] in CDMS else "#999999" if r["name"] in ("item-difficulty", "proportion-correct")
              else "#dd8452" for r in rows]
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(rows) + 1.2))
    ax.barh(range(len(rows)), [r["auc"] for r in rows], color=colors)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    low = min(r["auc"] for r in rows)
    ax.set_xlim(max(0.0, low - 0.02), max(r["auc"] for r in rows) + 0.01)
    ax.set_xlabel("held-out AUC (test students)")
    ax.set_title(f"local-fed ablation, {result.dataset} (blue: CDMs, orange: local-fed)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
