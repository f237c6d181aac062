"""Gate and publish a trained model: coordinator-side held-out metrics, the promotion gate,
then a signed registry entry, for the model's Q-matrix. Shared by the in-process trainer, the
Flower simulation and a real federation (``fedcd federation coordinator``), so a model is
judged the same way whichever engine trained it: in simulation on held-out students split off
the dataset, in a federation on the held-out students the coordinator owns."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from federated.data import ResponseTensors, encode_dataset, encode_students, hidden_mask, split_student_indices
from federated.gate import GateDecision, GatePolicy, promotion_gate
from federated.inprocess import FedConfig, FedResult, RoundRecord
from federated.local import LocalConfig
from federated.metrics import evaluate_masked
from federated.model import CDModel
from federated.modes import DPMode, NoDP, StudentLevelDP, dp_mode
from federated.predict import predict_mastery_batch
from federated.active import utc_now
from federated.registry import ModelRegistry
from qmatrix import Dataset, QMatrix, StudentResponses

__all__ = ["HeldOut", "PublishOptions", "PublishTarget", "TrainResult", "TrainingRun", "gate_and_publish",
           "publish_federated", "publish_trained"]


def _history_row(record: RoundRecord, dp: DPMode) -> dict[str, Any]:
    """One round of the manifest's history. Under DP no ``train_loss``: the training students' mean loss is
    outside the privacy accounting (held-out metrics are on students the coordinator holds, not trained on)."""
    row: dict[str, Any] = {"round": record.round, "clients": len(record.sampled_clients),
                           "eval_loss": record.eval_loss, "auc": record.auc, "epsilon": record.epsilon,
                           "bytes_sent": record.bytes_sent, "seconds": round(record.seconds, 3)}
    if dp.reveals_train_loss:
        row["train_loss"] = record.train_loss
    return row


@dataclass
class TrainResult:
    version: str | None  # None when the gate refused (see ``decision``) or no round ran
    history: list[RoundRecord]
    manifest: dict[str, Any] | None
    decision: GateDecision
    stop_reason: str | None
    heldout_metrics: dict[str, Any]
    model: CDModel
    seconds: float
    epsilon: float | None = None  # what the whole run spent under DP (every candidate kind's rounds composed)
    selection: dict[str, Any] | None = None  # the candidate kinds' held-out AUCs and the one chosen (the manifest's)

    @property
    def published(self) -> bool:
        return self.version is not None



@dataclass(frozen=True, kw_only=True)
class PublishOptions:
    """How the gate's verdict is acted on: ``gate`` (None: :class:`GatePolicy`'s defaults), ``force`` (publish even
    when refused; recorded as forced) and ``activate`` (make the published version the active one)."""

    gate: GatePolicy | None = None
    force: bool = False
    activate: bool = True


@dataclass(frozen=True)
class PublishTarget:
    """The registry a model is published to, and its active model for the same key (what the gate compares with)."""

    registry: ModelRegistry
    active: Any  # the loaded active version (None: there is none)
    active_version: str | None

    @classmethod
    def open(cls, registry: ModelRegistry | str | Path, key: str) -> PublishTarget:
        """The registry (opened from a folder if need be) and its active version for ``key``, loaded now so a
        tampered active model fails before any training, not after."""
        registry = registry if isinstance(registry, ModelRegistry) else ModelRegistry(registry)
        active_version = registry.active_version(key)
        return cls(registry, registry.load(active_version) if active_version else None, active_version)


@dataclass(frozen=True)
class HeldOut:
    """The students the coordinator judges a model on: their indices in the dataset, their encoded responses, and
    which of those responses are hidden from the model (``mask_fraction`` of them)."""

    students: np.ndarray
    tensors: ResponseTensors
    hidden: torch.Tensor
    mask_fraction: float


@dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """What a trainer reports about its run for the manifest: why it stopped, its DP mode and δ, how many students
    it trained on (None: unknown to the coordinator), its configuration, and when it started (``time.perf_counter``).
    ``extra`` adds (or replaces) top-level manifest fields. ``epsilon``: the ε the whole run spent, where it is
    more than the published model's own history says (several candidate kinds trained on the same students);
    None: the history's last ε."""

    stop_reason: str | None
    dp: DPMode
    delta: float
    train_students: int | None
    config: dict[str, Any]
    started: float
    extra: dict[str, Any] | None = None
    epsilon: float | None = None


