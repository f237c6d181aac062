"""Writes ``fedcd bench gateway`` results: results.json, report.md and a latency/throughput plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        f"- machine: {data['machine']['cpus']} CPUs, Python {data['machine']['python']}; every number is from one "
        "run on a shared machine: compare rows of the same run (ratios), not runs",
        "",
        "| target | scenario | ok/sent | p50 ms | p90 ms | p99 ms | added p50 ms | req/s | CPU ms |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in data["results"]),
        "",
    ]
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


def _plot(data: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["results"] if r["target"] in ("fedcd", "litellm") and r["per"] in ("diagnosis", "call")]
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
