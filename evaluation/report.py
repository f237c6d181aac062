"""Writing an evaluation: ``results.json``, ``report.md`` (laid out like the paper's Tables 2–4)
and PNG plots (privacy–utility curve, per-entity reliability diagrams, per-concept error heatmap)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from evaluation.results import VIA_API_ROW, EvaluationResult, Row  # noqa: E402
from evaluation.metrics import improvement, privacy_cost  # noqa: E402
from privacy import PAPER_MECHANISM

__all__ = ["write_report"]

FED_ROWS = ("simple-ensemble", "fed-nodp-rc", "fed-dp-norc", "gaussian-dp", "full")
CLASSICAL = ("irt", "dina", "ncdm", "proportion-correct", "item-difficulty", "oracle")
CDM_BASELINES = ("irt", "dina", "ncdm")
TARGET_MARGIN = 0.02
VIA_API_MARGIN = 0.01  # issue 21: the API path scores within this of the in-process served row
COLORS = {"irt": "grey", "dina": "black", "ncdm": "purple", "proportion-correct": "tan", "item-difficulty": "silver",
          "oracle": "green"}


def _eps(e: float | None) -> str:
    return "∞" if e is None else f"{e:g}"


def _noise(r: Row) -> str:
    """ε with the mechanism where it is not the paper's Laplace (the served noise, the Gaussian rows)."""
    if r.epsilon is None:
        return "∞"
    return f"{r.epsilon:g}" + ("" if r.mechanism == PAPER_MECHANISM else f" ({r.mechanism})")


