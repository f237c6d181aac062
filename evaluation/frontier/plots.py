"""The frontier's plots (matplotlib, Agg): one panel per dataset, one line per mechanism and aggregation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from evaluation.frontier.results import POSTPROCESSING, FrontierResult

COLOURS = {"laplace": "tab:blue", "secure_laplace": "tab:cyan", "gaussian": "tab:orange", "duchi": "tab:red",
           "piecewise": "tab:green", "hybrid": "tab:purple", "anchored_piecewise": "tab:olive"}
STYLES = {"mean": "-", "posterior": "--", "posterior-uniform": ":"}


def plot_metric(result: FrontierResult, metric: str, folder: Path, *, only_simulated: bool = False) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    datasets = [d for d in result.datasets if d.simulated_data] if only_simulated else result.datasets
    if not datasets:
        return None
    fig, axes = plt.subplots(1, len(datasets), figsize=(max(7.5, 6.4 * len(datasets)), 6.2 + (0.4 if len(datasets) == 1 else 0)), squeeze=False)
    labels = {"mae": "MAE vs proportion correct (paper protocol; lower is better)", "auc": "held-out AUC (higher is better)",
              "true_mae": "MAE vs true (simulated) mastery (lower is better)"}
    xs = result.epsilons
    for ax, d in zip(axes[0], datasets):
        for m in result.mechanisms:
            for k in POSTPROCESSING:
                ys = [getattr(result.point(d.name, m, e, k), metric) for e in xs]
                ys = [np.nan if y is None else y for y in ys]
                ax.plot(xs, ys, linestyle=STYLES[k], color=COLOURS.get(m), marker="o" if k != "posterior-uniform" else None,
                        markersize=3.5, linewidth=1.6 if k != "posterior-uniform" else 1.0, alpha=1.0 if k != "posterior-uniform" else 0.6)
        refs = []
        for k, colour, style in (("mean", "dimgrey", "-"), ("posterior", "black", "--")):
            v = getattr(result.point(d.name, "none", None, k), metric)
            if v is not None and not math.isnan(v):
                ax.axhline(v, color=colour, linestyle=style, linewidth=0.9)
                refs.append(Line2D([], [], color=colour, linestyle=style, linewidth=0.9, label=f"no noise (ε=∞), {k}: {v:.3f}"))
        const = d.references.get("constant", {}).get(metric)
        for key, colour, style in (("constant", "sienna", "-."), ("prior_mean", "peru", (0, (5, 2, 1, 2, 1, 2))), ("oracle", "darkgreen", (0, (1, 1)))):
            v = d.references.get(key, {}).get(metric)
            if v is None or math.isnan(v) or (key == "prior_mean" and const is not None and abs(v - const) < 0.005):
                continue  # the prior's mean is drawn only where it differs from the constant predictor
            ax.axhline(v, color=colour, linestyle=style, linewidth=1.3)
            name = {"constant": "constant predictor", "prior_mean": "fitted prior's mean (posterior at ε→0)",
                    "oracle": "oracle (true DINA params)"}[key]
            refs.append(Line2D([], [], color=colour, linestyle=style, linewidth=1.3, label=f"{name}: {v:.3f}"))
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{e:g}" for e in xs])
        ax.set_xlabel("ε per entity answer (log₂ scale)")
        ax.set_ylabel(labels[metric], fontsize=9)
        tag = " — SIMULATED data" if d.simulated_data else ""
        ax.set_title(f"{d.name}{tag}\n(entities: {', '.join(result.entities)})", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(handles=refs, fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, title="references (horizontal lines)",
                  title_fontsize=7.5, frameon=False)
    handles = [Line2D([], [], color=COLOURS.get(m), linewidth=2, label=m) for m in result.mechanisms]
    handles += [Line2D([], [], color="grey", linestyle=STYLES[k], linewidth=1.6, label={"mean": "plain mean of reports (clipped)",
                "posterior": "posterior (fitted prior)", "posterior-uniform": "posterior (uniform prior)"}[k]) for k in POSTPROCESSING]
    ncol = min(len(handles), 3 * len(datasets))
    rows = math.ceil(len(handles) / ncol)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8.5, frameon=False)
    fig.tight_layout(rect=(0, 0.045 * rows + 0.005, 1, 1))
    path = folder / f"frontier_{metric}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
