"""An in-process FedAvg driver: the reference loop, with no Ray, no Flower and no network.

One round: (1) ask the accountant whether the round would exceed the epsilon budget and stop
*before* running it if so; (2) Poisson-sample clients; (3) each trains locally from the
global weights; (4) aggregate; (5) apply; (6) charge the accountant for the round that ran;
(7) evaluate on held-out students (a fixed, seeded 20% of each one's responses hidden).

Aggregation, what is clipped and noised, and what the server may learn are the DP mode's
(:mod:`federated.modes`: :class:`~federated.modes.NoDP`, :class:`~federated.modes.ClientLevelDP`,
:class:`~federated.modes.StudentLevelDP`); a robust rule (trimmed mean, median) may take the place of the
mode's mean (:mod:`federated.candidates`), in the same round body, :func:`fedavg_round`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch

from federated.accountant import PrivacyAccountant
from federated.data import ResponseTensors, hidden_mask
from federated.dp import poisson_sample, update_nbytes
from federated.local import LocalConfig, LocalResult, StudentDP, add_update, get_parameters, set_parameters, train_local
from federated.metrics import evaluate_masked
from federated.modes import DPMode, NoDP, average_rows, dp_mode
from federated.rounds import run_rounds
from federated.model import CDModel

__all__ = ["AGGREGATIONS", "Aggregate", "Aggregation", "DPMode", "FedConfig", "FedResult", "RoundRecord",
           "average_rows", "evaluation_mask", "fedavg_round", "run_fedavg"]

# Server-side aggregation rules, one list for every engine (in-process and Flower).
Aggregation = Literal["fedavg", "fedprox", "trimmed_mean", "median"]
AGGREGATIONS: tuple[str, ...] = ("fedavg", "fedprox", "trimmed_mean", "median")


@dataclass(frozen=True)
class FedConfig:
    """Everything a run needs besides data and randomness. Checked on construction. ``dp``: the DP mode (a name,
    ``"none"``, ``"student"`` or ``"client"``, is looked up in :func:`federated.modes.dp_mode`)."""

    rounds: int = 10
    client_sample_rate: float = 1.0
    local: LocalConfig = field(default_factory=LocalConfig)
    dp: DPMode = NoDP()
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
        object.__setattr__(self, "dp", dp_mode(self.dp))
        self.dp.check(self)
        if self.epsilon_budget is not None and (not self.dp.private or not self.epsilon_budget > 0):
            raise ValueError("epsilon_budget needs a DP mode and a value > 0")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")

    def round_mechanism(self) -> tuple[float, float, int] | None:
        """(noise_multiplier, sample_rate, steps) charged per round, or None without DP."""
        return self.dp.round_mechanism(self)


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


class Aggregate(Protocol):
    """The server's rule for one round (a DP mode's :meth:`~federated.modes.DPMode.aggregate`, or a robust rule):
    the update from the sampled clients' results (None: no update) and the pre-clip norms it measured."""

    def __call__(self, results: list[LocalResult], *, n_clients: int, fed: FedConfig, rng: np.random.Generator,
                 like: list[np.ndarray]) -> tuple[list[np.ndarray] | None, dict[int, float]]: ...


def fedavg_round(model: CDModel, worker: CDModel, clients: Sequence[ResponseTensors], evaluation: ResponseTensors,
                 hidden: torch.Tensor, config: FedConfig, rng: np.random.Generator,
                 aggregate: Aggregate | None = None) -> RoundRecord:
    """One round (steps 2-5 and 7 of the module docstring), the one round body of every in-process trainer;
    ``worker`` is scratch space for local training; ``aggregate``: the server's rule (None: the DP mode's).

    The record's ``round`` and ``epsilon`` are filled in by :func:`federated.rounds.run_rounds`."""
    start = time.perf_counter()
    global_params = get_parameters(model)
    sampled = poisson_sample(len(clients), config.client_sample_rate, rng)
    results: list[LocalResult] = []
    for c in sampled:
        set_parameters(worker, global_params)
        generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
        results.append(train_local(worker, clients[c], config=config.local, generator=generator,
                                   dp=config.dp.local_dp(config)))
    update, norms = (aggregate or config.dp.aggregate)(results, n_clients=len(clients), fed=config, rng=rng,
                                                        like=global_params)
    if update is not None:
        add_update(model, update, scale=config.server_lr)
    for c in sampled:  # under DP the public bank, not the items clients report answering
        model.mark_seen(config.dp.seen_items(clients[c]))
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