def _f(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _main_metric(result: EvaluationResult) -> str:
    return "auc" if result.protocol == "heldout" else "mae"


def _groups(result: EvaluationResult) -> list[tuple[str | None, list[Row]]]:
    gens = sorted({r.generator for r in result.rows if r.generator}) or [None]
    return [(g, [r for r in result.rows if r.generator == g]) for g in gens]


def _table(rows: Sequence[Row], metrics: Sequence[str]) -> list[str]:
    lines = ["| row | ε | " + " | ".join(m.upper() for m in metrics) + " | n | filled |",
             "|---|---|" + "---|" * len(metrics) + "---|---|"]
    for r in rows:
        name = f"**`{r.name}`**" if r.name in ("served", VIA_API_ROW) else f"`{r.name}`"
        lines.append(f"| {name} | {_noise(r)} | " + " | ".join(_f(getattr(r, m)) for m in metrics) + f" | {r.n} | {r.filled} |")
    return lines


def _served_noise(result: EvaluationResult) -> tuple[float, str] | None:
    """(ε, mechanism) of the served row at the server's default noise."""
    return next(((r.epsilon, r.mechanism) for r in result.rows if r.name == "served" and r.epsilon is not None), None)


def _ablation_epsilons(rows: Sequence[Row]) -> list[float]:
    """The finite ε of the paper's ablation rows (the served noise has its own rows)."""
    return sorted({r.epsilon for r in rows if r.name in FED_ROWS and r.epsilon is not None})


def _targets(result: EvaluationResult, rows: Sequence[Row]) -> list[str]:
    """The issue's targets, computed from the rows: met or missed, and by how much."""
    clean = next((r for r in rows if r.name == "served" and r.epsilon is None), None)
    default = next((r for r in rows if r.name == "served" and r.epsilon is not None), None)
    if clean is None:
        return []
    out = ["", "Targets (computed from the rows above):", ""]
    if result.protocol == "heldout":
        best = max((r for r in rows if r.name in CDM_BASELINES and r.auc is not None), key=lambda r: r.auc, default=None)
        if best is None or clean.auc is None:
            return []
        gap = clean.auc - best.auc
        out.append(f"- noiseless `served` AUC {clean.auc:.3f} vs max(irt, dina, ncdm) = `{best.name}` {best.auc:.3f}: "
                   f"{'met' if gap >= 0 else 'missed'} ({gap:+.3f})")
        if default is not None and default.auc is not None:
            gap = default.auc - best.auc
            out.append(f"- `served` at the defaults ({_noise(default)}) AUC {default.auc:.3f}: within {TARGET_MARGIN} of "
                       f"{best.auc:.3f}? {'met' if gap >= -TARGET_MARGIN else 'missed'} ({gap:+.3f})")
        via = next((r for r in rows if r.name == VIA_API_ROW and r.auc is not None), None)
        if via is not None and default is not None and default.auc is not None:
            gap = via.auc - default.auc  # type: ignore[operator]
            out.append(f"- `{VIA_API_ROW}` (uploaded, trained and diagnosed through the API) AUC {via.auc:.3f} vs "
                       f"`served` {default.auc:.3f} at the same noise: within {VIA_API_MARGIN}? "
                       f"{'met' if abs(gap) <= VIA_API_MARGIN else 'missed'} ({gap:+.3f})")
    elif result.protocol == "simulated":
        oracle = next((r for r in rows if r.name == "oracle"), None)
        if oracle is None or oracle.acc is None or clean.acc is None:
            return []
        gap = clean.acc - oracle.acc
        out.append(f"- noiseless `served` attribute accuracy {clean.acc:.3f} vs the oracle ceiling {oracle.acc:.3f}: "
                   f"within {TARGET_MARGIN}? {'met' if gap >= -TARGET_MARGIN else 'missed'} ({gap:+.3f})")
    return out


def _significance(result: EvaluationResult) -> list[str]:
    if not result.significance:
        return []
    out = ["## Significance: `served` and `single:local-fed` against each baseline", "",
           "AUC(row) − AUC(baseline) on the same held-out responses; 95 % interval from a paired bootstrap over "
           f"test students ({result.significance[0]['resamples']} resamples, seed {result.seed}).", "",
           "| row | ε | baseline | ΔAUC | 95 % interval | excludes 0 |", "|---|---|---|---|---|---|"]
    for d in result.significance:
        label = f"`{d['baseline']}`" + (" (same noise)" if d["baseline"].startswith("single:") else "")
        out.append(f"| `{d['row']}` | {_eps(d['epsilon'])} | {label} | {d['diff']:+.3f} | [{d['low']:+.3f}, {d['high']:+.3f}] | "
                   f"{'yes' if d['excludes_zero'] else 'no'} |")
    return [*out, ""]


def _served_section(result: EvaluationResult) -> list[str]:
    if not result.served:
        return []
    out = ["## The served configuration", ""]
    config = result.served.get("config", {})
    if config:
        out.append(f"- noise {config['noise']}, calibration `{config['calibration_method']}` fitted on the validation "
                   f"split through `calibration.fitting` (as `/v1/calibrate`), aggregation `{config['aggregation']}`, "
                   f"calibration released {'without noise' if config['release_epsilon'] is None else 'with ε = ' + str(config['release_epsilon'])}")
    local = result.served.get("local_fed")
    if local:
        out.append(f"- local-fed: {json.dumps(local, sort_keys=True)}")
    calibrations = result.served.get("calibrations", [])
    groups = calibrations.items() if isinstance(calibrations, dict) else [(None, calibrations)]
    for generator, fits in groups:
        for fit in fits:
            label = f"[{generator}] " if generator else ""
            out.append(f"- {label}calibration at {fit['noise']}: aggregator `{fit['aggregation']}`, metrics "
                       f"{ {k: round(v, 4) for k, v in fit['metrics'].items()} }, params {json.dumps(_rounded(fit['params']))}")
            out += [f"  - note: {note}" for note in fit.get("notes", [])]  # older results.json files have none
    ncdm = result.baselines.get("ncdm")
    if ncdm:
        out.append(f"- ncdm training settings: {json.dumps(ncdm)}")
    return [*out, ""]


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def _markdown(result: EvaluationResult, command: str, plots: list[str]) -> str:
    metric = _main_metric(result)
    metrics = ["auc", "acc", "rmse", "ece"] if result.protocol == "heldout" else (["mae", "rmse", "acc"] if result.protocol == "simulated" else ["mae", "rmse"])
    lower_better = metric != "auc"
    out = [
        f"# fedcd evaluation: {result.dataset}, {result.protocol} protocol",
        "",
        f"Reproduce: `{command}`",
        "",
        f"- students: {result.n_students} (split train/validation/test: {result.split}); seed {result.seed}; "
        f"{'SIMULATED data' if result.simulated_data else 'real data'}",
        f"- entities: {', '.join(result.entities)} (real calls: {result.entity_calls}; failures: {result.entity_failures or 'none'})",
        f"- calibration for RC rows: `{result.method}`, fitted on validation students at the same noise; all numbers on test students",
        f"- wall time: {result.seconds:.0f} s",
        "",
    ]
    for note in result.notes:
        out.append(f"> {note}")
    out.append("")
    for generator, rows in _groups(result):
        suffix = f" — {generator.upper()}-generated students" if generator else ""
        finite = _ablation_epsilons(rows)
        headline = max(finite) if finite else None
        singles_clean = [r for r in rows if r.name.startswith("single:") and r.epsilon is None]
        best_single = (min if lower_better else max)(singles_clean, key=lambda r: getattr(r, metric) or (math.inf if lower_better else -math.inf), default=None)
        out += [f"## Table 2: main comparison{suffix}", ""]
        served = _served_noise(result)
        main_rows = [r for r in rows if (r.name.startswith("single:") and (r.epsilon is None or (r.epsilon, r.mechanism) == served)) or r.name in ("served", "served (link)", VIA_API_ROW) or r.name in CLASSICAL or r.name in ("simple-ensemble", "fed-nodp-rc") or (r.name in FED_ROWS and r.epsilon == headline)]
        out += _table(main_rows, metrics)
        out += _targets(result, rows)
        full = next((r for r in rows if r.name == "full" and r.epsilon == headline), None)
        if best_single and full and metric == "mae" and best_single.mae and full.mae is not None:
            out += ["", f"Improvement (formula 9) of `full` at ε = {_eps(headline)} over the best single entity "
                        f"(`{best_single.name}`, no noise): {improvement(method_mae=full.mae, baseline_mae=best_single.mae):+.1f} %"]
        out += ["", f"## Table 3: ablation (which component does what){suffix}", ""]
        out += _table([r for r in rows if r.name in FED_ROWS], metrics)
        out += ["", f"## Table 4: privacy–utility{suffix}", "", "| ε | full " + metric.upper() + " | fed-dp-norc " + metric.upper() + " | privacy cost of `full` vs `fed-nodp-rc` (formula 10) |", "|---|---|---|---|"]
        clean = next((r for r in rows if r.name == "fed-nodp-rc"), None)
        for eps in finite:
            f_row = next((r for r in rows if r.name == "full" and r.epsilon == eps), None)
            n_row = next((r for r in rows if r.name == "fed-dp-norc" and r.epsilon == eps), None)
            cost = "—"
            if f_row and clean and f_row.mae is not None and clean.mae:
                cost = f"{privacy_cost(private_mae=f_row.mae, nonprivate_mae=clean.mae):+.1f} %"
            out.append(f"| {_eps(eps)} | {_f(getattr(f_row, metric, None))} | {_f(getattr(n_row, metric, None))} | {cost} |")
        out.append("")
    out += _significance(result) + _served_section(result)
    out += ["## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(out)


def _plot_privacy_utility(result: EvaluationResult, folder: Path) -> Path:
    metric = _main_metric(result)
    fig, axes = plt.subplots(1, len(_groups(result)), figsize=(6 * len(_groups(result)), 4), squeeze=False)
    for ax, (generator, rows) in zip(axes[0], _groups(result)):
        finite = _ablation_epsilons(rows)
        xs = [*finite, max(finite) * 2 if finite else 1.0]
        for name in ("fed-dp-norc", "gaussian-dp", "full"):
            ys = [getattr(next((r for r in rows if r.name == name and r.epsilon == e), Row(name)), metric) for e in finite]
            clean = next((r for r in rows if r.name == ("fed-nodp-rc" if name != "fed-dp-norc" else "simple-ensemble")), None)
            ax.plot(xs, [*ys, getattr(clean, metric, None) if clean else None], marker="o", label=name)
        for name in CLASSICAL:
            row = next((r for r in rows if r.name == name), None)
            if row is not None and getattr(row, metric) is not None:
                ax.axhline(getattr(row, metric), linestyle="--", linewidth=0.8, label=name, color=COLORS[name])
        for row in (r for r in rows if r.name == "served" and getattr(r, metric) is not None):
            ax.axhline(getattr(row, metric), linestyle="-" if row.epsilon is None else ":", linewidth=1.4, color="red",
                       label=f"served ({_noise(row)})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [*(f"{e:g}" for e in finite), "∞"])
        ax.set_xlabel("ε per entity answer")
        ax.set_ylabel(metric.upper() + (" (lower is better)" if metric == "mae" else " (higher is better)"))
        ax.set_title(f"{result.dataset} / {result.protocol}" + (f" / {generator}" if generator else ""))
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = folder / "privacy_utility.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_reliability(result: EvaluationResult, folder: Path) -> Path | None:
    if not result.reliability:
        return None
    names = list(result.reliability)
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        pairs = np.array(result.reliability[name])
        edges = np.linspace(0, 1, 11)
        idx = np.clip(np.digitize(pairs[:, 0], edges[1:-1], right=True), 0, 9)
        xs = [pairs[idx == b, 0].mean() for b in range(10) if (idx == b).any()]
        ys = [pairs[idx == b, 1].mean() for b in range(10) if (idx == b).any()]
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8)
        ax.plot(xs, ys, marker="o")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("predicted (no noise)")
        ax.set_ylabel("observed" if result.protocol == "heldout" else "truth")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    fig.tight_layout()
    path = folder / "reliability.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_heatmap(result: EvaluationResult, folder: Path) -> Path | None:
    data = {k: v for k, v in result.per_concept_error.items() if v}
    if not data:
        return None
    keys = list(data)
    concepts = list(dict.fromkeys(c for v in data.values() for c in v))
    if len(concepts) > 40:  # a 110-concept heatmap is unreadable: keep the concepts with the most error spread
        spread = {c: np.nanstd([data[k].get(c, np.nan) for k in keys]) for c in concepts}
        concepts = sorted(concepts, key=lambda c: -spread[c])[:40]
    grid = np.array([[data[k].get(c, np.nan) for c in concepts] for k in keys])
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(concepts) + 3), max(4, 0.22 * len(keys) + 1.5)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis")
    ax.set_yticks(range(len(keys)), keys, fontsize=6)
    ax.set_xticks(range(len(concepts)), [c[:28] for c in concepts], rotation=70, ha="right", fontsize=6)
    fig.colorbar(im, ax=ax, label="MAE")
    ax.set_title(f"per-concept error: {result.dataset} / {result.protocol}")
    fig.tight_layout()
    path = folder / "concept_error_heatmap.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(result: EvaluationResult, folder: str | Path, *, command: str) -> list[Path]:
    """Write results.json, report.md and the plots into ``folder``; returns the paths written."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    plots = [p for p in (_plot_privacy_utility(result, out), _plot_reliability(result, out), _plot_heatmap(result, out)) if p]
    (out / "report.md").write_text(_markdown(result, command, [str(p) for p in plots]), encoding="utf-8")
    return [out / "results.json", out / "report.md", *plots]
