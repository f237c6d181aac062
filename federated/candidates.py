"""Candidate model kinds in one training run: each trained on the same students, kept at its best round, one chosen.

:func:`federated.train.train_federated` fits every kind ``model_kind`` names (``auto``: every kind of
``federated.models.CANDIDATE_KINDS``) on the same split, shards and round draws, keeps each kind's weights after
its best round on the coordinator's held-out students (:class:`federated.rounds.BestRound`), and publishes the
kind with the best held-out AUC. Under DP every kind's rounds are charged to one accountant: what is published
depends on all of them. Also here: the robust aggregation rules and the non-DP warm start the rounds use.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from federated.accountant import PrivacyAccountant
from federated.data import ResponseTensors, Split, encode_dataset
from federated.inprocess import Aggregate, FedConfig, RoundRecord, evaluation_mask, fedavg_round
from federated.item_release import ItemRelease
from federated.itembank import ItemBank
from federated.local import LocalResult
from federated.metrics import evaluate_masked
from federated.models import DiagnosisModel, new_model
from federated.modes import DPMode
from federated.rounds import BestRound, run_rounds
from qmatrix import Dataset

if TYPE_CHECKING:
    from federated.train import TrainingConfig

__all__ = ["Fitted", "Plan", "RobustRule", "Start", "choose", "coordinate_median", "fit_candidate", "release_start",
           "selection_record", "selection_rule", "trimmed_mean", "warm_start"]

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


def warm_start(model: ItemBank, clients: Sequence[ResponseTensors], *, table: np.ndarray) -> None:
    """Round 0 without DP: every client sends its per-item (sum of scores, responses), the server pools
    them and starts each item's intercept there (``ItemBank.warm_start``). Under DP these sums
    would be an unprivatised release, so DP runs start from the feature fallback instead. The Flower engines make
    the same start from the same sums where they trust client-claimed counts (:mod:`federated.flower.warm_start`)."""
    sums = [model.item_sums(c.features, c.item_index, c.observed, c.scores) for c in clients]
    model.warm_start(table, sum(s[0] for s in sums), sum(s[1] for s in sums))


class RobustRule:
    """A robust rule (trimmed mean, median) in place of the DP mode's mean, as an
    :class:`~federated.inprocess.Aggregate`: every sampled client's update counts once, whatever it claims (no
    weights, no per-item counts)."""

    def __init__(self, rule: Callable[[list[Update]], list[np.ndarray]]) -> None:
        self.rule = rule

    def __call__(self, results: list[LocalResult], *, n_clients: int, fed: FedConfig, rng: np.random.Generator,
                 like: list[np.ndarray]) -> tuple[list[np.ndarray] | None, dict[int, float]]:
        return (self.rule([r.update for r in results]) if results else None), {}


@dataclass(frozen=True)
class Start:
    """The starting weights as :class:`~federated.rounds.BestRound` reads a round: round 0 and its held-out AUC."""

    auc: float
    round: int = 0


def release_start(model: DiagnosisModel, release: ItemRelease | None, evaluation: ResponseTensors,
                  hidden: torch.Tensor, *, keep: str) -> Start | None:
    """Warm-start ``model``'s bank from the DP item release (post-processing: the release is charged where it is
    made) and return the start as round 0 where it competes with the rounds (``keep == "best"``): every engine's
    start (the in-process trainer's and the Flower ServerApp's). None: no release, no item bank (a kind without
    one, e.g. one reusing an earlier kind's release, starts as it is), or ``keep == "last"``, where the start is no
    candidate and its AUC is not measured.

    The release's warm start is itself a model: round 0 competes with the DP-SGD rounds (chosen on the
    coordinator's held-out students, free), so noisy rounds that only blur it are not what gets served."""
    if release is None or not isinstance(model, ItemBank):
        return None
    release.warm_start(model, evaluation.features.numpy())
    return Start(evaluate_masked(model, evaluation, hidden).auc) if keep == "best" else None


@dataclass(frozen=True)
class Plan:
    """What every candidate kind of one run shares: the same held-out and training students, shards, federation
    settings and round draws (``rng_state``), so their held-out AUCs compare like with like."""

    config: TrainingConfig
    dataset: Dataset
    split: Split
    parts: list[np.ndarray]
    fed: FedConfig
    rng_state: dict[str, Any]
    release: ItemRelease | None = None  # student-level DP: the per-item sums every kind starts from


@dataclass
class Fitted:
    kind: str
    model: DiagnosisModel
    history: list[RoundRecord]
    stop_reason: str | None
    served_round: int | None  # the round whose weights are kept (None: no round with a finite AUC)
    evaluation: ResponseTensors
    hidden: torch.Tensor
    seconds: float
    start_auc: float | None = None  # held-out AUC of the start, where it is a candidate (round 0: the DP release's)

    @property
    def auc(self) -> float:
        if self.served_round == 0 and self.start_auc is not None:
            return self.start_auc
        best = [r.auc for r in self.history if r.round == self.served_round]
        return best[0] if best else float("nan")

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "heldout_auc": self.auc, "served_round": self.served_round,
                "start_heldout_auc": self.start_auc,
                "rounds_run": len(self.history), "stop_reason": self.stop_reason, "seconds": round(self.seconds, 2)}


