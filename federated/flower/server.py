"""The ServerApp's main loop: Flower's fit workflows, our budget stop, evaluation and history.

``DefaultWorkflow`` runs a fixed number of rounds; a DP run must stop *before* the round
that would exceed its budget, so this loop drives Flower's per-round fit workflow itself
(``default_fit_workflow``, or ``SecAggPlusWorkflow`` for secure aggregation) in the
``LegacyContext`` those workflows expect, inside the round loop every engine shares
(:func:`federated.rounds.run_rounds`: steps 1 and 4's charge are its; steps 2-4 are this ServerApp's
round). One round:

1. ask the accountant whether the round would exceed the epsilon budget; stop if so;
2. run the fit workflow: the wrapped strategy Poisson-samples nodes, clients train and
   reply with updates, which are clipped / securely summed / noised and aggregated;
3. if the workflow aggregated nothing (no client sampled, or SecAgg+ halted for lack of
   clients), aggregate an empty round: under client-level DP that still releases noise,
   since skipping it would leak the sample through the model sequence;
4. charge the accountant for the round that ran, evaluate on held-out students, record.

Under student-level DP with an item release, before round 1 every node releases its noisy per-item sums once
(:mod:`federated.flower.release`): the bank starts from them, that start competes as round 0, and the accountant
holds the release before the rounds (``history.json``: ``start_auc`` and ``item_release``). Without DP (no SecAgg+,
plain averaging), every node sends its plain per-item sums instead and the bank starts from them as the in-process
trainer's does (:mod:`federated.flower.warm_start`; not a round-0 candidate, as in process).

Both engines run this same function: the in-process driver (:mod:`federated.flower.engine`)
calls it with an in-memory grid; in the deployment engine the ServerApp in
:mod:`federated.flower.apps` calls it with the SuperLink's grid. After every round it
writes ``history.json`` to the run's ``out-dir`` (the marker the deployment engine reads),
and at the end ``model.pt``: the weights after the round with the best held-out AUC (``FlowerConfig.keep``,
as the in-process trainer keeps them; ``served_round`` in ``history.json``), or after the last.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import flwr.compat.common.recorddict_compat as compat
import numpy as np
import torch
from flwr.app import ConfigRecord, Context
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import LegacyContext, ServerConfig, SimpleClientManager
from flwr.server.client_manager import ClientManager
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key
from flwr.server.workflow.default_workflows import default_fit_workflow
from flwr.serverapp import Grid

from federated.flower.files import load_partition, load_settings
from federated.candidates import release_start
from federated.flower.release import server_release
from federated.flower.strategy import build_strategy
from federated.flower.warm_start import server_warm_start
from federated.inprocess import FedResult, RoundRecord, evaluation_mask
from federated.local import get_parameters, set_parameters
from federated.metrics import evaluate_masked
from federated.rounds import BestRound, run_rounds

__all__ = ["FlowerResult", "FlowerRoundRecord", "read_history", "serve"]


@dataclass(frozen=True)
class FlowerRoundRecord(RoundRecord):
    """A :class:`RoundRecord` plus what only a Flower round has: clients that were sampled but failed."""

    failures: int = 0


@dataclass
class FlowerResult(FedResult):
    """A :class:`FedResult` plus the DP item release, where the run had one: the held-out AUC of its warm start
    where it competed as round 0 (:func:`federated.candidates.release_start`) and what it was
    (``ItemRelease.describe``, the manifest's ``config.training.item_release``)."""

    start_auc: float | None = None
    item_release: dict[str, Any] | None = None


def _register_nodes(grid: Grid, manager: ClientManager, n_clients: int, min_clients: int, timeout: float) -> None:
    """Wait for ``n_clients`` nodes, or, once ``timeout`` is up, start with at least ``min_clients``."""
    deadline = time.monotonic() + timeout
    while True:
        node_ids = sorted(grid.get_node_ids())
        if len(node_ids) >= n_clients:
            break
        if time.monotonic() > deadline:
            if len(node_ids) >= min_clients:
                break
            raise RuntimeError(f"only {len(node_ids)} of {n_clients} nodes connected within {timeout:.0f} s "
                               f"(at least {min_clients} needed)")
        time.sleep(0.5)
    if len(node_ids) > n_clients:
        raise RuntimeError(f"{len(node_ids)} nodes connected, but the run expects {n_clients}")
    for node_id in node_ids:
        manager.register(GridClientProxy(node_id=node_id, grid=grid, run_id=grid.run.run_id))


def _write_history(out_dir: Path, history: list[FlowerRoundRecord], status: str, stop_reason: str | None,
                   nodes: list[int], served_round: int | None = None, start: dict[str, Any] | None = None) -> None:
    payload = {"status": status, "stop_reason": stop_reason, "nodes": nodes, "served_round": served_round,
               **(start or {}), "rounds": [dataclasses.asdict(r) for r in history]}
    tmp = out_dir / "history.json.tmp"
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(out_dir / "history.json")


def read_history(out_dir: Path | str) -> dict[str, Any]:
    """``history.json`` as written by :func:`serve` (status, stop reason, the node ids that took
    part), with rounds as :class:`FlowerRoundRecord`."""
    raw = json.loads((Path(out_dir) / "history.json").read_text())
    rounds = []
    for r in raw["rounds"]:
        r = {**r, "sampled_clients": tuple(r["sampled_clients"]),
             "pre_clip_norms": {int(k): v for k, v in r["pre_clip_norms"].items()}}
        rounds.append(FlowerRoundRecord(**r))
    return {**raw, "rounds": rounds}


def serve(grid: Grid, context: Context, *,
          on_round: Callable[[FlowerRoundRecord], None] | None = None) -> FlowerResult:
    """Run the configured rounds over ``grid``; ``context.run_config`` names ``data-dir`` and ``out-dir``."""
    data_dir, out_dir = Path(str(context.run_config["data-dir"])), Path(str(context.run_config["out-dir"]))
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = load_settings(data_dir)
    config, fed = settings.config, settings.config.fed
    model, evaluation = settings.new_model(), load_partition(data_dir, "evaluation")
    rng = np.random.default_rng(settings.seed)
    manager = SimpleClientManager()
    _register_nodes(grid, manager, settings.n_clients, settings.min_clients, config.node_wait_s)
    node_ids = sorted(int(c) for c in manager.all())  # the nodes that take part
    strategy, updates, sampling = build_strategy(config, n_clients=len(node_ids), rng=rng)  # client DP: q * this
    hidden = evaluation_mask(evaluation, fed)
    release = server_release(grid, node_ids, settings, model=model, table=evaluation.features.numpy(),
                             out_dir=out_dir, rng=rng)
    competing = release_start(model, release, evaluation, hidden, keep=config.keep)  # as the in-process trainer
    server_warm_start(grid, node_ids, settings, model=model, table=evaluation.features.numpy())  # no DP: as in process
    start_auc = competing.auc if competing is not None else None
    start = {"start_auc": start_auc, "item_release": release.describe()} if release is not None else None
    legacy = LegacyContext(context, config=ServerConfig(num_rounds=fed.rounds), strategy=strategy,
                           client_manager=manager)
    state = legacy.state  # RecordDict; its array_records/config_records are snapshots, so always go through it
    state[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(ndarrays_to_parameters(get_parameters(model)), True)
    cfg = ConfigRecord({Key.START_TIME: time.perf_counter(), Key.CURRENT_ROUND: 0})
    state[MAIN_CONFIGS_RECORD] = cfg
    fit = SecAggPlusWorkflow(
        num_shares=config.secagg_num_shares, reconstruction_threshold=config.secagg_threshold, max_weight=1.0,
        clipping_range=fed.clip_norm if config.clips else config.secagg_clipping_range,
        timeout=config.secagg_timeout,
    ) if config.secagg else default_fit_workflow

    def play(r: int) -> FlowerRoundRecord:
        start = time.perf_counter()
        cfg[Key.CURRENT_ROUND] = r
        fit(grid, legacy)
        if r not in updates.logs:  # nothing aggregated: no client sampled, or SecAgg+ halted
            aggregated, _ = strategy.aggregate_fit(r, [], [])
            if aggregated is not None:
                state[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(aggregated, True)
        weights = compat.arrayrecord_to_parameters(state.array_records[MAIN_PARAMS_RECORD], keep_input=True)
        set_parameters(model, parameters_to_ndarrays(weights))
        model.mark_seen(evaluation.item_ids)  # the public item bank, not items clients report answering
        result = evaluate_masked(model, evaluation, hidden)
        log = updates.logs[r]
        losses = [x for x in log.losses if x == x]
        return FlowerRoundRecord(
            round=r,
            sampled_clients=tuple(sorted(log.clients)),
            train_loss=float(np.mean(losses)) if losses else float("nan"),
            eval_loss=result.loss,
            auc=result.auc,
            epsilon=None,  # stamped by the round loop after it charges the accountant
            bytes_sent=log.nbytes,
            seconds=time.perf_counter() - start,
            pre_clip_norms=dict(sorted(log.pre_clip_norms.items())),
            student_norm_median=float(np.median(log.student_norm_medians)) if log.student_norm_medians else None,
            failures=len(sampling.last_sampled) - len(log.clients),
        )

    history: list[FlowerRoundRecord] = []
    best = BestRound(model)  # ASSIST0910-sized banks overfit rare items after the first rounds: keep the best
    if competing is not None:  # the release's start is a model too: it competes
        best(competing)

    def record(done: FlowerRoundRecord) -> None:
        best(done)
        history.append(done)
        _write_history(out_dir, history, "running", None, node_ids, start=start)
        if on_round is not None:
            on_round(done)

    _, stop_reason, accountant = run_rounds(fed, play, on_round=record,
                                            accountant=release.charged() if release is not None else None)
    served = best.restore() if config.keep == "best" else (len(history) or None)
    torch.save(model.state_dict(), out_dir / "model.pt")
    if accountant is not None:
        (out_dir / "accountant.json").write_text(json.dumps(accountant.state_dict()))
    _write_history(out_dir, history, "stopped" if stop_reason else "completed", stop_reason, node_ids, served,
                   start)
    return FlowerResult(model=model, history=list(history), stop_reason=stop_reason, accountant=accountant,
                        served_round=served, start_auc=start_auc,
                        item_release=release.describe() if release is not None else None)
