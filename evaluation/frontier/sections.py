"""The report's sections: number formatting, per-dataset tables, verdict texts and the summary."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.frontier.recommend import best_mechanisms
from evaluation.frontier.results import POSTPROCESSING, DatasetFrontier, FrontierResult
from privacy import PAPER_MECHANISM, mechanism_for_request


def format_value(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def format_epsilon(e: float | None) -> str:
    return "∞" if e is None else f"{e:g}"


def metric_table(result: FrontierResult, d: DatasetFrontier, metric: str) -> list[str]:
    header = "| mechanism | aggregation | " + " | ".join(f"ε={format_epsilon(e)}" for e in result.epsilons) + " |"
    lines = [header, "|---|---|" + "---|" * len(result.epsilons)]
    best = {}
    for e in result.epsilons:
        values = [(getattr(result.point(d.name, m, e, k), metric), m, k) for m in result.mechanisms for k in POSTPROCESSING]
        values = [v for v in values if v[0] is not None and not math.isnan(v[0])]
        if values:
            best[e] = (min if metric != "auc" else max)(values)[1:]
    for m in result.mechanisms:
        for k in POSTPROCESSING:
            cells = []
            for e in result.epsilons:
                v = format_value(getattr(result.point(d.name, m, e, k), metric))
                cells.append(f"**{v}**" if best.get(e) == (m, k) else v)
            lines.append(f"| {m} | {k} | " + " | ".join(cells) + " |")
    return lines


def references_lines(result: FrontierResult, d: DatasetFrontier) -> list[str]:
    lines = ["| reference | MAE (paper) | held-out AUC |" + (" MAE vs true mastery |" if d.simulated_data else ""),
             "|---|---|---|" + ("---|" if d.simulated_data else "")]
    for k in POSTPROCESSING:
        p = result.point(d.name, "none", None, k)
        lines.append(f"| noiseless federation (ε = ∞), {k} | {format_value(p.mae)} | {format_value(p.auc)} |" + (f" {format_value(p.true_mae)} |" if d.simulated_data else ""))
    labels = {"constant": "constant predictor (per-concept validation mean)", "oracle": "oracle (true DINA parameters)",
              "prior_mean": "fitted prior's mean (the posterior's ε → 0 limit)"}
    for key, ref in d.references.items():
        lines.append(f"| {labels.get(key, key)} | {format_value(ref.get('mae'))} | {format_value(ref.get('auc'))} |" + (f" {format_value(ref.get('true_mae'))} |" if d.simulated_data else ""))
    return lines


def verdict_lines(result: FrontierResult, d: DatasetFrontier, verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [v for v in verdicts if v["dataset"] == d.name and v["epsilon"] is not None]
    out = ["| mechanism | " + " | ".join(f"ε={format_epsilon(e)}" for e in result.epsilons) + " |", "|---|" + "---|" * len(result.epsilons)]
    for m in result.mechanisms:
        cells = []
        for e in result.epsilons:
            v = next(r for r in rows if r["mechanism"] == m and r["epsilon"] == e)
            mark = {"better": "✓", "tie": "≈", "worse": "✗", "n/a": "?"}[v["mae_verdict"]]
            cells.append(f"{mark} {format_value(v['mae_diff'])} ± {format_value(v['mae_diff_se'])}")
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return out


def _report_noise_sd(result: FrontierResult, d: DatasetFrontier, mechanism: str, eps: float) -> float:
    """The sd of one privatized report's noise (worst case for the bounded mechanisms), at the dataset's K."""
    return mechanism_for_request(
        name=mechanism, epsilon=eps, mode=result.sensitivity,  # type: ignore[arg-type]
        n_concepts_total=d.n_concepts, n_concepts_assessed=max(1, round(d.mean_assessed_concepts)), delta=result.delta,
    ).noise_sd


def _why(result: FrontierResult, d: DatasetFrontier, v: Mapping[str, Any]) -> str:
    if v["mae_verdict"] == "tie":
        return f"within sampling noise ({format_value(v['mae_diff'])} ± {format_value(v['mae_diff_se'])})"
    noise = _report_noise_sd(result, d, v["mechanism"], v["epsilon"])
    taus = d.posterior_fit["paper"]["entity_error_sd"]
    if noise < max(taus.values()):
        return (f"the mechanism's noise (sd ≈ {noise:.2f} per report) is below the entities' own error "
                f"(τ up to {max(taus.values()):.2f}), which is mostly bias; the posterior models it as unbiased noise of sd τ, "
                "so it cannot remove it and its weighting no longer helps")
    return f"the mechanism's noise (sd ≈ {noise:.2f} per report) dominates; see the tables"


def failure_text(result: FrontierResult, d: DatasetFrontier, verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [v for v in verdicts if v["dataset"] == d.name and v["epsilon"] is not None]
    lost = [v for v in rows if not v["mae_wins"]]
    worse = [v for v in rows if v["mae_verdict"] == "worse"]
    auc_lost = [v for v in rows if v["auc_verdict"] == "worse"]
    lap = [v for v in rows if v["mechanism"] == PAPER_MECHANISM]
    out = []
    if not lost:
        lap_text = ", ".join(f"ε={format_epsilon(v['epsilon'])} {format_value(v['mae_posterior'])} vs {format_value(v['mae_mean'])}" for v in lap)
        out.append(f"- **MAE: the posterior beats the plain mean at every ε for every mechanism** "
                   f"({len(rows)} of {len(rows)} settings; {sum(1 for v in rows if v['mae_verdict'] == 'better')} by more than 2 SE). "
                   f"Laplace, posterior vs plain mean: {lap_text}.")
    else:
        out.append(f"- **MAE: the posterior does not beat the plain mean at {len(lost)} of {len(rows)} settings:**")
        for v in lost:
            out.append(f"  - {v['mechanism']} ε = {format_epsilon(v['epsilon'])}: {format_value(v['mae_posterior'])} vs {format_value(v['mae_mean'])} — why: {_why(result, d, v)}.")
        out.append(f"  Everywhere else ({len(rows) - len(lost)} settings) it is lower"
                   + (f"; significantly worse (> 2 SE) at {len(worse)} setting(s)." if worse else "; nowhere is it worse by more than 2 SE."))
    noiseless = next(v for v in verdicts if v["dataset"] == d.name and v["epsilon"] is None)
    out.append(f"- Noiseless (ε = ∞): posterior {format_value(noiseless['mae_posterior'])} vs plain mean {format_value(noiseless['mae_mean'])} "
               f"({noiseless['mae_verdict']}).")
    if auc_lost:
        out.append("- Held-out AUC: the posterior is significantly (> 2 SE) below the plain mean at "
                   + ", ".join(f"{v['mechanism']} ε={format_epsilon(v['epsilon'])} ({format_value(v['auc_posterior'])} vs {format_value(v['auc_mean'])})" for v in auc_lost) + ".")
    else:
        n_auc = sum(1 for v in rows if v["auc_wins"])
        out.append(f"- Held-out AUC: the posterior is never significantly (> 2 SE) below the plain mean (higher at {n_auc} of {len(rows)} settings).")
    const = d.references["constant"]
    prior = d.references.get("prior_mean", {})
    informative = [e for e in result.epsilons
                   if any((result.point(d.name, m, e, "posterior").mae or math.inf) < (const["mae"] or 0) - 0.01 for m in result.mechanisms)]
    auc_informative = [e for e in result.epsilons
                       if any((result.point(d.name, m, e, "posterior").auc or 0) > (const["auc"] or 1) + 0.01 for m in result.mechanisms)]
    out.append("- Information: the best posterior MAE is more than 0.01 below the constant predictor's "
               f"({format_value(const['mae'])}) from ε = {format_epsilon(informative[0]) if informative else 'never (within this grid)'}; "
               f"the best posterior AUC exceeds the constant predictor's ({format_value(const['auc'])}) by more than 0.01 from ε = "
               f"{format_epsilon(auc_informative[0]) if auc_informative else 'never (within this grid)'}. Below that the reports carry "
               "(almost) nothing the population prior does not, and the posterior returns (nearly) the prior mean.")
    if prior.get("mae") is not None and const.get("mae") is not None and prior["mae"] > const["mae"] + 0.01:
        fit = d.posterior_fit["paper"]
        out.append(f"- **The posterior's ε → 0 limit (its prior's mean, MAE {format_value(prior['mae'])}) is worse than the constant predictor "
                   f"({format_value(const['mae'])})**: of {fit['n_concepts_with_prior']} concepts with a fitted prior, "
                   f"{fit['n_priors_u_shaped_floor']} are the U-shaped floor Beta(0.5, 0.5) (`fit_beta_prior` gives it when the "
                   "validation truth's variance reaches m(1 − m), e.g. proportion correct from a single item, which is 0 or 1), "
                   "whose mean is ½ whatever the concept's mean; concepts with fewer than two validation values get the uniform "
                   "prior (mean ½ as well). At small ε the posterior returns to these prior means, so it stays above the constant "
                   "predictor even though it beats the plain mean. A mean-preserving floor in `fit_beta_prior` would close that gap.")
    return out


def dataset_notes(result: FrontierResult, d: DatasetFrontier) -> list[str]:
    """Automatic observations that need explaining: the posterior above the constant predictor, AUC limits."""
    out = []
    const = d.references["constant"]
    noiseless = result.point(d.name, "none", None, "posterior")
    if const["mae"] is not None and noiseless.mae is not None and noiseless.mae < const["mae"]:
        above = sorted({e for e in result.epsilons for m in result.mechanisms
                        if (result.point(d.name, m, e, "posterior").mae or 0) > const["mae"] + 0.005})
        small_ok = (result.point(d.name, result.mechanisms[0], result.epsilons[0], "posterior").mae or math.inf) <= const["mae"] + 0.005
        if above and small_ok:
            worst = max(((result.point(d.name, m, e, "posterior").mae or 0, m, e) for m in result.mechanisms for e in above))
            out.append(
                f"- **The posterior is above the constant predictor ({format_value(const['mae'])}) at ε ∈ {{{', '.join(f'{e:g}' for e in above)}}}** "
                f"(worst: {worst[1]} ε = {worst[2]:g}, {format_value(worst[0])}), although it is below it at small ε and at ε = ∞ "
                f"({format_value(noiseless.mae)}) and beats the plain mean everywhere. The posterior's entity model (unbiased error of sd τ; "
                f"τ = {d.posterior_fit['paper']['entity_error_sd']} fitted as an RMS error, so bias is counted as noise) is "
                "misspecified for entities whose error is bias"
                + (" — the SIMULATED `sim:confident` answers 0.7–0.9 whatever the student" if "sim:confident" in result.entities else "")
                + ". At small ε the likelihood is flat and the prior wins; as the noise shrinks the likelihood pulls the estimate "
                "toward the biased reports; only near ε = ∞ does the posterior's precision weighting outweigh that.")
    if result.sensitivity == "paper" and d.n_concepts > 2 * d.mean_assessed_concepts:
        eps = result.epsilons[-1]
        out.append(
            f"- **The budget is spread over all K = {d.n_concepts} concepts** (sensitivity `paper`), while a student's items assess "
            f"{d.mean_assessed_concepts:.1f} on average: even at ε = {eps:g} the Laplace scale is Δ/ε = {d.n_concepts / eps:.1f} and "
            f"the bounded mechanisms get ε/K = {eps / d.n_concepts:.2f} per concept, so every report is essentially noise and the "
            "posterior stays at its prior throughout the grid. Sensitivity `assessed` (Δ = the assessed concepts) is the lever here.")
    if const["auc"] is not None and noiseless.auc is not None and noiseless.auc < const["auc"]:
        out.append(
            f"- **Even the noiseless federation's held-out AUC ({format_value(noiseless.auc)}) is below the constant predictor's "
            f"({format_value(const['auc'])})**: on these data the entities' per-student answers carry less about the hidden responses "
            "than the item-to-concept structure the per-concept means already encode (the link sees only the mean mastery of "
            "an item's concepts), so no ε can help the held-out AUC here"
            + (f"; the oracle reaches {format_value(d.references['oracle']['auc'])}." if d.references.get("oracle", {}).get("auc") else "."))
    return out


def summary_lines(result: FrontierResult) -> list[str]:
    focus = [e for e in (0.5, 2.0, 8.0, 32.0) if e in result.epsilons] or result.epsilons
    mech = PAPER_MECHANISM if PAPER_MECHANISM in result.mechanisms else result.mechanisms[0]
    header = "| dataset | " + " | ".join(f"{mech} ε={e:g}: mean → posterior" for e in focus) + " | ε = ∞: mean → posterior | constant |"
    lines = [header, "|---|" + "---|" * (len(focus) + 2)]
    for d in result.datasets:
        cells = [f"{format_value(result.point(d.name, mech, e, 'mean').mae)} → {format_value(result.point(d.name, mech, e, 'posterior').mae)}" for e in focus]
        clean = f"{format_value(result.point(d.name, 'none', None, 'mean').mae)} → {format_value(result.point(d.name, 'none', None, 'posterior').mae)}"
        lines.append(f"| {d.name} | " + " | ".join(cells) + f" | {clean} | {format_value(d.references['constant']['mae'])} |")
    starts = []
    for d in result.datasets:
        const = d.references["constant"]["mae"]
        first = next((e for e in result.epsilons if const is not None and any(
            (result.point(d.name, m, e, "posterior").mae or math.inf) < const - 0.01 for m in result.mechanisms)), None)
        starts.append(f"{d.name} from ε = {first:g}" if first is not None else f"{d.name} at no ε in the grid")
    lines += ["", "- Where the privatized reports start to say something about the student (the best posterior MAE more than "
              "0.01 below the constant predictor's): " + "; ".join(starts) + ". Below that every diagnosis is, in effect, the "
              "population prior."]
    best = best_mechanisms(result)
    lines += ["", "Best mechanism by posterior MAE at each ε (`tie`: all mechanisms within 0.005 — the reports say ~nothing and "
              "every posterior returns the prior):", "",
              "| ε | " + " | ".join(d.name for d in result.datasets) + " |", "|---|" + "---|" * len(result.datasets)]
    for e, row in best.items():
        lines.append(f"| {e} | " + " | ".join(row[d.name] for d in result.datasets) + " |")
    return lines