def fit_candidate(kind: str, plan: Plan, accountant: PrivacyAccountant | None,
         progress: Callable[[RoundRecord], None] | None) -> tuple[Fitted, PrivacyAccountant | None]:
    """Train one candidate kind on the plan's shards; its weights are those of its best held-out round."""
    c, started = plan.config, time.perf_counter()
    model = new_model(kind, plan.dataset.qmatrix, seed=c.seed, text_dim=c.text_dim, hidden=c.hidden,
                      interaction=c.interaction)
    data = encode_dataset(plan.dataset, table=model.item_table(plan.dataset.qmatrix))
    train, evaluation = data.subset(plan.split.train), data.subset(plan.split.test)
    shards = [train.subset(p) for p in plan.parts]
    hidden, fed = evaluation_mask(evaluation, plan.fed), plan.fed
    start = None
    if c.rounds > 0:  # rounds=0: the untrained model
        if c.dp.reveals_counts and isinstance(model, ItemBank):
            warm_start(model, shards, table=data.features.numpy())
        else:  # already charged: every kind post-processes the same release
            start = release_start(model, plan.release, evaluation, hidden, keep=c.keep)
    rng = np.random.default_rng()
    rng.bit_generator.state = copy.deepcopy(plan.rng_state)
    worker = copy.deepcopy(model)
    robust: dict[str, Aggregate] = {"trimmed_mean": RobustRule(lambda u: trimmed_mean(u, trim=c.trim_fraction)),
                                    "median": RobustRule(coordinate_median)}
    aggregate = robust.get(c.aggregation)  # None: the DP mode's own mean

    def play(_: int) -> RoundRecord:
        return fedavg_round(model, worker, shards, evaluation, hidden, fed, rng, aggregate)

    best = BestRound(model)
    if start is not None:
        best(start)

    def seen(record: RoundRecord) -> None:
        best(record)
        if progress is not None:
            progress(record)

    history, stop_reason, accountant = run_rounds(fed, play, on_round=seen, accountant=accountant)
    served = best.restore() if c.keep == "best" else (len(history) or None)
    return Fitted(kind, model, history, stop_reason, served, evaluation, hidden,
                  time.perf_counter() - started, start.auc if start is not None else None), accountant


def choose(fitted: Sequence[Fitted]) -> Fitted:
    """The candidate with the best held-out AUC (a NaN counts as worst; the first of equals, so the default kind
    wins a tie)."""
    return max(fitted, key=lambda f: f.auc if f.auc == f.auc else float("-inf"))


def selection_rule(dp: DPMode) -> str:
    """How the published kind is chosen (every trainer, every engine), and what that means under DP."""
    rule = ("every candidate kind trained on the same students and shards; the published one has the highest "
            "held-out AUC on the coordinator's held-out students (never trained on), each at its best round")
    if dp.private:
        rule += ("; choosing by those held-out students costs no privacy, but every candidate trained on the "
                 "training students, so the epsilon recorded is all candidates' rounds composed")
    return rule


def selection_record(fitted: Sequence[Fitted], chosen: Fitted, dp: DPMode) -> dict[str, Any]:
    """The manifest's record of the choice: every candidate's held-out AUC (at its served round) and the rule."""
    return {"chosen": chosen.kind, "served_round": chosen.served_round, "rule": selection_rule(dp),
            "candidates": [f.describe() for f in fitted]}
