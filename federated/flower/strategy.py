"""Flower strategies, changed only by wrapping (like Flower's own DP wrappers).

The aggregation rules are Flower's: ``flwr.server.strategy.FedAvg``, ``FedProx``,
``FedTrimmedAvg`` and ``FedMedian`` (the legacy ``Strategy`` API: SecAgg+ in Flower 1.42
runs only through ``LegacyContext`` workflows, which drive that API). Three small wrappers
add what they lack, each forwarding every other round step unchanged:

* :class:`PoissonSampling`: Flower samples a *fixed-size* set of clients (with the global
  ``random`` module); the accountant's amplification-by-sampling analysis needs *Poisson*
  sampling, each client independently with probability q, drawn from an injected
  ``np.random.Generator``. An empty sample is allowed (and still released under DP).
* :class:`ClientUpdates`: clients send *updates* (new - global weights), not weights. This
  wrapper clips each update in L2 over the whole update (logging the pre-clip norm per
  client and round), weighs clients equally when asked, ignoring every client-claimed count
  (``FlowerConfig.equal_weights``: under DP, SecAgg+, trimmed mean and median), turns
  updates back into weights for the inner Flower rule, and, for
  client-level DP, adds Gaussian noise to the *sum* of clipped updates with the injected
  generator and divides by the fixed expected count q N (Flower's
  ``DifferentialPrivacyServerSideFixedClipping`` draws from global ``np.random`` and divides
  by a fixed sample size, which Poisson sampling does not have).
* :class:`ClientSeeds`: gives each sampled client a training seed from the same generator,
  so runs reproduce, and in the same order as :func:`federated.inprocess.run_fedavg`.

Who adds the noise, and what the server is trusted with: under client-level DP the
*server* adds the noise. It is trusted to do so honestly and sees the un-noised aggregate:
without SecAgg+ it also sees every clipped update; with SecAgg+ it sees only their sum
(clipping then happens on the clients). The guarantee (epsilon, delta) protects each
*client's* whole contribution in what is released (the sequence of global models), i.e.
against everyone but the server. Under student-level DP each client adds the noise
itself, inside DP-SGD, and the server is trusted with nothing beyond the noised updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from flwr.common import (
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    NDArrays,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion
from flwr.server.strategy import FedAvg, FedMedian, FedProx, FedTrimmedAvg, Strategy

from federated.dp import add_gaussian_noise, clip_update, l2_norm, poisson_sample
from federated.flower.config import FlowerConfig
from federated.modes import average_rows

__all__ = ["ClientSeeds", "ClientUpdates", "PoissonSampling", "RoundLog", "StrategyWrapper", "build_strategy"]

FitResults = list[tuple[ClientProxy, FitRes]]
Failures = list[tuple[ClientProxy, FitRes] | BaseException]


class StrategyWrapper(Strategy):
    """Forwards every round step to ``inner``; a subclass overrides only what it changes."""

    def __init__(self, inner: Strategy) -> None:
        if not isinstance(inner, Strategy):
            raise TypeError(f"inner must be a flwr Strategy, got {type(inner).__name__}")
        self.inner = inner

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.inner.initialize_parameters(client_manager)

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        return self.inner.configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round: int, results: FitResults,
                      failures: Failures) -> tuple[Parameters | None, dict[str, Scalar]]:
        return self.inner.aggregate_fit(server_round, results, failures)

    def configure_evaluate(self, server_round: int, parameters: Parameters,
                           client_manager: ClientManager) -> list[tuple[ClientProxy, EvaluateIns]]:
        return self.inner.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(self, server_round: int, results: list[tuple[ClientProxy, EvaluateRes]],
                           failures: list) -> tuple[float | None, dict[str, Scalar]]:
        return self.inner.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        return self.inner.evaluate(server_round, parameters)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class _Chosen(ClientManager):
    """Offers exactly the clients already chosen, so the inner strategy cannot resample them."""

    def __init__(self, clients: Sequence[ClientProxy]) -> None:
        self._clients = list(clients)

    def num_available(self) -> int:
        return len(self._clients)

    def register(self, client: ClientProxy) -> bool:
        return False

    def unregister(self, client: ClientProxy) -> None:
        pass

    def all(self) -> dict[str, ClientProxy]:
        return {c.cid: c for c in self._clients}

    def wait_for(self, num_clients: int, timeout: int) -> bool:
        return num_clients <= len(self._clients)

    def sample(self, num_clients: int, min_num_clients: int | None = None,
               criterion: Criterion | None = None) -> list[ClientProxy]:
        return list(self._clients)


def _order(proxy: ClientProxy) -> tuple[int, str]:
    node_id = getattr(proxy, "node_id", None)
    return (int(node_id), "") if node_id is not None else (0, proxy.cid)


class PoissonSampling(StrategyWrapper):
    """Samples each available client independently with probability ``sample_rate`` (see module doc)."""

    def __init__(self, inner: Strategy, *, sample_rate: float, rng: np.random.Generator) -> None:
        super().__init__(inner)
        if not 0 < sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy Generator (never the global np.random)")
        self.sample_rate, self.rng = float(sample_rate), rng
        self.last_sampled: tuple[str, ...] = ()

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        available = sorted(client_manager.all().values(), key=_order)
        chosen = [available[i] for i in poisson_sample(len(available), self.sample_rate, self.rng)]
        self.last_sampled = tuple(c.cid for c in chosen)
        if not chosen:
            return []
        return self.inner.configure_fit(server_round, parameters, _Chosen(chosen))


class ClientSeeds(StrategyWrapper):
    """Adds ``seed`` (drawn from ``rng``, in sampled order) to each sampled client's fit config."""

    def __init__(self, inner: Strategy, *, rng: np.random.Generator) -> None:
        super().__init__(inner)
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy Generator (never the global np.random)")
        self.rng = rng

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        instructions = self.inner.configure_fit(server_round, parameters, client_manager)
        return [(proxy, FitIns(ins.parameters, {**ins.config, "seed": int(self.rng.integers(2**62))}))
                for proxy, ins in instructions]


