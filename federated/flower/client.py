"""The ClientApp: one institution, holding only its own students, training the shared model.

A client receives the global weights, trains locally with :func:`federated.local.train_local`
(plain, or student-level DP-SGD where *the client itself* adds the noise) and replies with
its **update** (new - global weights), not its weights. Updates are small, so SecAgg+ can
quantise them into a narrow range; and a client can clip its own update, which it must do
under SecAgg+, where the server never sees an individual update to clip.

Reported metrics (partition id, local loss, pre-clip update norm, median per-student
gradient norm) are computed from local data without privacy: they are for logging in
simulation. The ClientApp of a real federation (:mod:`federated.flower.node`) sends none.

The example count sent back is the number of students, and the per-item response counts ride
after the update, only for plain FedAvg/FedProx without DP or SecAgg+
(:attr:`FlowerConfig.equal_weights`); otherwise the count is 1 and no per-item counts are sent,
so the server's equal weighting matches what clients claim (under SecAgg+ the weight travels
inside the masked vector, where the server could not check it; trimmed mean and median ignore
claimed counts, which a malicious client could inflate at will).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from flwr.app import Context, Message
from flwr.client import Client, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.common import NDArrays, Scalar

from federated.data import ResponseTensors
from federated.dp import clip_update, l2_norm
from federated.flower.config import FlowerConfig
from federated.flower.files import RunSettings, client_settings, load_partition, load_settings
from federated.flower.release import ItemReleaseMod, ReleaseInputs
from federated.flower.warm_start import ItemSumsMod, SumsInputs
from federated.local import LocalResult, get_parameters, set_parameters, train_local
from federated.model import CDModel
from federated.models import build_model

__all__ = ["CDClient", "make_client_app", "secagg_if_configured"]


def _seeded_generator(config: dict[str, Scalar]) -> torch.Generator:
    """Randomness for sampling, masking and DP noise: in simulation the seed the server drew for this client and
    this round (or release), so runs reproduce."""
    if "seed" not in config:
        raise ValueError("fit config carries no 'seed': the server must draw one per client and round")
    return torch.Generator().manual_seed(int(config["seed"]))


class CDClient(NumPyClient):
    """Trains ``model`` on ``data`` (one partition) from the weights the server sends."""

    def __init__(self, model: CDModel, data: ResponseTensors, *, config: FlowerConfig,
                 partition_id: int | None = None) -> None:
        if len(data) == 0:
            raise ValueError(f"partition {partition_id} holds no students" if partition_id is not None
                             else "this node holds no students")
        self.model, self.data, self.config, self.partition_id = model, data, config, partition_id

    def get_parameters(self, config: dict[str, Scalar]) -> NDArrays:
        return get_parameters(self.model)

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        fed = self.config.fed
        set_parameters(self.model, parameters)
        local = fed.local
        if "proximal_mu" in config:  # sent by Flower's FedProx
            local = dataclasses.replace(local, prox_mu=float(config["proximal_mu"]))
        result = train_local(self.model, self.data, config=local, generator=self.generator(config),
                             dp=fed.dp.local_dp(fed))
        update, norm = result.update, l2_norm(result.update)
        if self.config.secagg and self.config.clips:
            update, norm = clip_update(update, clip_norm=fed.clip_norm)
        metrics = self.metrics(result, norm)
        if not self.config.equal_weights and result.row_weights:
            # per-item parameters are averaged over the clients that saw each item (federated.inprocess);
            # with plain averaging and no DP the counts ride after the update, named by the parameters they weigh
            rows = sorted(result.row_weights)
            update = [*update, *(result.row_weights[k] for k in rows)]
            metrics["row_weighted"] = ",".join(map(str, rows))
        return update, 1 if self.config.equal_weights else len(self.data), metrics

    def generator(self, config: dict[str, Scalar]) -> torch.Generator:
        """Randomness for sampling, masking and DP noise (:func:`_seeded_generator`)."""
        return _seeded_generator(config)

    def metrics(self, result: LocalResult, norm: float) -> dict[str, Scalar]:
        """What the reply reports besides the update: partition id, loss and norms, for logging in simulation."""
        metrics: dict[str, Scalar] = {"loss": result.loss, "pre_clip_norm": norm}
        if self.partition_id is not None:
            metrics["partition_id"] = self.partition_id
        if result.pre_clip_norms:
            metrics["student_norm_median"] = float(np.median(result.pre_clip_norms))
        return metrics

    def evaluate(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[float, int, dict[str, Scalar]]:
        # The strategy sets fraction_evaluate=0: the server evaluates on held-out students it holds, so
        # clients never report metrics computed on their own students. Being asked anyway is a misconfiguration.
        raise RuntimeError("fedcd clients do not evaluate: the server evaluates on held-out students")


def _partition(context: Context) -> tuple[RunSettings, int, ResponseTensors]:
    """The run's settings, this node's partition id and its students."""
    data_dir = Path(str(context.run_config["data-dir"]))
    partition = int(context.node_config["partition-id"])
    return load_settings(data_dir), partition, load_partition(data_dir, partition)


def _cd_client(context: Context) -> CDClient:
    settings, partition, data = _partition(context)
    return CDClient(build_model(settings.model), data, config=settings.config, partition_id=partition)


def _release_inputs(context: Context) -> ReleaseInputs:
    settings, _, data = _partition(context)
    return ReleaseInputs(build_model(settings.model), data, settings.config.item_release_noise, _seeded_generator)


def _sums_inputs(context: Context) -> SumsInputs:
    settings, _, data = _partition(context)
    return SumsInputs(settings.config.warm_starts, build_model(settings.model), data)


def _client_fn(context: Context) -> Client:
    return _cd_client(context).to_client()


def secagg_if_configured(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower's ``secaggplus_mod`` when the run is configured for SecAgg+, else pass through.

    When it is configured, a train message that does not follow the SecAgg+ protocol is
    refused by ``secaggplus_mod``: the client never sends its update in the clear.
    """
    if client_settings(context.run_config).config.secagg:
        return secaggplus_mod(msg, context, call_next)
    return call_next(msg, context)


def make_client_app(mods: tuple[Mod, ...] | list[Mod] = ()) -> ClientApp:
    """The ClientApp; ``mods`` run inside secure aggregation (they see the plain reply). The DP item release's
    request and the non-DP warm start's (:mod:`federated.flower.warm_start`) are answered before secure aggregation,
    which handles training messages only."""
    return ClientApp(client_fn=_client_fn, mods=[ItemReleaseMod(_release_inputs), ItemSumsMod(_sums_inputs),
                                                 secagg_if_configured, *mods])