def gate_and_publish(
    model: CDModel,
    history: list[RoundRecord],
    *,
    dataset: Dataset,
    target: PublishTarget,
    heldout: HeldOut,
    run: TrainingRun,
    options: PublishOptions,
) -> TrainResult:
    """Coordinator-side held-out metrics, the promotion gate, then a signed publish (any engine)."""
    final = evaluate_masked(model, heldout.tensors, heldout.hidden)
    heldout_students = [dataset.students[int(i)] for i in heldout.students]
    metrics: dict[str, Any] = {"auc": final.auc, "loss": final.loss, "n_students": final.n_students,
                               "n_responses": final.n_responses, "mask_fraction": heldout.mask_fraction}
    if dataset.true_mastery:  # SIMULATED data: compare with the known mastery too
        predicted = predict_mastery_batch(model, dataset.qmatrix, heldout_students)
        errors = [abs(p[c] - dataset.true_mastery[s.student_id][c])
                  for p, s in zip(predicted, heldout_students, strict=True) for c in dataset.qmatrix.concepts]
        metrics["true_mastery_mae"] = float(np.mean(errors))
    stop_reason, dp = run.stop_reason, run.dp
    if not history and options.force:  # e.g. rounds=0: the untrained model, published only on request (ablations)
        decision = GateDecision(accepted=True, reasons=(f"no round ran ({stop_reason or 'rounds=0'}); forced",),
                                forced=True)
    elif not history:
        decision = GateDecision(accepted=False, reasons=(f"no round ran: {stop_reason}",))
    elif not any(r.sampled_clients for r in history):  # e.g. every node refused the run: the model never moved
        decision = GateDecision(accepted=False, reasons=("no client contributed an update in any round",))
    else:
        decision = promotion_gate(model, active=target.active.model if target.active else None,
                                  qmatrix=dataset.qmatrix, heldout=heldout_students,
                                  active_version=target.active_version, policy=options.gate, force=options.force)
    version = manifest = None
    spent = (run.epsilon if run.epsilon is not None else history[-1].epsilon if history else None) \
        if dp.private else None
    if decision.accepted:
        version, manifest = target.registry.publish(model, activate=options.activate, manifest={
            "trained_at": utc_now(), "rounds": len(history), "stop_reason": stop_reason,
            "dp_mode": dp.name, "epsilon": spent, "delta": run.delta if dp.private else None,
            "heldout_metrics": metrics, "qmatrix_id": dataset.qmatrix.id,
            "items": {item.id: list(item.concepts) for item in dataset.qmatrix.items},
            "data": {"name": dataset.name, "simulated": dataset.simulated, "students": len(dataset.students),
                     "train_students": run.train_students, "heldout_students": len(heldout.tensors)},
            "gate": decision.to_dict(), "forced": decision.forced,
            "history": [_history_row(h, dp) for h in history],
            "config": {"training": run.config}, **(run.extra or {}),
        })
    return TrainResult(version=version, history=history, manifest=manifest, decision=decision,
                       stop_reason=stop_reason, heldout_metrics=metrics, model=model,
                       seconds=time.perf_counter() - run.started, epsilon=spent,
                       selection=(run.extra or {}).get("model_selection"))