@dataclass
class RoundLog:
    """What the server saw of one round's client results (metrics are for logging, not release)."""

    round: int
    clients: list[int] = field(default_factory=list)  # partition ids that contributed
    pre_clip_norms: dict[int, float] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    student_norm_medians: list[float] = field(default_factory=list)
    nbytes: int = 0


class ClientUpdates(StrategyWrapper):
    """Clip, weigh and (optionally) noise client *updates*, then let ``inner`` aggregate (module doc).

    ``equal_weights``: every client counts once and its claimed counts (students, responses per item) are
    ignored; otherwise the inner rule weighs by the student count and each item's rows are averaged by the
    responses clients claim for it, which only plain averaging (FedAvg/FedProx) may trust."""

    def __init__(self, inner: Strategy, *, clip_norm: float | None = None, clipped_by_clients: bool = False,
                 equal_weights: bool = True, noise_multiplier: float = 0.0, expected_clients: float | None = None,
                 rng: np.random.Generator | None = None, server_lr: float = 1.0) -> None:
        super().__init__(inner)
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0 or None, got {clip_norm}")
        if noise_multiplier < 0 or not server_lr > 0:
            raise ValueError(f"need noise_multiplier >= 0 and server_lr > 0, got {noise_multiplier}, {server_lr}")
        if noise_multiplier > 0:
            if clip_norm is None or expected_clients is None or not expected_clients > 0:
                raise ValueError("client-level noise needs clip_norm and expected_clients > 0 (q * N)")
            if not equal_weights:
                raise ValueError("client-level noise needs equal weights: the sensitivity is C per client")
            if not isinstance(rng, np.random.Generator):
                raise TypeError("client-level noise needs rng, a numpy Generator (never the global np.random)")
        self.clip_norm, self.clipped_by_clients, self.equal_weights = clip_norm, clipped_by_clients, equal_weights
        self.noise_multiplier, self.expected_clients, self.rng = noise_multiplier, expected_clients, rng
        self.server_lr = server_lr
        self.logs: dict[int, RoundLog] = {}
        self._global: dict[int, NDArrays] = {}
        self._rows: dict[int, list[tuple[dict[int, np.ndarray], dict[int, np.ndarray]]]] = {}

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, FitIns]]:
        self._global = {server_round: parameters_to_ndarrays(parameters)}
        return self.inner.configure_fit(server_round, parameters, client_manager)

    def _weights(self, proxy: ClientProxy, res: FitRes, log: RoundLog, like: NDArrays) -> FitRes:
        update = parameters_to_ndarrays(res.parameters)
        rows = [int(k) for k in str(res.metrics.get("row_weighted", "")).split(",") if k]
        if rows:  # per-item counts after the update (plain averaging without DP)
            if len(update) != len(like) + len(rows):
                raise ValueError("per-item weights: one array per weighted parameter, after the update")
            update, counts = update[:len(like)], update[len(like):]
            if not self.equal_weights:  # kept for aggregate_fit; otherwise a client's claim is dropped unread
                self._rows.setdefault(log.round, []).append(({k: update[k] for k in rows}, dict(zip(rows, counts))))
        client = int(res.metrics.get("partition_id", proxy.cid))  # the node id when a client does not say
        if self.clipped_by_clients:  # SecAgg+: the client clipped, and reported its own pre-clip norm
            norm = float(res.metrics.get("pre_clip_norm", float("nan")))
        elif self.clip_norm is not None:
            update, norm = clip_update(update, clip_norm=self.clip_norm)
        else:
            norm = l2_norm(update)  # measured by the server, never taken from the client's report
        log.clients.append(client)
        log.pre_clip_norms[client] = norm
        log.losses.append(float(res.metrics.get("loss", float("nan"))))
        if "student_norm_median" in res.metrics:
            log.student_norm_medians.append(float(res.metrics["student_norm_median"]))
        log.nbytes += 4 * sum(int(np.size(u)) for u in update)
        weights = [(g + u).astype(g.dtype) for g, u in zip(like, update, strict=True)]
        n = 1 if self.equal_weights else res.num_examples
        return FitRes(res.status, ndarrays_to_parameters(weights), n, res.metrics)

    def aggregate_fit(self, server_round: int, results: FitResults,
                      failures: Failures) -> tuple[Parameters | None, dict[str, Scalar]]:
        like = self._global[server_round]
        log = self.logs[server_round] = RoundLog(round=server_round)
        converted = [(proxy, self._weights(proxy, res, log, like)) for proxy, res in results]
        parameters, metrics = self.inner.aggregate_fit(server_round, converted, failures) if converted else (None, {})
        mean = [np.asarray(a, np.float64) - g for a, g in zip(parameters_to_ndarrays(parameters), like, strict=True)] \
            if parameters is not None else None
        per_item = self._rows.pop(server_round, [])
        if mean is not None and per_item and len(per_item) == len(converted):
            for k in per_item[0][1]:  # each item averaged over the clients that saw it, by their responses
                mean[k] = average_rows([u[k] for u, _ in per_item], [w[k] for _, w in per_item])
        if self.noise_multiplier > 0:
            assert self.clip_norm is not None and self.expected_clients is not None and self.rng is not None
            total = [len(converted) * m for m in mean] if mean is not None else [np.zeros(np.shape(g)) for g in like]
            noisy = add_gaussian_noise(total, noise_multiplier=self.noise_multiplier, clip_norm=self.clip_norm,
                                       rng=self.rng)
            step = [n / self.expected_clients for n in noisy]
        elif mean is None:
            return None, metrics
        else:
            step = mean
        new = [(g + self.server_lr * s).astype(g.dtype) for g, s in zip(like, step, strict=True)]
        return ndarrays_to_parameters(new), metrics


