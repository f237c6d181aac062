"""What the DP item release alone keeps (issue 32): the warm start it gives, before any DP-SGD round.

``python -m evaluation.release_probe --dataset frcsub --seed 0 --epsilons 1000,4,2,1``

On the held-out protocol's train split (seeded, 3 SIMULATED institutions, IID), the higher-order IRT is scored by its
own predictions on the test students' held-out responses: untrained, after the non-private warm start (pooled exact
sums), and after the warm start from the trainer's release (:func:`federated.item_release.release_for_training`) at
each ε (the whole ε on the release; ``fedcd train`` spends a share of it). No training round runs: this isolates
what the release carries.
"""

from __future__ import annotations

import argparse

import numpy as np

from evaluation.metrics import auc
from federated.candidates import warm_start
from federated.data import encode_dataset, iid_partition
from federated.item_release import release_for_training
from federated.models import DEFAULT_KIND, new_model
from federated.predict import predict_heldout
from qmatrix import Dataset
from qmatrix.catalog import load_dataset
from qmatrix.splits import split_holdout, split_students

__all__ = ["main"]


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilons", default="1000,4,2,1", help="ε of the release, comma-separated")
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args(argv)
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    q = data.qmatrix
    split = split_students(data.students, seed=args.seed)
    test_obs, test_held = split_holdout(split.test, args.seed)
    y = np.array([r.score >= 0.5 for held in test_held for r in held], dtype=float)
    train = Dataset(name=f"{q.id}-train", qmatrix=q, students=list(split.train), simulated=data.simulated)
    table = new_model(DEFAULT_KIND, q, seed=args.seed).item_table(q)
    encoded = encode_dataset(train, table=table)
    parts = iid_partition(len(encoded), n_clients=3, rng=np.random.default_rng(args.seed))
    shards = [encoded.subset(p) for p in parts]
    results: dict[str, float] = {}

    def score(label: str, model: object) -> None:
        results[label] = auc(predict_heldout(model, q, test_obs, test_held), y)  # type: ignore[arg-type]
        print(f"{label}: own AUC {results[label]:.4f}", flush=True)

    score("untrained", new_model(DEFAULT_KIND, q, seed=args.seed))
    exact = new_model(DEFAULT_KIND, q, seed=args.seed)
    warm_start(exact, shards, table=table)
    score("non-private warm start", exact)
    for epsilon in (float(e) for e in args.epsilons.split(",")):
        # the trainer's own release (its σ, every shard's noisy sums pooled), the whole ε on it
        release = release_for_training(exact, shards, table=table, epsilon=epsilon, delta=args.delta, seed=args.seed)
        model = new_model(DEFAULT_KIND, q, seed=args.seed)
        release.warm_start(model, table)
        score(f"release at ε {epsilon:g} (σ {release.noise_multiplier:.2f})", model)
    return results


if __name__ == "__main__":
    main()
