"""The coordinator of a real federation: a TLS SuperLink that admits only registered nodes, running fedcd's ServerApp.

:func:`coordinate` (what ``fedcd federation coordinator`` runs):

1. writes the coordinator's run folder, which holds **no** student data of any node: the
   FlowerConfig, the starting model, the Q-matrix fingerprint, and the held-out students
   *the coordinator owns* (its own, consented or public, responses), on which it reports
   held-out AUC every round and, afterwards, the promotion gate is judged;
2. starts ``flower-superlink`` with TLS and ``--enable-supernode-auth`` and registers each
   institution's public key (``flwr supernode register``): a node whose key is not
   registered is refused when it connects;
3. submits the app whose ClientApp is :func:`federated.flower.node.make_node_client_app`:
   the ServerApp (:func:`federated.flower.server.serve`) waits for the expected nodes (or,
   after ``node_wait_s``, at least ``min_nodes``) and runs the rounds: Poisson sampling of
   nodes, SecAgg+ when configured, robust aggregation, and the privacy accountant with its
   hard stop before a round that would exceed the ε budget;
4. stops every process it started, and returns the model, history and accountant.

Gating and publishing the model (:func:`federated.publish.publish_federated`) needs no Flower.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


from federated.data import encode_students
from federated.flower.config import FlowerConfig
from federated.flower.deployment import NODE_SOURCE, LinkTLS, SuperLink, write_app
from federated.flower.files import run_config, write_server_run
from federated.flower.processes import ProcessTree, flower_env
from federated.flower.runs import Progress, follow_run, read_result
from federated.flower.server import read_history
from federated.inprocess import FedResult
from federated.models import DEFAULT_KIND, candidate_kinds, new_model
from qmatrix import QMatrix, StudentResponses, qmatrix_fingerprint

__all__ = ["CoordinatorLink", "FederationResult", "StartingModel", "coordinate"]


@dataclass(frozen=True)
class FederationResult:
    fed: FedResult
    run_id: int
    registered: dict[str, int]  # public key file -> node id given at registration
    nodes: list[int]  # the node ids that took part
    seconds: float


@dataclass(frozen=True, kw_only=True)
class CoordinatorLink:
    """The coordinator's SuperLink: where it listens, its TLS, the nodes it admits (their public keys), how many
    must join (``min_nodes``; None: all of them) and how long the whole run may take."""

    tls: LinkTLS
    node_keys: Sequence[Path]
    host: str = "127.0.0.1"
    port: int = 9092
    min_nodes: int | None = None
    timeout_s: float = 3600.0


@dataclass(frozen=True)
class StartingModel:
    """The model a federation starts from: its kind (one of :mod:`federated.models`) and the seed of its weights, of
    node sampling and of every seed the run derives."""

    kind: str = DEFAULT_KIND
    seed: int = 0


def coordinate(*, qmatrix: QMatrix, heldout: Sequence[StudentResponses], link: CoordinatorLink, config: FlowerConfig,
               work_dir: Path, start: StartingModel = StartingModel(), progress: Progress | None = None,
               on_event: Callable[[str], None] | None = None) -> FederationResult:
    """Run one federated training over the nodes whose public keys are ``link.node_keys`` (module docstring).

    ``start.kind``: one kind of :mod:`federated.models`. ``auto`` is refused here: comparing kinds would be one run
    per kind, each spending every node's students' budget, so the operator chooses the kind (e.g. from a simulated
    ``fedcd train --model auto`` on public data). The weights published are those after the best held-out round
    (``FlowerConfig.keep``).

    ``work_dir`` receives ``data/`` (the run folder), ``app/``, ``logs/`` (SuperLink, run) and the
    ServerApp's outputs (``history.json``, ``model.pt``, ``accountant.json``).
    """
    node_keys, tls, min_nodes = link.node_keys, link.tls, link.min_nodes
    if not node_keys:
        raise ValueError("register at least one node's public key")
    if not config.fed.dp.noise_at_clients:
        raise ValueError("a federation of institutions trains with student-level DP (dp='student'): each node adds "
                         "the noise itself, and nodes refuse any other run")
    if not heldout:
        raise ValueError("the coordinator needs held-out students of its own to evaluate and gate the model")
    if len(candidate_kinds(start.kind)) != 1:
        raise ValueError(f"a federation of institutions trains one model kind, not {start.kind!r}: each kind would be "
                         "another run spending every node's students' privacy budget")
    started, say = time.perf_counter(), on_event or (lambda _: None)
    work_dir = Path(work_dir)
    seed = start.seed
    model = new_model(start.kind, qmatrix, seed=seed)
    evaluation = encode_students(qmatrix, list(heldout), table=model.item_table(qmatrix))
    write_server_run(work_dir / "data", config=config, model=model, evaluation=evaluation, seed=seed,
                     n_clients=len(node_keys), min_clients=min_nodes, qmatrix_sha256=qmatrix_fingerprint(qmatrix))
    app_dir = write_app(work_dir / "app", run_config=run_config(work_dir / "data", work_dir), source=NODE_SOURCE)
    home = work_dir / "flwr-home"
    processes = ProcessTree(flower_env(home), work_dir / "logs")
    try:
        superlink = SuperLink(processes, home=home, tls=tls, host=link.host, port=link.port).start()
        say(f"SuperLink listening on {link.host}:{superlink.port} "
            f"(TLS, {'only registered nodes' if tls.authenticate_nodes else 'any node'})")
        registered = {}
        for key in node_keys:
            registered[str(key)] = superlink.register(Path(key))
            say(f"registered node {registered[str(key)]} ({Path(key).name})")
        say(f"waiting for {min_nodes or len(node_keys)}-{len(node_keys)} nodes (up to {config.node_wait_s:.0f} s), "
            f"then {config.fed.rounds} rounds")
        run_id, _ = follow_run(superlink, app_dir, work_dir, progress=progress, timeout_s=link.timeout_s)
    finally:
        processes.close()
        shutil.rmtree(home, ignore_errors=True)
    return FederationResult(fed=read_result(work_dir, work_dir / "data"), run_id=run_id, registered=registered,
                            nodes=list(read_history(work_dir)["nodes"]), seconds=time.perf_counter() - started)
