"""Which local-fed model kind, and which round, to serve: measured on the held-out protocol.

``python -m evaluation.kinds --dataset frcsub --seed 0 --out docs/results/local-fed-kinds/frcsub``

Runs :func:`evaluation.ablation.run_ablation` (the ``fedcd evaluate --local-fed-ablation`` machinery: one
split, every variant trained on the TRAIN students only, scored ``link`` and ``own`` on the same held-out
responses of the TEST students, paired bootstrap intervals) with the variants that matter here: each
candidate kind after its last round (what was served before) and after its best round on the coordinator's
held-out part of the train split, and ``auto`` (both kinds trained, the one with the better coordinator
held-out AUC served). The test students never take part in any choice.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.ablation import Variant, run_ablation
from evaluation.baselines import NCDMSettings
from federated.train import TrainingConfig
from qmatrix.catalog import load_dataset

__all__ = ["KindTraining", "PAIRS", "VARIANTS", "main"]


@dataclass(frozen=True)
class KindTraining:
    """``fedcd train``'s defaults (3 IID institutions, 10 rounds, FedAvg, no DP) for one ``model`` kind (or
    ``auto``), keeping the ``best`` or ``last`` round; read by ``run_ablation`` as its variants' training."""

    model: str
    keep: str = "best"
    rounds: int = 10
    clients: int = 3
    local_epochs: int = 2
    threads: int = 2
    epsilon: float | None = None

    def training_config(self, seed: int) -> TrainingConfig:
        return TrainingConfig(clients=self.clients, rounds=self.rounds, local_epochs=self.local_epochs,
                              threads=self.threads, model_kind=self.model, seed=seed,
                              keep=self.keep)  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "keep": self.keep, "clients": self.clients, "rounds": self.rounds,
                "local_epochs": self.local_epochs, "dp": "none", "epsilon": None}


VARIANTS: tuple[Variant, ...] = tuple(Variant(name, training) for name, training in (  # type: ignore[arg-type]
    ("untrained", KindTraining("higher-order-irt", rounds=0)),
    ("higher-order-irt, last round", KindTraining("higher-order-irt", keep="last")),
    ("higher-order-irt, best round", KindTraining("higher-order-irt")),
    ("irt-2pl, last round", KindTraining("irt-2pl", keep="last")),
    ("irt-2pl, best round", KindTraining("irt-2pl")),
    ("auto", KindTraining("auto")),
))
PAIRS = (("higher-order-irt, best round", "higher-order-irt, last round"), ("irt-2pl, best round", "irt-2pl, last round"),
         ("irt-2pl, best round", "higher-order-irt, best round"), ("auto", "higher-order-irt, last round"),
         ("auto", "untrained"))


def _report(data: dict[str, Any], command: str) -> str:
    lines = [f"# local-fed model kinds: {data['dataset']}", "", f"Reproduce: `{command}`", "",
             f"- split {data['split']} (seed {data['seed']}); wall time {data['seconds']} s; institutions SIMULATED "
             "(the train split dealt out IID to 3 clients); `link`: mastery through the protocol's item-easiness "
             "link; `own`: the model's own posterior-predictive P(correct)", "",
             "| row | scoring | AUC | kind served | round served / run | seconds |", "|---|---|---|---|---|---|"]
    for r in data["rows"]:
        served = f"{r.get('served_round')} / {r.get('rounds_run')}" if "rounds_run" in r else ""
        lines.append(f"| `{r['name']}` | {r['scoring']} | {r['auc']:.4f} | {r.get('kind_served', '')} | {served} | "
                     f"{r.get('seconds', '')} |")
    lines += ["", "## Paired differences (95 % paired-bootstrap interval over test students)", "",
              "| row | scoring | reference | ΔAUC [95 %] |", "|---|---|---|---|"]
    for c in data["comparisons"]:
        lines.append(f"| `{c['row']}` | {c['scoring']} | `{c['reference']}` | {c['diff']:+.4f} "
                     f"[{c['low']:+.4f}, {c['high']:+.4f}] |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ncdm", action="store_true", help="fit NCDM too (slow on ASSIST0910)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    dataset = load_dataset(args.dataset, data_dir=args.data_dir)
    result = run_ablation(dataset, seed=args.seed, variants=VARIANTS, pairs=PAIRS,
                          ncdm=NCDMSettings() if args.ncdm else None, progress=print)
    data = result.to_json()
    command = "python -m evaluation.kinds " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({**data, "command": command}, indent=2, ensure_ascii=False)
                                           + "\n")
    (args.out / "report.md").write_text(_report(data, command))


if __name__ == "__main__":
    main()
