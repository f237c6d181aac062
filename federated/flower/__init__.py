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
* Two engines running the same apps: :mod:`~federated.flower.engine` (in process, an
  in-memory ``Grid``; no Ray, no network) and :mod:`~federated.flower.deployment`
  (``flower-superlink`` + ``flower-supernode`` processes on 127.0.0.1, offline).
* :func:`train_flower`: what a CLI calls.
"""

from federated.flower.client import CDClient, make_client_app, secagg_if_configured
from federated.flower.config import AGGREGATIONS, Aggregation, FlowerConfig
from federated.flower.deployment import LocalFederation, flower_env, write_app
from federated.flower.engine import LocalGrid, run_inprocess
from federated.flower.files import RunSettings, load_partition, load_settings, write_run
from federated.flower.server import FlowerRoundRecord, read_history, serve
from federated.flower.strategy import (
    ClientSeeds,
    ClientUpdates,
    PoissonSampling,
    RoundLog,
    StrategyWrapper,
    build_strategy,
)
from federated.flower.train import train_flower

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "CDClient",
    "ClientSeeds",
    "ClientUpdates",
    "FlowerConfig",
    "FlowerRoundRecord",
    "LocalFederation",
    "LocalGrid",
    "PoissonSampling",
    "RoundLog",
    "RunSettings",
    "StrategyWrapper",
    "build_strategy",
    "flower_env",
    "load_partition",
    "load_settings",
    "make_client_app",
    "read_history",
    "run_inprocess",
    "secagg_if_configured",
    "serve",
    "train_flower",
    "write_app",
    "write_run",
]