def _no_metrics(_: list[tuple[int, dict[str, Scalar]]]) -> dict[str, Scalar]:
    return {}


def build_strategy(config: FlowerConfig, *, n_clients: int,
                   rng: np.random.Generator) -> tuple[Strategy, ClientUpdates, PoissonSampling]:
    """The wrapped Flower strategy for ``config``: seeds(updates(poisson(Flower rule))).

    Returns the outermost strategy plus the two wrappers the server loop reads its logs from.
    """
    if n_clients < 1:
        raise ValueError(f"need n_clients >= 1, got {n_clients}")
    common = dict(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=1, min_evaluate_clients=1,
                  min_available_clients=1, accept_failures=True,
                  fit_metrics_aggregation_fn=_no_metrics)  # ClientUpdates logs client metrics itself
    rules: dict[str, Strategy] = {
        "fedavg": FedAvg(**common),
        "fedprox": FedProx(proximal_mu=config.proximal_mu, **common),
        "trimmed_mean": FedTrimmedAvg(beta=config.trim_beta, **common),
        "median": FedMedian(**common),
    }
    fed = config.fed
    sampling = PoissonSampling(rules[config.aggregation], sample_rate=fed.client_sample_rate, rng=rng)
    updates = ClientUpdates(
        sampling,
        clip_norm=fed.clip_norm if config.clips else None,
        clipped_by_clients=config.secagg,
        equal_weights=config.equal_weights,
        noise_multiplier=fed.noise_multiplier if config.client_noise else 0.0,
        expected_clients=fed.client_sample_rate * n_clients,
        rng=rng,
        server_lr=fed.server_lr,
    )
    return ClientSeeds(updates, rng=rng), updates, sampling
