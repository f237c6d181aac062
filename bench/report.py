"""Writes ``fedcd bench gateway`` results: results.json, report.md and a latency/throughput plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.turns import Spread, median_of_turns, per_turn_ratio, spread, verdict

__all__ = ["write_gateway_report"]


def _row(r: dict[str, Any]) -> str:
    return (f"| {r['target']} | {r['name']} | {r['ok']}/{r['requests']} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {r['added_p50_ms']:+.1f} | {r['throughput_rps']:.1f} | "
            f"{r['cpu_ms_per_request']:.2f} per {r['per']} |")


def write_gateway_report(data: dict[str, Any], out: Path, *, command: str, extra: str = "") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(data, indent=2))
    config = data["config"]
    lines = [
        "# Gateway speed: fedcd against fixed-latency stub providers",
        "",
        f"Reproduce: `{command}`",
        "",
        f"- {config['entities']} `openai_compatible` entities, each its own stub server answering after "
        f"{config['stub_latency_ms']:g} ms (`bench/stub.py`); the entities are asked concurrently, so one stub "
        "latency is the floor of a diagnosis",
        f"- gateway: `fedcd serve --workers {config['workers']}`, ledger {'on' if config['ledger'] else 'off'}, "
        f"database {'PostgreSQL' if config['database_url'] else 'SQLite'}; a new student per request; 3–6 responses "
        "each; CPU = the gateway process tree's user+system time over the scenario, per request",
        f"- machine: {data['machine']['cpus']} CPUs, Python {data['machine']['python']}"
        f"{_loadavg_text(data['machine'])}; every number is from one run on a shared machine: compare rows of the same run "
        "(ratios), not runs",
        *([f"- this checkout: {data['revision']}"] if data.get("revision") else []),
        *([f"- beside this checkout, the gateway at {config['baseline']}: both run at once and take turns on each "
           f"scenario, in {config['rounds']} turns (A B B A …), so the shared machine's drift weighs on both"]
          if config.get("baseline") and "rounds" in config else []),  # older runs measured one after the other
        *([f"- beside it, LiteLLM's proxy {data.get('litellm_version') or '(version unknown)'} (`--num_workers "
           f"{config['workers']}`, the same stub): it takes turns with the gateway in the two 12-item diagnosis "
           f"scenarios, {config['rounds']} turns (A B B A …); per-turn readings are in results.json (`turns`)"]
          if config.get("compare_litellm") and _in_turns(data) else []),
        "",
        "| target | scenario | ok/sent | p50 ms | p90 ms | p99 ms | added p50 ms | req/s | CPU ms |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in data["results"]),
        "",
    ]
    lines += _comparison(data)
    lines += _against_litellm(data)
    lines += _targets(data)
    lines += _targets_issue36(data)
    if extra:
        lines += [extra, ""]
    (out / "report.md").write_text("\n".join(lines))
    paths = [out / "results.json", out / "report.md"]
    if data.get("profile"):
        (out / "profile.txt").write_text(data["profile"] + "\n")
        paths.append(out / "profile.txt")
    try:
        paths.append(_plot(data, out / "latency_throughput.png"))
    except ImportError:  # matplotlib is a dependency; this only guards odd installs
        pass
    return paths


def _comparison(data: dict[str, Any]) -> list[str]:
    """Before/after rows of the same run: the baseline revision's gateway against this one, scenario by scenario."""
    baseline = data["config"].get("baseline")
    if not baseline:
        return []
    before = {r["name"]: r for r in data["results"] if r["target"] == f"fedcd@{baseline}"}
    rows = []
    for r in (r for r in data["results"] if r["target"] == "fedcd" and r["name"] in before):
        b = before[r["name"]]
        ratio = per_turn_ratio(r, b, "cpu_ms_per_request")
        noise = "" if ratio is None or ratio.turns < 2 else (" inside the noise" if ratio.reaches(1.0) else " outside")
        rows.append(f"| {r['name']} | {b['cpu_ms_per_request']:.2f} | {r['cpu_ms_per_request']:.2f} | "
                    f"{r['cpu_ms_per_request'] / b['cpu_ms_per_request']:.2f} | "
                    f"{ratio.text() if ratio else ''}{noise} | {b['added_p50_ms']:+.1f} | "
                    f"{r['added_p50_ms']:+.1f} | {b['throughput_rps']:.1f} | {r['throughput_rps']:.1f} |")
    return [f"## Before ({baseline}) and after (this checkout), same run", "",
            "after/before per turn: the median of the turns' ratios (lowest–highest turn); *inside the noise* when "
            "that range reaches 1.0", "",
            "| scenario | CPU ms before | CPU ms after | after/before | after/before per turn | added p50 before | "
            "added p50 after | req/s before | req/s after |", "|---|---|---|---|---|---|---|---|---|", *rows, ""]


