"""``train_flower``: the one call a CLI or job makes to train on Flower, in either engine.

It splits a dataset's students into held-out evaluation students and ``clients``
institutions (IID, or ability-skewed Dirichlet), writes the run folder
(:mod:`federated.flower.files`), and runs it: in this process by default, or with
``deployment=True`` on a local SuperLink with one SuperNode per client
(:mod:`federated.flower.deployment`). Either way it returns a
:class:`~federated.inprocess.FedResult` whose history holds
:class:`~federated.flower.server.FlowerRoundRecord` rows, and leaves in ``out_dir``:
``history.json`` (per-round history and status), ``model.pt`` (the weights after the best held-out round),
``accountant.json`` (DP runs), ``data/`` and, for deployment, ``app/`` and ``logs/``.

With DP and an ``epsilon``, the noise multiplier is calibrated (PLD) so that all planned
rounds fit the budget, and the accountant still stops the run before any round that would
exceed it. Under student-level DP, ``item_release_share`` of ε goes first to one release of per-item sums
(:mod:`federated.flower.release`, the in-process trainer's release made by the clients), the rounds' noise is
calibrated on top of it, and the rounds hold the per-item parameters fixed.

``model_kind="auto"`` (the default, as for the in-process trainer) runs one Flower run per candidate kind of
:mod:`federated.models` on the same split and institutions (``out_dir/candidates/<kind>``) and keeps the one with the
best held-out AUC at its best round; its files are copied to ``out_dir`` and ``FedResult.selection`` records every
candidate. Under DP the candidates' rounds compose: the noise is calibrated for all of them, and the result's
accountant holds every candidate's steps, and the item release once (the first kind's run makes it, the later kinds
reuse it).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from federated.data import dirichlet_partition, encode_dataset, iid_partition, split_student_indices
from federated.flower.config import Aggregation, FlowerConfig, item_release_noise
from federated.flower.deployment import LocalFederation, write_app
from federated.flower.engine import run_inprocess
from federated.flower.files import run_config, write_run
from federated.flower.release import RELEASE_FILE
from federated.item_release import DEFAULT_RELEASE_SHARE, charged, check_release_share, release_events
from federated.flower.runs import follow_run, read_result
from federated.flower.server import FlowerResult, FlowerRoundRecord
from federated.inprocess import FedResult
from federated.itembank import ItemBank
from federated.local import StudentDP
from federated.accountant import PrivacyAccountant
from federated.candidates import selection_rule
from federated.models import AUTO, candidate_kinds, new_model
from federated.modes import DPMode, NoDP, calibrate, dp_mode
from qmatrix import Dataset

__all__ = ["FlowerDeployment", "FlowerTraining", "plan_config", "train_flower"]

Progress = Callable[[FlowerRoundRecord], None]


def plan_config(base: FlowerConfig | None, *, rounds: int, dp: DPMode | str, epsilon: float | None, delta: float,
                secagg: bool, aggregation: Aggregation, candidates: int = 1) -> FlowerConfig:
    """``base`` with these fields; with DP and ``epsilon``, the noise multiplier calibrated (PLD) so that
    all ``rounds`` of all ``candidates`` kinds (trained on the same students, so they compose) fit the budget.
    ``dp``: a mode of :mod:`federated.modes`, or its name. Where the result releases item sums (``base
    .item_release_share`` under student-level DP, ``FlowerConfig.releases_item_sums``), the rounds are calibrated
    after that release and hold ``item_delta`` fixed."""
    base, mode = base or FlowerConfig(), dp_mode(dp)
    if epsilon is not None and not mode.private:
        raise ValueError("an epsilon budget needs dp='student' or dp='client'")
    student = base.fed.student_dp or StudentDP(noise_multiplier=1.0, clip_norm=1.0, sample_rate=0.2, steps=5)
    fed = mode.configure(dataclasses.replace(base.fed, rounds=rounds, dp=NoDP(), epsilon_budget=None, delta=delta),
                         epsilon_budget=epsilon, student=lambda: student)
    sigma = item_release_noise(fed, base.item_release_share)
    if sigma is not None:  # the rounds hold item_delta fixed after the release (FlowerConfig refuses one without it)
        fed = dataclasses.replace(fed, student_dp=dataclasses.replace(
            student, frozen=tuple(sorted({*student.frozen, "item_delta"}))))
    if epsilon is not None:
        fed = calibrate(fed, epsilon=epsilon, candidates=candidates, prior=release_events(sigma) if sigma else ())
    return dataclasses.replace(base, fed=fed, secagg=secagg, aggregation=aggregation)


def _deploy(out_dir: Path, n_clients: int, progress: Progress | None, timeout_s: float,
            flower_home: Path | None) -> FedResult:
    app_dir = write_app(out_dir / "app", run_config=run_config(out_dir / "data", out_dir))
    home = Path(flower_home) if flower_home is not None else Path(tempfile.mkdtemp(prefix="fedcd-flwr-home-"))
    nodes = [{"partition-id": i, "num-partitions": n_clients} for i in range(n_clients)]
    try:
        with LocalFederation(nodes, home=home, log_dir=out_dir / "logs") as federation:
            follow_run(federation.link, app_dir, out_dir, progress=progress, timeout_s=timeout_s)
    finally:
        if flower_home is None:
            shutil.rmtree(home, ignore_errors=True)
    return read_result(out_dir, out_dir / "data")


@dataclass(frozen=True, kw_only=True)
class FlowerTraining:
    """What one Flower training run is: ``clients`` institutions split from the dataset (IID, or ability-skewed
    Dirichlet with ``alpha``) after ``test_fraction`` of the students are held out, ``rounds`` rounds, DP and its
    budget, secure aggregation and the aggregation rule. These override the base :class:`FlowerConfig`'s fields."""

    clients: int
    rounds: int
    dp: DPMode = NoDP()  # a name ("none", "student", "client") is looked up (federated.modes)
    epsilon: float | None = None
    delta: float = 1e-5
    secagg: bool = False
    aggregation: Aggregation = "fedavg"
    seed: int = 0
    partition: Literal["iid", "dirichlet"] = "iid"
    alpha: float = 0.5
    test_fraction: float = 0.2
    model_kind: str = AUTO  # a kind of federated.models, or auto: every candidate kind, the best held-out one kept
    item_release_share: float = DEFAULT_RELEASE_SHARE  # student-level DP: ε's share for the item release (0: none), as in process

    def __post_init__(self) -> None:
        object.__setattr__(self, "dp", dp_mode(self.dp))
        candidate_kinds(self.model_kind)  # raises for an unknown kind
        check_release_share(self.item_release_share)


