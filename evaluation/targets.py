"""Issue 31's targets read off committed held-out runs (``fedcd evaluate --protocol heldout``): the noiseless
``served`` row (scored by its item forecasts) against the classical CDMs and against its best single member, and
what training adds (a run with ``--local-fed-rounds 0`` beside the trained one).

    python -m evaluation.targets docs/results/issue31/frcsub-seed0 [--untrained docs/results/issue31/frcsub-seed0-untrained]

Prints one markdown table row per run; nothing is computed that the runs' results.json do not hold.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["target_row"]

CLASSICAL = ("irt", "dina", "ncdm")


def _noiseless(result: dict[str, Any], name: str) -> float | None:
    return next((r["auc"] for r in result["rows"] if r["name"] == name and r["epsilon"] is None), None)


def target_row(folder: Path, untrained: Path | None = None) -> str:
    """``| dataset | seed | served | best CDM | served − best CDM | best member | served − best member | trained − untrained |``"""
    result = json.loads((folder / "results.json").read_text())
    served = _noiseless(result, "served")
    if served is None:
        raise SystemExit(f"{folder}: no noiseless served row")
    cdm = max((c for c in CLASSICAL if _noiseless(result, c) is not None), key=lambda c: _noiseless(result, c) or 0)
    members = {r["name"]: r["auc"] for r in result["rows"]
               if r["name"].startswith("single:") and not r["name"].endswith(" (link)") and r["epsilon"] is None}
    best_member = max(members, key=members.__getitem__)
    gain = ""
    if untrained is not None:
        before = _noiseless(json.loads((untrained / "results.json").read_text()), "served")
        gain = f"{served - before:+.3f}" if before is not None else ""
    cdm_auc = _noiseless(result, cdm) or 0.0
    return (f"| {result['dataset']} | {result['seed']} | {served:.3f} | `{cdm}` {cdm_auc:.3f} | {served - cdm_auc:+.3f} "
            f"| `{best_member}` {members[best_member]:.3f} | {served - members[best_member]:+.3f} | {gain} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--untrained", nargs="*", type=Path, default=[],
                        help="the same runs with --local-fed-rounds 0, in the same order")
    args = parser.parse_args()
    print("| dataset | seed | served (forecasts, no noise) | best CDM | served − best CDM | best member | "
          "served − best member | trained − untrained |")
    print("|---|---|---|---|---|---|---|---|")
    for n, run in enumerate(args.runs):
        print(target_row(run, args.untrained[n] if n < len(args.untrained) else None))


if __name__ == "__main__":
    main()
