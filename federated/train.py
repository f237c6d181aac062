"""One call from a dataset to a signed, gated model in the registry (what ``fedcd train`` runs).

``train_federated`` encodes the dataset, holds out a seeded fraction of students for the
coordinator's evaluation, partitions the rest into clients (IID or Dirichlet by ability),
calibrates the noise multiplier to the epsilon budget when DP is on, trains round by round,
runs the promotion gate (:mod:`federated.gate`) and publishes to the registry
(:mod:`federated.registry`).

Rounds run one at a time so ``progress`` sees each :class:`RoundRecord` as it finishes.
Rounds run through the one round loop every engine shares (:func:`federated.rounds.run_rounds`:
budget stop before a round, ε composed over all rounds); ``fedavg``/``fedprox`` rounds are
:func:`federated.inprocess.fedavg_round` with the same ``rng``, so the draws are those of one
:func:`~federated.inprocess.run_fedavg` call.
``trimmed_mean`` and ``median`` (robust to a few bad clients) aggregate the sampled
clients' updates coordinate-wise with the small pure functions below; they are refused
with client-level DP, whose noise is calibrated to a clipped *sum* of updates (with
student-level DP each update is already private, and any aggregate of them is too).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from federated.accountant import noise_multiplier_for
from federated.data import (
    ResponseTensors,
    dirichlet_partition,
    encode_dataset,
    iid_partition,
    split_student_indices,
)
from federated.dp import poisson_sample, update_nbytes
from federated.publish import HeldOut, PublishOptions, PublishTarget, TrainingRun, TrainResult, gate_and_publish
from federated.inprocess import (AGGREGATIONS, Aggregation, DPMode, FedConfig, RoundRecord, evaluation_mask,
                                 fedavg_round)
from federated.local import LocalConfig, StudentDP, add_update, get_parameters, set_parameters, train_local
from federated.metrics import evaluate_masked
from federated.model import CDModel, Interaction
from federated.hocdm import HigherOrderCDM
from federated.models import DEFAULT_KIND, new_model
from federated.registry import ModelRegistry, model_key
from federated.rounds import run_rounds
from qmatrix import Dataset, example_qmatrix, simulate_dina

__all__ = ["AGGREGATIONS", "DEFAULT_MODEL", "Aggregation", "TrainResult", "TrainingConfig", "coordinate_median",
           "default_model_if_missing", "torch_threads", "train_federated", "trimmed_mean"]

log = logging.getLogger(__name__)
Update = Sequence[np.ndarray]


def trimmed_mean(updates: Sequence[Update], *, trim: float) -> list[np.ndarray]:
    """Coordinate-wise mean after dropping the ``floor(trim * n)`` lowest and highest values (Yin et al. 2018)."""
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5), got {trim}")
    n = len(updates)
    k = min(int(trim * n), (n - 1) // 2)
    return [np.sort(np.stack(arrays), axis=0)[k:n - k].mean(0) for arrays in zip(*updates, strict=True)]


def coordinate_median(updates: Sequence[Update]) -> list[np.ndarray]:
    """Coordinate-wise median of the updates."""
    return [np.median(np.stack(arrays), axis=0) for arrays in zip(*updates, strict=True)]


def warm_start(model: HigherOrderCDM, clients: Sequence[ResponseTensors], *, table: np.ndarray) -> None:
    """Round 0 without DP: every client sends its per-item (sum of scores, responses), the server pools
    them and starts each item's intercept there (``HigherOrderCDM.warm_start``). Under DP these sums
    would be an unprivatised release, so DP runs start from the feature fallback instead."""
    sums = [model.item_sums(c.features, c.item_index, c.observed, c.scores) for c in clients]
    model.warm_start(table, sum(s[0] for s in sums), sum(s[1] for s in sums))


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` torch threads (restored after); the models are tiny, so 1-2 is fastest."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _robust_round(model: CDModel, clients: Sequence[ResponseTensors], evaluation: ResponseTensors,
                  hidden: torch.Tensor, config: FedConfig, rng: np.random.Generator,
                  aggregate: Callable[[list[Update]], list[np.ndarray]]) -> RoundRecord:
    start = time.perf_counter()
    global_params, worker = get_parameters(model), copy.deepcopy(model)
    sampled = poisson_sample(len(clients), config.client_sample_rate, rng)
    results = []
    for c in sampled:
        set_parameters(worker, global_params)
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        results.append(train_local(worker, clients[c], config=config.local, generator=generator,
                                   dp=config.student_dp if config.dp == "student" else None))
    if results:
        add_update(model, aggregate([r.update for r in results]), scale=config.server_lr)
    for c in sampled:  # as in run_fedavg: under DP the public bank, not what clients answered
        model.mark_seen(clients[c].answered_items() if config.dp == "none" else clients[c].item_ids)
    evaluation_result = evaluate_masked(model, evaluation, hidden)
    losses = [r.loss for r in results if r.loss == r.loss]
    norms = [x for r in results for x in r.pre_clip_norms]
    return RoundRecord(round=0, sampled_clients=tuple(int(c) for c in sampled),
                       train_loss=float(np.mean(losses)) if losses else float("nan"),
                       eval_loss=evaluation_result.loss, auc=evaluation_result.auc, epsilon=None,
                       bytes_sent=sum(update_nbytes(r.update) for r in results), seconds=time.perf_counter() - start,
                       student_norm_median=float(np.median(norms)) if norms else None)


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """How :func:`train_federated` trains: the simulated federation, DP, the optimiser and the model (defaults:
    ``fedcd train``'s). Checked on construction, so a refused combination fails before any data is encoded.

    With DP, ``epsilon`` is the budget for the whole run: the noise multiplier is calibrated so
    ``rounds`` rounds spend at most ``epsilon`` (or ``noise_multiplier`` is taken as given), and
    a round that would exceed ``epsilon`` is not run. ``clip_norm`` defaults to 1.0 per student
    (student DP) or 0.1 per client update (client DP). ``threads``: torch threads while training.
    """

    clients: int = 3
    rounds: int = 10
    dp: DPMode = "none"
    epsilon: float | None = None
    delta: float = 1e-5
    aggregation: Aggregation = "fedavg"
    partition: Literal["iid", "dirichlet"] = "iid"
    alpha: float = 0.5
    seed: int = 0
    noise_multiplier: float | None = None
    clip_norm: float | None = None
    client_sample_rate: float = 1.0
    student_sample_rate: float = 0.1
    local_epochs: int = 2
    local_lr: float = 1e-2
    prox_mu: float = 0.01
    trim_fraction: float = 0.2
    heldout_fraction: float = 0.2
    interaction: Interaction = "dina"
    hidden: int = 32
    text_dim: int = 0
    model_kind: str = DEFAULT_KIND
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        if self.aggregation in ("trimmed_mean", "median") and self.dp == "client":
            raise ValueError(f"{self.aggregation} cannot be combined with client-level DP (its noise assumes a "
                             "clipped sum)")
        if self.partition not in ("iid", "dirichlet"):
            raise ValueError(f"partition must be 'iid' or 'dirichlet', got {self.partition!r}")
        if self.clients < 1 or self.rounds < 0 or not 0 < self.heldout_fraction < 1:
            raise ValueError(f"need clients >= 1, rounds >= 0, heldout_fraction in (0, 1); got {self.clients}, "
                             f"{self.rounds}, {self.heldout_fraction}")
        if self.dp != "none" and self.epsilon is None:
            raise ValueError(f"dp={self.dp!r} needs an epsilon budget")
        if self.noise_multiplier is not None and not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier must be > 0, got {self.noise_multiplier}")
        if self.dp == "none" and self.epsilon is not None:
            raise ValueError("epsilon is a DP budget; pass dp='student' or dp='client'")


def train_federated(
    *,
    dataset: Dataset,
    registry: ModelRegistry | str | Path,
    config: TrainingConfig | None = None,
    publish: PublishOptions | None = None,
    tenant: str | None = None,
    progress: Callable[[RoundRecord], None] | None = None,
) -> TrainResult:
    """Train over ``config.clients`` simulated federation members, gate, sign and publish (see the module
    docstring). ``tenant``: the model is that tenant's own (``federated.registry.model_key``), gated against its
    active one. ``progress`` sees each round's record as it finishes."""
    c = config or TrainingConfig()
    started = time.perf_counter()
    target = PublishTarget.open(registry, model_key(dataset.qmatrix.id, tenant))
    rng = np.random.default_rng(c.seed)
    with torch_threads(c.threads):
        model = new_model(c.model_kind, dataset.qmatrix, seed=c.seed, text_dim=c.text_dim, hidden=c.hidden,
                          interaction=c.interaction)
        data = encode_dataset(dataset, table=model.item_table(dataset.qmatrix))
        split = split_student_indices(len(data), rng=rng, validation=0.0, test=c.heldout_fraction)
        train, evaluation = data.subset(split.train), data.subset(split.test)
        parts = (iid_partition(len(train), n_clients=c.clients, rng=rng) if c.partition == "iid" else
                 dirichlet_partition(train.proportion_correct(), n_clients=c.clients, alpha=c.alpha, rng=rng))
        shards = [train.subset(p) for p in parts]
        if c.dp == "none" and c.rounds > 0 and isinstance(model, HigherOrderCDM):  # rounds=0: the untrained model
            warm_start(model, shards, table=data.features.numpy())
        local = LocalConfig(epochs=c.local_epochs, lr=c.local_lr,
                            prox_mu=c.prox_mu if c.aggregation == "fedprox" else 0.0)
        steps = max(1, round(c.local_epochs / c.student_sample_rate)) if c.dp == "student" else 1
        sigma = c.noise_multiplier
        if c.dp != "none" and sigma is None:
            q, total = ((c.student_sample_rate, c.rounds * steps) if c.dp == "student" else
                        (c.client_sample_rate, c.rounds))
            sigma = noise_multiplier_for(target_epsilon=float(c.epsilon or 0), delta=c.delta, sample_rate=q,
                                         steps=total)
        student_dp = StudentDP(noise_multiplier=sigma, clip_norm=c.clip_norm or 1.0, sample_rate=c.student_sample_rate,
                               steps=steps) if c.dp == "student" and sigma else None
        fed = FedConfig(rounds=c.rounds, client_sample_rate=c.client_sample_rate, local=local, dp=c.dp,
                        noise_multiplier=sigma if c.dp == "client" and sigma else 1.0, clip_norm=c.clip_norm or 0.1,
                        student_dp=student_dp, delta=c.delta, epsilon_budget=c.epsilon if c.dp != "none" else None)
        hidden_eval, worker = evaluation_mask(evaluation, fed), copy.deepcopy(model)
        robust = {"trimmed_mean": lambda u: trimmed_mean(u, trim=c.trim_fraction), "median": coordinate_median}

        def play(_: int) -> RoundRecord:
            if c.aggregation in robust:
                return _robust_round(model, shards, evaluation, hidden_eval, fed, rng, robust[c.aggregation])
            return fedavg_round(model, worker, shards, evaluation, hidden_eval, fed, rng)

        history, stop_reason, _ = run_rounds(fed, play, on_round=progress)
        mechanism = fed.round_mechanism()
        config_row = {
            "clients": c.clients, "rounds": c.rounds, "dp": c.dp, "epsilon_budget": c.epsilon, "delta": c.delta,
            "aggregation": c.aggregation, "partition": c.partition, "seed": c.seed,
            "alpha": c.alpha if c.partition == "dirichlet" else None,
            "trim_fraction": c.trim_fraction if c.aggregation == "trimmed_mean" else None,
            "client_sample_rate": c.client_sample_rate, "local_epochs": c.local_epochs, "local_lr": c.local_lr,
            "prox_mu": local.prox_mu, "heldout_fraction": c.heldout_fraction, "model_kind": c.model_kind,
            "noise_multiplier": mechanism[0] if mechanism else None,
            "sample_rate": mechanism[1] if mechanism else None,
            "steps_per_round": mechanism[2] if mechanism else None,
            "clip_norm": (student_dp.clip_norm if student_dp else fed.clip_norm) if c.dp != "none" else None,
        }
        run = TrainingRun(stop_reason=stop_reason, dp=c.dp, delta=c.delta, train_students=len(train),
                          config=config_row, started=started, extra={"tenant": tenant} if tenant is not None else None)
        return gate_and_publish(
            model, history, dataset=dataset, target=target,
            heldout=HeldOut(split.test, evaluation, hidden_eval, fed.eval_mask_frac), run=run,
            options=publish or PublishOptions(),
        )


# The default model: SIMULATED DINA students on the project's example Q-matrix, without DP.
# No real student is in its training data, so DP noise would protect nobody and only cost
# accuracy; the manifest says dp_mode "none", epsilon null and data.simulated true.
DEFAULT_MODEL: dict[str, Any] = {"students": 600, "clients": 3, "rounds": 20, "local_epochs": 2}


def default_model_if_missing(
    registry_dir: str | Path, *, seed: int = 0, key_path: str | Path | None = None, threads: int = 1
) -> str | None:
    """Train and publish the default model if the registry holds no version for the example
    Q-matrix; else do nothing (None)."""
    registry = ModelRegistry(registry_dir, key_path=key_path)
    if registry.list_versions(qmatrix_id=example_qmatrix().id):
        return None
    started = time.perf_counter()
    dataset = simulate_dina(example_qmatrix(), n_students=DEFAULT_MODEL["students"], seed=seed)
    config = TrainingConfig(clients=DEFAULT_MODEL["clients"], rounds=DEFAULT_MODEL["rounds"],
                            local_epochs=DEFAULT_MODEL["local_epochs"], seed=seed, threads=threads)
    result = train_federated(dataset=dataset, registry=registry, config=config)
    log.info("trained the default local-fed model %s in %.1f s (held-out AUC %.3f, SIMULATED data)",
             result.version, time.perf_counter() - started, result.heldout_metrics["auc"])
    return result.version