@dataclass(frozen=True, kw_only=True)
class FlowerDeployment:
    """Run on a local SuperLink with one SuperNode per client instead of in this process. ``flower_home`` is the
    ``FLWR_HOME`` of every Flower process (None: a temporary folder, removed afterwards); a run that has not ended
    after ``timeout_s`` is stopped."""

    timeout_s: float = 3600.0
    flower_home: Path | str | None = None


def train_flower(
    *,
    dataset: Dataset,
    plan: FlowerTraining,
    out_dir: Path | str,
    config: FlowerConfig | None = None,
    deployment: FlowerDeployment | None = None,
    progress: Progress | None = None,
) -> FedResult:
    """Train a :class:`~federated.model.CDModel` on ``dataset`` as ``plan`` says, over Flower clients.

    ``config`` supplies everything else (local training, q, clip norm, secagg and trimming
    parameters); ``plan`` overrides its fields. ``progress`` is called with
    each round's record as it completes (in deployment, as the ServerApp reports it).
    In deployment, ``run-status.json`` in ``out_dir`` keeps what
    ``flwr ls`` reported for the run; a run that did not end ``finished:completed`` raises
    ``RuntimeError`` with the tail of its log.
    Raises ``ValueError`` for refused combinations (e.g. ``secagg`` with a robust
    aggregation) before anything runs.
    """
    kinds = candidate_kinds(plan.model_kind)
    # Under DP every candidate trains on the same students: the noise is calibrated for all their rounds composed,
    # after the item release (made by the first kind's run, which needs an item bank; the later kinds reuse it).
    banked = isinstance(new_model(kinds[0], dataset.qmatrix, seed=plan.seed), ItemBank)
    base = dataclasses.replace(config or FlowerConfig(), item_release_share=plan.item_release_share if banked else 0.0)
    flower_config = plan_config(base, rounds=plan.rounds, dp=plan.dp, epsilon=plan.epsilon, delta=plan.delta,
                                secagg=plan.secagg, aggregation=plan.aggregation, candidates=len(kinds))
    out_dir = Path(out_dir)
    if len(kinds) == 1:  # its files are already in out_dir
        return _chosen([(kinds[0], _train_kind(kinds[0], dataset, plan, out_dir, flower_config, deployment, progress))],
                       out_dir, flower_config)
    fitted: list[tuple[str, FedResult]] = []
    for kind in kinds:
        release = out_dir / "candidates" / kinds[0] / RELEASE_FILE  # the first kind's run saved it (if any)
        fitted.append((kind, _train_kind(kind, dataset, plan, out_dir / "candidates" / kind, flower_config,
                                         deployment, progress, release if kind != kinds[0] and release.exists() else None)))
    return _chosen(fitted, out_dir, flower_config)


