"""Federated training on Flower (1.42): each institution a ClientApp holding only its own students.

:mod:`federated` itself never imports Flower; this subpackage wraps its pieces:

* :mod:`~federated.flower.config`: :class:`FlowerConfig` (a :class:`~federated.FedConfig`
  plus aggregation rule and SecAgg+), which refuses SecAgg+ with trimmed mean / median.
* :mod:`~federated.flower.strategy`: Flower's own FedAvg, FedProx, FedTrimmedAvg and
  FedMedian (legacy ``Strategy`` API, the one SecAgg+ runs with), wrapped for Poisson client
  sampling, per-update L2 clipping with logged pre-clip norms, equal weights, and
  client-level Gaussian noise from an injected generator.
* :mod:`~federated.flower.client`: the ClientApp (local or student-level DP-SGD training,
  Flower's ``secaggplus_mod`` when the run uses SecAgg+).
* :mod:`~federated.flower.server`: the ServerApp loop (accountant, hard budget stop,
  held-out evaluation, ``history.json``).
* :mod:`~federated.flower.release`: under student-level DP, the one DP release of per-item sums before the
  rounds (each client noises its own at the full σ; the server pools them and warm-starts the bank), as in process.
* :mod:`~federated.flower.warm_start`: without DP (no SecAgg+, plain averaging), the in-process trainer's plain
  warm start from the clients' pooled per-item sums, before round 1.
* Two engines running the same apps: :mod:`~federated.flower.engine` (in process, an
  in-memory ``Grid``; no Ray, no network) and :mod:`~federated.flower.deployment`
  (``flower-superlink`` + ``flower-supernode`` processes; :mod:`~federated.flower.processes`
  starts and ends them, :mod:`~federated.flower.runs` submits and follows a run).
* :func:`train_flower`: SIMULATION, what ``fedcd train --engine flower`` calls: one dataset
  partitioned into institutions (in process, or SuperNodes on 127.0.0.1).
* A real federation of institutions (``fedcd federation``): :mod:`~federated.flower.credentials`
  (CA, SuperLink certificate, node key pairs), :mod:`~federated.flower.coordinator` (TLS
  SuperLink admitting only registered nodes, the ServerApp, held-out students of its own)
  and :mod:`~federated.flower.node` (a SuperNode whose ClientApp reads only its own CSV and
  trains with student-level DP-SGD).
"""

from federated.flower.client import CDClient, make_client_app, secagg_if_configured
from federated.flower.config import AGGREGATIONS, Aggregation, FlowerConfig
from federated.flower.coordinator import CoordinatorLink, FederationResult, StartingModel, coordinate
from federated.flower.credentials import Credentials, make_credentials, make_node_key
from federated.flower.deployment import LinkTLS, LocalFederation, SuperLink, supernode_command, write_app
from federated.flower.engine import LocalGrid, run_grid, run_inprocess
from federated.flower.files import (
    ClientSettings,
    RunSettings,
    client_settings,
    load_partition,
    load_settings,
    run_config,
    write_run,
    write_server_run,
)
from federated.flower.node import Node, NodeClient, NodeData, NodeLink, check_run, load_node_data, make_node_client_app
from federated.flower.processes import ProcessTree, flower_env, free_port
from federated.flower.runs import follow_run, read_result
from federated.flower.release import ItemReleaseMod, ReleaseInputs
from federated.flower.server import FlowerResult, FlowerRoundRecord, read_history, serve
from federated.flower.strategy import (
    ClientSeeds,
    ClientUpdates,
    PoissonSampling,
    RoundLog,
    StrategyWrapper,
    build_strategy,
)
from federated.flower.train import FlowerDeployment, FlowerTraining, plan_config, train_flower

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "CDClient",
    "ClientSeeds",
    "ClientSettings",
    "ClientUpdates",
    "Credentials",
    "CoordinatorLink",
    "StartingModel",
    "FederationResult",
    "FlowerConfig",
    "FlowerResult",
    "FlowerRoundRecord",
    "ItemReleaseMod",
    "LinkTLS",
    "LocalFederation",
    "LocalGrid",
    "Node",
    "NodeClient",
    "NodeData",
    "NodeLink",
    "PoissonSampling",
    "ProcessTree",
    "ReleaseInputs",
    "RoundLog",
    "RunSettings",
    "StrategyWrapper",
    "SuperLink",
    "build_strategy",
    "check_run",
    "client_settings",
    "coordinate",
    "flower_env",
    "follow_run",
    "free_port",
    "load_node_data",
    "load_partition",
    "load_settings",
    "make_client_app",
    "make_credentials",
    "make_node_client_app",
    "make_node_key",
    "FlowerDeployment",
    "FlowerTraining",
    "plan_config",
    "read_history",
    "read_result",
    "run_config",
    "run_grid",
    "run_inprocess",
    "secagg_if_configured",
    "serve",
    "supernode_command",
    "train_flower",
    "write_app",
    "write_run",
    "write_server_run",
]
