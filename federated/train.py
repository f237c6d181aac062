"""One call from a dataset to a signed, gated model in the registry (what ``fedcd train`` runs).

``train_federated`` encodes the dataset, holds out a seeded fraction of students for the
coordinator's evaluation, partitions the rest into clients (IID or Dirichlet by ability),
calibrates the noise multiplier to the epsilon budget when DP is on, trains round by round,
runs the promotion gate (:mod:`federated.gate`) and publishes to the registry
(:mod:`federated.registry`).

Rounds run one at a time so ``progress`` sees each :class:`RoundRecord` as it finishes.
Rounds run through the one round loop every engine shares (:func:`federated.rounds.run_rounds`:
budget stop before a round, ε composed over all rounds); every round is the one round body,
:func:`federated.inprocess.fedavg_round`, with the same ``rng``, so the draws are those of one
:func:`~federated.inprocess.run_fedavg` call. The DP mode (:mod:`federated.modes`) owns the clipping, noise,
weights and what the server may learn. ``trimmed_mean`` and ``median`` (robust to a few bad clients) take the
place of the mode's mean and aggregate the sampled clients' updates coordinate-wise (:mod:`federated.candidates`);
they are refused with client-level DP, whose noise is calibrated to a clipped *sum* of updates (with
student-level DP each update is already private, and any aggregate of them is too).

``model_kind="auto"`` (the default) trains every candidate kind and publishes the one with the best
held-out AUC on the coordinator's held-out students, each at its best round (:mod:`federated.candidates`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from federated.candidates import (Plan, choose, coordinate_median, fit_candidate, selection_record, trimmed_mean,
                                  warm_start)
from federated.data import (ResponseTensors, dirichlet_partition, encode_dataset, iid_partition,
                            split_student_indices)
from federated.inprocess import AGGREGATIONS, Aggregation, FedConfig, RoundRecord
from federated.item_release import DEFAULT_RELEASE_SHARE, ItemRelease, check_release_share, release_for_training
from federated.itembank import ItemBank
from federated.local import LocalConfig, StudentDP
from federated.model import Interaction
from federated.models import AUTO, DEFAULT_KIND, candidate_kinds, new_model
from federated.modes import DPMode, NoDP, calibrate, dp_mode
from federated.publish import HeldOut, PublishOptions, PublishTarget, TrainingRun, TrainResult, gate_and_publish
from federated.registry import ModelRegistry, model_key
from qmatrix import Dataset, example_qmatrix, simulate_dina

__all__ = ["AGGREGATIONS", "DEFAULT_MODEL", "Aggregation", "TrainResult", "TrainingConfig", "coordinate_median",
           "default_model_if_missing", "torch_threads", "train_federated", "trimmed_mean", "warm_start"]

log = logging.getLogger(__name__)


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

@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """How :func:`train_federated` trains: the simulated federation, DP, the optimiser and the model (defaults:
    ``fedcd train``'s). Checked on construction, so a refused combination fails before any data is encoded.

    With DP, ``epsilon`` is the budget for the whole run: the noise multiplier is calibrated so
    ``rounds`` rounds spend at most ``epsilon`` (or ``noise_multiplier`` is taken as given), and
    a round that would exceed ``epsilon`` is not run. ``clip_norm`` defaults to 1.0 per student
    (student DP) or 0.1 per client update (client DP). ``threads``: torch threads while training.

    ``model_kind``: one of ``federated.models.MODEL_KINDS``, or ``auto`` (the default): fit every kind of
    ``CANDIDATE_KINDS`` on the same students and publish the one with the best held-out AUC. Under DP the
    candidates compose: the noise is calibrated so all of them together spend at most ``epsilon``.
    ``keep``: publish each kind's weights after its ``best`` held-out round (the default), or after the ``last``
    round (kept to measure what the choice of round buys, docs/results/local-fed-kinds).
    ``item_release_share``: under student-level DP, the share of ``epsilon`` spent once on releasing per-item and
    per-item-group sums that start the item parameters (``federated.item_release``); the rounds get the rest, with
    the per-item parameters held fixed. 0: DP-SGD over every parameter, no release. ``rounds=0`` (the untrained
    model) makes no release either.
    ``dp``: the DP mode (:mod:`federated.modes`; a name, ``"none"``, ``"student"`` or ``"client"``, is looked up).
    """

    clients: int = 3
    rounds: int = 10
    dp: DPMode = NoDP()
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
    model_kind: str = AUTO
    keep: Literal["best", "last"] = "best"
    threads: int | None = None
    item_release_share: float = DEFAULT_RELEASE_SHARE

    @property
    def releases_item_sums(self) -> bool:
        """Student-level DP spends ``item_release_share`` of ε on releasing per-item sums (federated.item_release)
        and trains the rest with the per-item parameters held fixed; 0 trains everything by DP-SGD alone. A run of
        ``rounds=0`` is the untrained model: it never starts from the release, so none is made and no ε is spent (as
        on Flower: ``federated.flower.config.releases_item_sums``)."""
        return self.dp.releases_item_sums and self.item_release_share > 0 and self.rounds > 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "dp", dp_mode(self.dp))
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        if self.aggregation in ("trimmed_mean", "median") and self.dp.noise_at_server:
            raise ValueError(f"{self.aggregation} cannot be combined with {self.dp.label} (its noise assumes a "
                             "clipped sum)")
        if self.partition not in ("iid", "dirichlet"):
            raise ValueError(f"partition must be 'iid' or 'dirichlet', got {self.partition!r}")
        if self.clients < 1 or self.rounds < 0 or not 0 < self.heldout_fraction < 1:
            raise ValueError(f"need clients >= 1, rounds >= 0, heldout_fraction in (0, 1); got {self.clients}, "
                             f"{self.rounds}, {self.heldout_fraction}")
        if self.dp.private and self.epsilon is None:
            raise ValueError(f"dp={self.dp.name!r} needs an epsilon budget")
        if self.noise_multiplier is not None and not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier must be > 0, got {self.noise_multiplier}")
        if not self.dp.private and self.epsilon is not None:
            raise ValueError("epsilon is a DP budget; pass dp='student' or dp='client'")
        candidate_kinds(self.model_kind)  # raises for an unknown kind
        if self.keep not in ("best", "last"):
            raise ValueError(f"keep must be 'best' or 'last', got {self.keep!r}")
        check_release_share(self.item_release_share)

def item_release(c: TrainingConfig, kind: str, dataset: Dataset, shards: list[ResponseTensors], *, table: np.ndarray,
                 rng: np.random.Generator) -> ItemRelease | None:
    """The run's release of per-item sums under student-level DP (``federated.item_release``), or None: no DP, a
    share of 0, no rounds (the untrained model), or a kind without an item bank (the evidence encoder)."""
    if not c.releases_item_sums:
        return None
    model = new_model(kind, dataset.qmatrix, seed=c.seed)
    if not isinstance(model, ItemBank):
        return None
    return release_for_training(model, shards, table=table, epsilon=float(c.epsilon or 0) * c.item_release_share,
                                delta=c.delta, seed=int(rng.integers(2**62)))


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
    active one. ``progress`` sees each round's record as it finishes (every candidate kind's, in turn)."""
    c = config or TrainingConfig()
    started = time.perf_counter()
    kinds = candidate_kinds(c.model_kind)
    target = PublishTarget.open(registry, model_key(dataset.qmatrix.id, tenant))
    rng = np.random.default_rng(c.seed)
    with torch_threads(c.threads):
        proportion = encode_dataset(dataset, table=new_model(kinds[0], dataset.qmatrix, seed=c.seed).item_table(
            dataset.qmatrix))
        split = split_student_indices(len(proportion), rng=rng, validation=0.0, test=c.heldout_fraction)
        train = proportion.subset(split.train)
        parts = (iid_partition(len(train), n_clients=c.clients, rng=rng) if c.partition == "iid" else
                 dirichlet_partition(train.proportion_correct(), n_clients=c.clients, alpha=c.alpha, rng=rng))
        local = LocalConfig(epochs=c.local_epochs, lr=c.local_lr,
                            prox_mu=c.prox_mu if c.aggregation == "fedprox" else 0.0)
        shards = [train.subset(p) for p in parts]
        release = item_release(c, kinds[0], dataset, shards, table=proportion.features.numpy(), rng=rng)
        fed = c.dp.configure(
            FedConfig(rounds=c.rounds, client_sample_rate=c.client_sample_rate, local=local,
                      clip_norm=c.clip_norm or 0.1, delta=c.delta),
            epsilon_budget=c.epsilon, student=lambda: StudentDP(
                noise_multiplier=c.noise_multiplier or 1.0, clip_norm=c.clip_norm or 1.0,
                sample_rate=c.student_sample_rate, steps=max(1, round(c.local_epochs / c.student_sample_rate)),
                frozen=("item_delta",) if release else ()))
        if c.noise_multiplier is not None:
            fed = c.dp.with_noise(fed, c.noise_multiplier)
        else:  # the budget covers every candidate's rounds (they compose), after the item release
            fed = calibrate(fed, epsilon=float(c.epsilon or 0), candidates=len(kinds),
                            prior=release.events if release else ())
        plan = Plan(c, dataset, split, parts, fed, copy.deepcopy(rng.bit_generator.state), release)
        fitted, accountant = [], release.charged() if release else None
        for kind in kinds:
            one, accountant = fit_candidate(kind, plan, accountant, progress)
            fitted.append(one)
        chosen = choose(fitted)
        mechanism = fed.round_mechanism()
        config_row = {
            "clients": c.clients, "rounds": c.rounds, "dp": c.dp.name, "epsilon_budget": c.epsilon, "delta": c.delta,
            "aggregation": c.aggregation, "partition": c.partition, "seed": c.seed,
            "alpha": c.alpha if c.partition == "dirichlet" else None,
            "trim_fraction": c.trim_fraction if c.aggregation == "trimmed_mean" else None,
            "client_sample_rate": c.client_sample_rate, "local_epochs": c.local_epochs, "local_lr": c.local_lr,
            "prox_mu": local.prox_mu, "heldout_fraction": c.heldout_fraction, "model_kind": c.model_kind,
            "keep": c.keep,
            "noise_multiplier": mechanism[0] if mechanism else None,
            "sample_rate": mechanism[1] if mechanism else None,
            "steps_per_round": mechanism[2] if mechanism else None,
            "clip_norm": c.dp.clip_norm(fed),
            "item_release": release.describe() if release else None,
        }
        extra: dict[str, Any] = {"model_selection": selection_record(fitted, chosen, c.dp)}
        if accountant is not None:  # every release in order: the guarantee per student, reproducible from here
            extra["privacy_accounting"] = accountant.record(c.delta).to_json()  # the manifest's JSON, made here
        if tenant is not None:
            extra["tenant"] = tenant
        run = TrainingRun(stop_reason=chosen.stop_reason, dp=c.dp, delta=c.delta, train_students=len(train),
                          config=config_row, started=started, extra=extra,
                          epsilon=accountant.get_epsilon(c.delta) if accountant is not None and len(accountant)
                          else None)
        return gate_and_publish(
            chosen.model, chosen.history, dataset=dataset, target=target,
            heldout=HeldOut(split.test, chosen.evaluation, chosen.hidden, fed.eval_mask_frac), run=run,
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
    # One kind: choosing between kinds on SIMULATED students says nothing, and this runs before the first request.
    config = TrainingConfig(clients=DEFAULT_MODEL["clients"], rounds=DEFAULT_MODEL["rounds"],
                            local_epochs=DEFAULT_MODEL["local_epochs"], seed=seed, threads=threads,
                            model_kind=DEFAULT_KIND)
    result = train_federated(dataset=dataset, registry=registry, config=config)
    log.info("trained the default local-fed model %s in %.1f s (held-out AUC %.3f, SIMULATED data)",
             result.version, time.perf_counter() - started, result.heldout_metrics["auc"])
    return result.version