def publish_trained(
    fed: Any,
    *,
    dataset: Dataset,
    registry: ModelRegistry | str | Path,
    options: dict[str, Any],
    force: bool = False,
    heldout_fraction: float = 0.2,
    gate: GatePolicy | None = None,
) -> TrainResult:
    """Gate and publish a model trained elsewhere (the Flower engine), on the same held-out students:
    the split is re-derived with the same seed and call as both trainers use."""
    started = time.perf_counter()
    target = PublishTarget.open(registry, dataset.qmatrix.id)
    rng = np.random.default_rng(options.get("seed", 0))
    data = encode_dataset(dataset, table=fed.model.item_table(dataset.qmatrix))
    split = split_student_indices(len(data), rng=rng, validation=0.0, test=heldout_fraction)
    evaluation = data.subset(split.test)
    accountant = getattr(fed, "accountant", None)
    selection = getattr(fed, "selection", None)
    delta = options.get("delta", 1e-5)
    extra = {"model_selection": selection} if selection else {}
    run = TrainingRun(
        stop_reason=getattr(fed, "stop_reason", None), dp=dp_mode(options.get("dp", NoDP())), delta=delta,
        train_students=len(split.train), config={**options, "engine": "flower", "accountant": accountant is not None,
                                                 "item_release": getattr(fed, "item_release", None)},
        started=started, extra={**extra, **_accounting(accountant, delta)} or None,
        # several candidate kinds trained on the same students: the composed accountant, not the chosen run's history
        epsilon=accountant.get_epsilon(delta) if accountant is not None and len(accountant) else None,
    )
    return gate_and_publish(
        fed.model, list(fed.history), dataset=dataset, target=target,
        heldout=HeldOut(split.test, evaluation, _server_mask(evaluation), _EVAL.eval_mask_frac), run=run,
        options=PublishOptions(gate=gate, force=force),
    )


def _accounting(accountant: Any, delta: float) -> dict[str, Any]:
    """The manifest's ``privacy_accounting`` (every charged event, the item release first) where there is one."""
    return {"privacy_accounting": accountant.record(delta).to_json()} if accountant is not None else {}


# The held-out mask every ServerApp evaluates with (FedConfig's defaults), so the gate sees the same responses.
_EVAL = FedConfig(rounds=1, local=LocalConfig())


def _server_mask(evaluation: ResponseTensors) -> torch.Tensor:
    return hidden_mask(evaluation.observed, frac=_EVAL.eval_mask_frac,
                       generator=torch.Generator().manual_seed(_EVAL.eval_seed))


def publish_federated(
    fed: FedResult,
    *,
    qmatrix: QMatrix,
    heldout: Sequence[StudentResponses],
    registry: ModelRegistry | str | Path,
    options: dict[str, Any],
    federation: dict[str, Any],
    force: bool = False,
    gate: GatePolicy | None = None,
) -> TrainResult:
    """Gate and publish a model a federation of institutions trained (``fedcd federation coordinator``),
    judged on ``heldout``: the students the coordinator owns, the same ones (and hidden responses)
    its ServerApp reported AUC on each round. ``federation`` (nodes, TLS, node authentication,
    SecAgg+, what ε means) goes into the manifest; the coordinator knows nothing of the nodes'
    students, so the manifest records no count of them."""
    started = time.perf_counter()
    target = PublishTarget.open(registry, qmatrix.id)
    students = list(heldout)
    dataset = Dataset(name=f"federation:{qmatrix.id}", qmatrix=qmatrix, students=students)
    evaluation = encode_students(qmatrix, students, table=fed.model.item_table(qmatrix))
    data = {"name": dataset.name, "simulated": None, "nodes": federation.get("nodes"), "train_students": None,
            "heldout_students": len(students), "heldout": "students the coordinator owns"}
    delta = options.get("delta", 1e-5)
    run = TrainingRun(
        stop_reason=fed.stop_reason, dp=dp_mode(options.get("dp", StudentLevelDP())), delta=delta,
        train_students=None, started=started,
        config={**options, "engine": "flower-deployment", "item_release": getattr(fed, "item_release", None)},
        extra={"data": data, "federation": federation, **_accounting(fed.accountant, delta)},
    )
    return gate_and_publish(
        fed.model, list(fed.history), dataset=dataset, target=target,
        heldout=HeldOut(np.arange(len(students)), evaluation, _server_mask(evaluation), _EVAL.eval_mask_frac),
        run=run, options=PublishOptions(gate=gate, force=force),
    )