def _in_turns(data: dict[str, Any]) -> bool:
    return any(r.get("turns") for r in data["results"] if r["target"] == "litellm")


def _litellm_pairs(data: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(fedcd's 12-item diagnosis row, LiteLLM's pass-through row) at each concurrency both ran."""
    fedcd = {r["concurrency"]: r for r in data["results"]
             if r["target"] == "fedcd" and r["name"].startswith("diagnosis, 12-item")}
    return [(fedcd[r["concurrency"]], r) for r in data["results"]
            if r["target"] == "litellm" and r["concurrency"] in fedcd]


def _against_litellm(data: dict[str, Any]) -> list[str]:
    """fedcd's whole diagnosis against LiteLLM's one call, turn by turn: medians, ranges, and what is noise."""
    pairs = _litellm_pairs(data)
    if not pairs:
        return []
    rows = []
    for f, l in pairs:
        # a ratio over turns where the divisor read 0 (CPU below the clock's 10 ms tick, tiny runs) is "–"
        cells = [median_of_turns(f, "cpu_ms_per_request"), median_of_turns(l, "cpu_ms_per_request"),
                 per_turn_ratio(f, l, "cpu_ms_per_request"), median_of_turns(f, "throughput_rps"),
                 median_of_turns(l, "throughput_rps"), per_turn_ratio(f, l, "throughput_rps")]
        fmts = (".2f", ".2f", ".2f", ".1f", ".1f", ".2f")
        rows.append(f"| c={f['concurrency']} | "
                    + " | ".join("–" if c is None else c.text(fmt) for c, fmt in zip(cells, fmts, strict=True)) + " |")
    loads = [t["load1"] for f, l in pairs for t in (f.get("turns") or []) + (l.get("turns") or [])
             if t.get("load1") is not None]
    load = f"; the 1-minute load during the turns: {min(loads):g}–{max(loads):g}" if loads else ""
    return [f"## fedcd's diagnosis against LiteLLM's one call ({data.get('litellm_version') or 'LiteLLM'}), "
            "turn by turn", "",
            "Each cell: the median over turns (lowest–highest turn). A ratio is taken within each turn, where both "
            f"ran minutes apart{load}.", "",
            "| concurrency | fedcd CPU ms per diagnosis | LiteLLM CPU ms per call | CPU ratio fedcd/LiteLLM | "
            "fedcd diagnoses/s | LiteLLM calls/s | throughput ratio |", "|---|---|---|---|---|---|---|", *rows, "",
            *_machine_cpu(pairs, data)]


_MACHINE_KEYS = ("cpu_ms_per_request", "upstream_cpu_ms_per_request", "client_cpu_ms_per_request")


def _busy_cpus(row: dict[str, Any]) -> list[float]:
    """Per turn, the CPUs the server, the stubs and the load generator kept busy together (CPU ms per request ×
    requests per second)."""
    turns = row.get("turns") or [row]
    return [sum(float(t[k]) for k in _MACHINE_KEYS) * float(t["throughput_rps"]) / 1000 for t in turns]


def _machine_cpu(pairs: list[tuple[dict[str, Any], dict[str, Any]]], data: dict[str, Any]) -> list[str]:
    """Where the machine's CPU went while each server was loaded: the server, the stubs it called and this load
    generator, per request (median of turns), and how many CPUs they kept busy together. Runs from before these
    were read have no such table."""
    rows = []
    for f, l in pairs:
        for row, what in ((f, "fedcd, per diagnosis"), (l, "LiteLLM, per call")):
            if any(row.get(k) is None for k in _MACHINE_KEYS[1:]) or \
                    any(k not in t for t in row.get("turns") or [] for k in _MACHINE_KEYS[1:]):
                return []
            cells = [median_of_turns(row, k) for k in _MACHINE_KEYS]
            busy = spread(_busy_cpus(row))
            rows.append(f"| c={row['concurrency']} | {what} | "
                        + " | ".join("–" if c is None else c.text(".2f") for c in [*cells, busy]) + " |")
    cpus = data.get("machine", {}).get("cpus")
    return ["### Where the machine's CPU went", "",
            "While one server was loaded the others idled, so the stubs' CPU is that server's callers'. The busy CPUs "
            "are (server + stubs + load generator) CPU per request × requests per second"
            + (f", out of {cpus} on this machine" if cpus else "") + ": a server below them all is bounded by the "
            "machine, not by its own CPU.", "",
            "| concurrency | server | server CPU ms | stubs CPU ms | load generator CPU ms | busy CPUs |",
            "|---|---|---|---|---|---|", *rows, ""]


def _targets_issue36(data: dict[str, Any]) -> list[str]:
    """Issue 36's targets, each the median over turns, with whether the turns' range reaches its bound."""
    pairs = _litellm_pairs(data)
    repeat = next((r for r in data["results"] if r["target"] == "fedcd" and "repeat" in r["name"]), None)
    if not pairs:
        return []
    rows: list[tuple[str, str, Spread | None, float, bool]] = []  # target, measured as, value, bound, lower is better
    for f, l in pairs:
        rows.append((f"CPU per diagnosis ≤ half LiteLLM's per call, c={f['concurrency']}", "fedcd CPU / LiteLLM CPU",
                     per_turn_ratio(f, l, "cpu_ms_per_request"), 0.5, True))
        if f["concurrency"] > 1:
            rows.append((f"diagnoses/s ≥ 2 × LiteLLM's calls/s, c={f['concurrency']}", "fedcd/s ÷ LiteLLM/s",
                         per_turn_ratio(f, l, "throughput_rps"), 2.0, False))
    if repeat is not None:
        rows.append(("repeat path ≤ 3 ms CPU", "CPU ms per request", median_of_turns(repeat, "cpu_ms_per_request"),
                     3.0, True))
    return ["## Targets (issue 36): median of the turns", "", "| target | measured as | median (range) | bound | |",
            "|---|---|---|---|---|",
            *(f"| {name} | {what} | {value.text('.3g')} | {'≤' if lower else '≥'} {bound:g} | "
              f"{verdict(value, bound, lower_is_better=lower)} |" for name, what, value, bound, lower in rows
              if value is not None), ""]


def _targets(data: dict[str, Any]) -> list[str]:
    """The issue's targets, each computed from this run's rows, met or not (and by how much)."""
    fedcd = [r for r in data["results"] if r["target"] == "fedcd"]
    by = {
        "c1": next((r for r in fedcd if r["name"].startswith("diagnosis, 12-item") and r["concurrency"] == 1), None),
        "cmax": next((r for r in fedcd if r["name"].startswith("diagnosis, 12-item") and r["concurrency"] > 1), None),
        "big": next((r for r in fedcd if r["name"].startswith("diagnosis,") and "12-item" not in r["name"]), None),
        "repeat": next((r for r in fedcd if "repeat" in r["name"]), None),
        "sdk": next((r for r in data["results"] if r["target"] == "sdk"), None),
        "litellm": next((r for r in data["results"] if r["target"] == "litellm" and r["concurrency"] == 1), None),
    }
    config = data["config"]
    rows: list[tuple[str, str, float | None, float, bool]] = []  # target, measured what, value, bound, lower-is-better

    def add(name: str, what: str, value: float | None, bound: float, lower: bool = True) -> None:
        rows.append((name, what, value, bound, lower))

    c1, sdk = by["c1"], by["sdk"]
    if c1 is not None:
        add("CPU per diagnosis" + (" (ledger on)" if config["ledger"] else " (ledger OFF)"), "ms, c=1",
            c1["cpu_ms_per_request"], 15.0)
        add("added p50 over the stub", "ms, c=1", c1["added_p50_ms"], 8.0)
        if sdk is not None:
            add("CPU outside the entity calls", f"ms: diagnosis − {config['entities']} × one call (the `sdk` row)",
                c1["cpu_ms_per_request"] - config["entities"] * sdk["cpu_ms_per_request"], 3.0)
        if by["big"] is not None and c1["cpu_ms_per_request"] > 0:  # 0: below the CPU clock's tick (tiny runs)
            add(f"flat in Q-matrix size ({config['big_items']} vs 12 items)", "abs(CPU ratio − 1)",
                abs(by["big"]["cpu_ms_per_request"] / c1["cpu_ms_per_request"] - 1), 0.10)
        if by["litellm"] is not None and by["litellm"]["cpu_ms_per_request"] > 0:
            add("fedcd's diagnosis below LiteLLM's one call", "fedcd CPU / LiteLLM CPU",
                c1["cpu_ms_per_request"] / by["litellm"]["cpu_ms_per_request"], 1.0)
    if by["cmax"] is not None:
        add("throughput per worker", f"diagnoses/s at c={by['cmax']['concurrency']}",
            by["cmax"]["throughput_rps"] / config["workers"], 80.0, lower=False)
    if by["repeat"] is not None:
        add("repeat path", "CPU ms", by["repeat"]["cpu_ms_per_request"], 2.0)
    lines = ["## Targets (issue 12), from this run", "", "| target | measured as | value | bound | |",
             "|---|---|---|---|---|"]
    for name, what, value, bound, lower in rows:
        if value is None:
            continue
        met = value <= bound if lower else value >= bound
        verdict = "met" if met else f"missed by {abs(value - bound):.3g}"
        lines.append(f"| {name} | {what} | {value:.3g} | {'≤' if lower else '≥'} {bound:g} | {verdict} |")
    return lines + [""]


def _plot(data: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"]
            if (r["target"].startswith("fedcd") or r["target"] == "litellm") and r["per"] in ("diagnosis", "call")]
    labels = [f"{r['target']}: {r['name']}" for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.5 * len(rows) + 2.5))
    y = range(len(rows))
    left.barh(y, [r["p50_ms"] for r in rows], color="#4c72b0", label="p50")
    left.barh(y, [r["p99_ms"] - r["p50_ms"] for r in rows], left=[r["p50_ms"] for r in rows], color="#dd8452",
              label="p50 → p99")
    left.axvline(data["config"]["stub_latency_ms"], color="black", linestyle=":", label="stub latency")
    left.set_yticks(list(y), labels, fontsize=8)
    left.set_xlabel("latency (ms)")
    left.legend(fontsize=8)
    right.barh(y, [r["cpu_ms_per_request"] for r in rows], color="#55a868")
    right.set_yticks(list(y), [""] * len(rows))
    right.set_xlabel("CPU ms per diagnosis (fedcd) / per call (LiteLLM)")
    for k, r in enumerate(rows):
        right.text(r["cpu_ms_per_request"], k, f" {r['throughput_rps']:.0f} req/s", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _loadavg_text(machine: dict[str, Any]) -> str:
    """The 1-minute load average before and after the run, where it was recorded."""
    before, after = machine.get("loadavg_before"), machine.get("loadavg_after")
    return f"; load {before[0]:g} before, {after[0]:g} after" if before and after else ""
