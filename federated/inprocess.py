"""An in-process FedAvg driver: the reference loop, with no Ray, no Flower and no network.

One round: (1) ask the accountant whether the round would exceed the epsilon budget and stop
*before* running it if so; (2) Poisson-sample clients; (3) each trains locally from the
global weights; (4) aggregate; (5) apply; (6) charge the accountant for the round that ran;
(7) evaluate on held-out students (a fixed, seeded 20% of each one's responses hidden).

Aggregation by DP mode:

* ``none``: FedAvg weighted by client size, over the sampled clients.
* ``client`` (client-level DP, McMahan et al. 2018): each client's whole update is clipped
  to L2 norm C (pre-clip norms are logged per client per round), the clipped updates are
  summed with EQUAL weight, N(0, (sigma C)^2) is added, and the sum is divided by the
  *expected* number of clients q N. A fixed denominator keeps the sensitivity of the mean
  at C / (q N); dividing by the realised count would make it data-dependent. Noise is
  released even when no client was sampled.
* ``student``: each client runs student-level DP-SGD (:mod:`federated.local`); sampled
  clients' updates are averaged with equal weights (client sizes are not released). The
  accountant charges every round's local steps at the configured (sigma, q) whether or not
  a given student's client was sampled, an upper bound on every student's epsilon.

In DP modes the global model marks the whole public item bank as seen, rather than the
items clients report answering, which would be an unprivatised release.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from federated.accountant import PrivacyAccountant
from federated.data import ResponseTensors, hidden_mask
from federated.dp import add_gaussian_noise, clip_update, poisson_sample, update_nbytes
from federated.local import LocalConfig, LocalResult, StudentDP, add_update, get_parameters, set_parameters, train_local
from federated.metrics import evaluate_masked
from federated.rounds import run_rounds
from federated.model import CDModel

__all__ = ["AGGREGATIONS", "Aggregation", "DPMode", "FedConfig", "FedResult", "RoundRecord", "average_rows",
           "evaluation_mask", "fedavg_round", "run_fedavg"]

DPMode = Literal["none", "student", "client"]
# Server-side aggregation rules, one list for every engine (in-process and Flower).
Aggregation = Literal["fedavg", "fedprox", "trimmed_mean", "median"]
AGGREGATIONS: tuple[str, ...] = ("fedavg", "fedprox", "trimmed_mean", "median")


@dataclass(frozen=True)
class FedConfig:
    """Everything a run needs besides data and randomness. Checked on construction."""

    rounds: int = 10
    client_sample_rate: float = 1.0
    local: LocalConfig = field(default_factory=LocalConfig)
    dp: DPMode = "none"
    noise_multiplier: float = 1.0  # client mode
    clip_norm: float = 1.0  # client mode
    student_dp: StudentDP | None = None  # student mode
    epsilon_budget: float | None = None
    delta: float = 1e-5
    server_lr: float = 1.0
    eval_mask_frac: float = 0.2
    eval_seed: int = 0

    def __post_init__(self) -> None:
        if self.rounds < 0 or not 0 < self.client_sample_rate <= 1 or not self.server_lr > 0:
            raise ValueError(f"need rounds >= 0, client_sample_rate in (0, 1], server_lr > 0: {self}")
        if self.dp not in ("none", "student", "client"):
            raise ValueError(f"dp must be 'none', 'student' or 'client', got {self.dp!r}")
        if self.dp == "client" and (not self.noise_multiplier > 0 or not self.clip_norm > 0):
            raise ValueError("client-level DP needs noise_multiplier > 0 and clip_norm > 0")
        if self.dp == "student" and (self.student_dp is None or not self.student_dp.noise_multiplier > 0):
            raise ValueError("student-level DP needs student_dp with noise_multiplier > 0")
        if self.epsilon_budget is not None and (self.dp == "none" or not self.epsilon_budget > 0):
            raise ValueError("epsilon_budget needs a DP mode and a value > 0")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")

    def round_mechanism(self) -> tuple[float, float, int] | None:
        """(noise_multiplier, sample_rate, steps) charged per round, or None without DP."""
        if self.dp == "client":
            return self.noise_multiplier, self.client_sample_rate, 1
        if self.dp == "student" and self.student_dp is not None:
            return self.student_dp.noise_multiplier, self.student_dp.sample_rate, self.student_dp.steps
        return None


@dataclass(frozen=True)
class RoundRecord:
    round: int  # 1-based
    sampled_clients: tuple[int, ...]
    train_loss: float  # mean local loss of sampled clients (NaN if none, and under DP: federated.rounds)
    eval_loss: float
    auc: float  # held-out AUC after this round
    epsilon: float | None  # total spent after this round (PLD), None without DP
    bytes_sent: int  # client -> server, updates as float32
    seconds: float
    pre_clip_norms: dict[int, float] = field(default_factory=dict)  # client mode: client -> update norm
    student_norm_median: float | None = None  # student mode: median per-student gradient norm


@dataclass
class FedResult:
    """A finished run: the model (its weights those of ``served_round``, when the trainer keeps the best round;
    None: the last), every round's record, why it stopped early, its accountant; ``selection``: where several kinds
    were fitted, the record of the choice (``federated.candidates.selection_record``)."""

    model: CDModel
    history: list[RoundRecord]
    stop_reason: str | None
    accountant: PrivacyAccountant | None
    served_round: int | None = None
    selection: dict[str, Any] | None = None


def _aggregate(
    results: list[LocalResult], n_clients: int, config: FedConfig, rng: np.random.Generator, like: list[np.ndarray]
) -> tuple[list[np.ndarray] | None, dict[int, float]]:
    if config.dp == "client":
        total = [np.zeros_like(a) for a in like]
        norms: dict[int, float] = {}
        for i, result in enumerate(results):
            clipped, norms[i] = clip_update(result.update, clip_norm=config.clip_norm)
            total = [t + c for t, c in zip(total, clipped, strict=True)]
        noisy = add_gaussian_noise(total, noise_multiplier=config.noise_multiplier, clip_norm=config.clip_norm, rng=rng)
        expected = config.client_sample_rate * n_clients
        return [a / expected for a in noisy], norms
    if not results:
        return None, {}
    weights = np.ones(len(results)) if config.dp == "student" else np.array([r.n_students for r in results], float)
    weights = weights / weights.sum()
    out = [sum(w * r.update[k] for w, r in zip(weights, results, strict=True)) for k in range(len(like))]
    if config.dp == "none":  # per-item parameters: averaged over the clients that saw each item
        for k in results[0].row_weights:
            out[k] = average_rows([r.update[k] for r in results], [r.row_weights[k] for r in results])
    return out, {}


def average_rows(updates: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> np.ndarray:
    """Row-wise weighted mean of per-row updates (rows no client weighted stay 0).

    Item parameters are rows; a client's weight for a row is its responses to that item, so an
    item is averaged over the clients that saw it, as many times as they saw it.
    """
    w = np.stack(weights)  # (clients, rows)
    total = w.sum(0)
    stacked = np.stack(updates)  # (clients, rows, ...)
    shape = (len(updates), -1) + (1,) * (stacked.ndim - 2)
    summed = (stacked * w.reshape(shape)).sum(0)
    return np.where(total.reshape((-1,) + (1,) * (stacked.ndim - 2)) > 0,
                    summed / np.maximum(total, 1e-12).reshape((-1,) + (1,) * (stacked.ndim - 2)), 0.0)


def fedavg_round(model: CDModel, worker: CDModel, clients: Sequence[ResponseTensors], evaluation: ResponseTensors,
                 hidden: torch.Tensor, config: FedConfig, rng: np.random.Generator) -> RoundRecord:
    """One FedAvg round (steps 2-5 and 7 of the module docstring); ``worker`` is scratch space for local training.

    The record's ``round`` and ``epsilon`` are filled in by :func:`federated.rounds.run_rounds`."""
    start = time.perf_counter()
    global_params = get_parameters(model)
    sampled = poisson_sample(len(clients), config.client_sample_rate, rng)
    results: list[LocalResult] = []
    for c in sampled:
        set_parameters(worker, global_params)
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        results.append(train_local(worker, clients[c], config=config.local, generator=generator,
                                   dp=config.student_dp if config.dp == "student" else None))
    update, norms = _aggregate(results, len(clients), config, rng, global_params)
    if update is not None:
        add_update(model, update, scale=config.server_lr)
    for c in sampled:  # under DP the public bank, not the items clients report answering
        model.mark_seen(clients[c].answered_items() if config.dp == "none" else clients[c].item_ids)
    evaluation_result = evaluate_masked(model, evaluation, hidden)
    student_norms = [x for res in results for x in res.pre_clip_norms]
    losses = [res.loss for res in results if res.loss == res.loss]
    return RoundRecord(
        round=0,
        sampled_clients=tuple(int(c) for c in sampled),
        train_loss=float(np.mean(losses)) if losses else float("nan"),
        eval_loss=evaluation_result.loss,
        auc=evaluation_result.auc,
        epsilon=None,
        bytes_sent=sum(update_nbytes(res.update) for res in results),
        seconds=time.perf_counter() - start,
        pre_clip_norms={int(sampled[i]): n for i, n in norms.items()},
        student_norm_median=float(np.median(student_norms)) if student_norms else None,
    )


def evaluation_mask(evaluation: ResponseTensors, config: FedConfig) -> torch.Tensor:
    """The held-out responses every round is evaluated on (seeded: the same in every engine)."""
    return hidden_mask(evaluation.observed, frac=config.eval_mask_frac,
                       generator=torch.Generator().manual_seed(config.eval_seed))


def run_fedavg(
    model: CDModel,
    clients: Sequence[ResponseTensors],
    evaluation: ResponseTensors,
    *,
    config: FedConfig,
    rng: np.random.Generator,
) -> FedResult:
    """Train ``model`` (in place) by FedAvg over ``clients``; evaluate on ``evaluation`` each round."""
    if not clients:
        raise ValueError("need at least one client")
    hidden, worker = evaluation_mask(evaluation, config), copy.deepcopy(model)
    history, stop_reason, accountant = run_rounds(
        config, lambda _: fedavg_round(model, worker, clients, evaluation, hidden, config, rng))
    return FedResult(model=model, history=history, stop_reason=stop_reason, accountant=accountant)