def _start_auc(result: FedResult) -> float | None:
    return result.start_auc if isinstance(result, FlowerResult) else None


def _served_auc(result: FedResult) -> float:
    start = _start_auc(result)
    auc = [start] if result.served_round == 0 and start is not None else \
        [r.auc for r in result.history if r.round == result.served_round]
    return float(auc[0]) if auc and auc[0] == auc[0] else float("-inf")


def _composed(fitted: list[tuple[str, FedResult]], config: FlowerConfig) -> PrivacyAccountant | None:
    """Every candidate's charges on one accountant, as the in-process trainer charges them: the item release once
    (the first kind's run made it; the later kinds post-processed the same one), then every kind's rounds that ran,
    each charged the round's mechanism. Each run's own accountant holds the release and its own rounds (its budget
    stop and per-round ε are its own); a run whose accountant holds anything else is refused, so no charge is lost."""
    fed = config.fed
    if not fed.dp.private:
        return None
    release = release_events(config.item_release_noise) if config.item_release_noise is not None else ()
    mechanism = fed.round_mechanism()
    rounds = [[mechanism] * len(r.history) if mechanism is not None else [] for _, r in fitted]
    for (kind, r), own in zip(fitted, rounds, strict=True):
        if r.accountant is not None and r.accountant.history != charged([*release, *own]).history:
            raise RuntimeError(f"the {kind} run was charged more than the item release and its rounds")
    return charged([*release, *(step for own in rounds for step in own)])


def _chosen(fitted: list[tuple[str, FedResult]], out_dir: Path, config: FlowerConfig) -> FedResult:
    """The candidate with the best held-out AUC at its served round (the first of equals: the default kind wins a
    tie), its files copied to ``out_dir``, the accountant of every candidate's rounds composed, and the record of the
    choice, as the in-process trainer makes it (``federated.candidates``)."""
    dp, delta = config.fed.dp, config.fed.delta
    kind, chosen = max(fitted, key=lambda kr: _served_auc(kr[1]))
    source = out_dir / "candidates" / kind
    for name in ("history.json", "model.pt", "accountant.json"):
        if (source / name).exists():
            shutil.copyfile(source / name, out_dir / name)
    composed = _composed(fitted, config)
    selection = {"chosen": kind, "served_round": chosen.served_round, "rule": selection_rule(dp), "candidates": [
        {"kind": k, "heldout_auc": _served_auc(r) if r.history else float("nan"), "served_round": r.served_round,
         "start_heldout_auc": _start_auc(r), "rounds_run": len(r.history), "stop_reason": r.stop_reason}
        for k, r in fitted]}
    if composed is not None:
        selection["epsilon_composed"] = composed.get_epsilon(delta)
    return dataclasses.replace(chosen, accountant=composed or chosen.accountant, selection=selection)


def _train_kind(kind: str, dataset: Dataset, plan: FlowerTraining, out_dir: Path, flower_config: FlowerConfig,
                deployment: FlowerDeployment | None, progress: Progress | None, release: Path | None = None
                ) -> FedResult:
    """One Flower run of one model kind on the plan's split and institutions (the same for every kind: seeded);
    ``release``: an earlier kind's item release, which this run reuses instead of asking the clients again."""
    model = new_model(kind, dataset.qmatrix, seed=plan.seed)
    data = encode_dataset(dataset, table=model.item_table(dataset.qmatrix))
    rng = np.random.default_rng(plan.seed)
    split = split_student_indices(len(data), rng=rng, validation=0.0, test=plan.test_fraction)
    train, evaluation = data.subset(split.train), data.subset(split.test)
    if plan.partition == "iid":
        parts = iid_partition(len(train), n_clients=plan.clients, rng=rng)
    elif plan.partition == "dirichlet":
        parts = dirichlet_partition(train.proportion_correct(), n_clients=plan.clients, alpha=plan.alpha, rng=rng,
                                    min_size=2)
    else:
        raise ValueError(f"partition must be 'iid' or 'dirichlet', got {plan.partition!r}")
    write_run(out_dir / "data", config=flower_config, model=model, clients=[train.subset(p) for p in parts],
              evaluation=evaluation, seed=plan.seed)
    if release is not None:
        shutil.copyfile(release, out_dir / "data" / RELEASE_FILE)
    if deployment is not None:
        home = None if deployment.flower_home is None else Path(deployment.flower_home)
        return _deploy(out_dir, plan.clients, progress, deployment.timeout_s, home)
    return run_inprocess(out_dir / "data", out_dir, on_round=progress)
