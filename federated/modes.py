"""Federated DP modes as types: what each one clips and noises, how it weighs client updates, what it may reveal.

Like Flower's DP wrappers (``DifferentialPrivacyClientSide…`` vs ``…ServerSide…``), each mode is its own class:

* :class:`NoDP` (``"none"``): FedAvg weighted by client size; per-item parameters averaged over the clients that
  saw each item, by their response counts. The server learns the counts, the items answered and the training loss.
* :class:`ClientLevelDP` (``"client"``, McMahan et al. 2018): the *server* clips each client's whole update to L2
  norm C (pre-clip norms are logged per client), sums them with equal weight, adds N(0, (sigma C)^2) and divides by
  the *expected* number of clients q N. A fixed denominator keeps the sensitivity of the mean at C / (q N); dividing
  by the realised count would make it data-dependent. Noise is released even when no client was sampled. A robust
  aggregate (trimmed mean, median) cannot take the place of the sum: its sensitivity is another.
* :class:`StudentLevelDP` (``"student"``): each client runs student-level DP-SGD (:mod:`federated.local`), adding
  the noise itself; updates are averaged with equal weights (client sizes are not released). The accountant charges
  every round's local steps at the configured (sigma, q) whether or not a student's client was sampled, an upper
  bound on every student's ε. A share of ε may go to the DP item release (:mod:`federated.item_release`).

Under DP nothing outside the accounting is released: no counts (equal weights, no per-item counts, no non-DP warm
start), the whole public item bank marked seen rather than the items clients report answering, and no training
loss (:mod:`federated.rounds`).

The names (``--dp``, a config's ``dp``, the manifest's ``dp_mode``) are read in one place, :func:`dp_mode`; every
other module asks the mode (``tests/federated/test_dp_modes_guard.py`` keeps it so).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, TypeVar

import numpy as np

from federated.accountant import noise_multiplier_for
from federated.data import ResponseTensors
from federated.dp import add_gaussian_noise, clip_update
from federated.local import LocalResult, StudentDP

if TYPE_CHECKING:
    from federated.accountant import Step

__all__ = ["DP_MODES", "ClientLevelDP", "DPMode", "DPModeName", "NoDP", "StudentLevelDP", "average_rows",
           "calibrate", "dp_mode"]

DPModeName = Literal["none", "student", "client"]
Mechanism = tuple[float, float, int]  # (noise_multiplier, sample_rate, steps) charged per round


class ModeConfig(Protocol):
    """What a mode reads of a run's configuration (``federated.inprocess.FedConfig``)."""

    rounds: int
    client_sample_rate: float
    noise_multiplier: float
    clip_norm: float
    student_dp: StudentDP | None
    delta: float

    @property
    def dp(self) -> DPMode: ...


F = TypeVar("F", bound=ModeConfig)


def average_rows(updates: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> np.ndarray:
    """Row-wise weighted mean of per-row updates (rows no client weighted stay 0).

    Item parameters are rows; a client's weight for a row is its responses to that item, so an
    item is averaged over the clients that saw it, as many times as they saw it.
    """
    w = np.stack(weights)  # (clients, rows)
    total = w.sum(0)
    stacked = np.stack(updates)  # (clients, rows, ...)
    shape = (len(updates), -1) + (1,) * (stacked.ndim - 2)
    summed = (stacked * w.reshape(shape)).sum(0)
    return np.where(total.reshape((-1,) + (1,) * (stacked.ndim - 2)) > 0,
                    summed / np.maximum(total, 1e-12).reshape((-1,) + (1,) * (stacked.ndim - 2)), 0.0)


class DPMode:
    """One federated DP mode (module docstring). Stateless: its numbers live in the run's configuration."""

    name: ClassVar[DPModeName]  # the CLI's --dp, a config's dp, the manifest's dp_mode
    label: ClassVar[str]  # for messages
    private: ClassVar[bool] = True  # an accountant charges its rounds and an ε budget applies
    reveals_counts: ClassVar[bool] = False  # client sizes, per-item response counts and sums (weights, warm start)
    reveals_answered_items: ClassVar[bool] = False  # else the whole public item bank is marked seen
    reveals_train_loss: ClassVar[bool] = False  # the training students' mean loss (outside any accounting)
    noise_at_clients: ClassVar[bool] = False  # each node adds the noise (the only mode a federation's nodes accept)
    noise_at_server: ClassVar[bool] = False  # the server clips updates and noises their sum (no robust aggregate)
    releases_item_sums: ClassVar[bool] = False  # may spend a share of ε on the DP item release

    def check(self, fed: ModeConfig) -> None:
        """Raise ``ValueError`` when ``fed`` lacks this mode's numbers."""

    def local_dp(self, fed: ModeConfig) -> StudentDP | None:
        """The DP-SGD each client runs (None: plain local training)."""
        return None

    def round_mechanism(self, fed: ModeConfig) -> Mechanism | None:
        """(noise_multiplier, sample_rate, steps) charged per round, or None without DP."""
        return None

    def clip_norm(self, fed: ModeConfig) -> float | None:
        """The clipping bound the manifest records (None: nothing clipped for privacy)."""
        return None

    def seen_items(self, client: ResponseTensors) -> Sequence[str] | set[str]:
        """What the global model marks seen for a sampled client: under DP its public bank, not what it answered."""
        return client.answered_items() if self.reveals_answered_items else client.item_ids

    def configure(self, fed: F, *, epsilon_budget: float | None, student: Callable[[], StudentDP]) -> F:
        """``fed`` in this mode, with its budget; ``student`` builds the clients' DP-SGD where the mode runs it."""
        return dataclasses.replace(fed, dp=self,  # type: ignore[type-var]
                                   epsilon_budget=epsilon_budget if self.private else None)

    def with_noise(self, fed: F, noise_multiplier: float) -> F:
        """``fed`` with this noise multiplier where the mode adds noise (unchanged without DP)."""
        return fed

    def weights(self, results: Sequence[LocalResult]) -> np.ndarray:
        """Each sampled client's weight in the mean of updates."""
        return np.ones(len(results))

    def aggregate(self, results: list[LocalResult], *, n_clients: int, fed: ModeConfig, rng: np.random.Generator,
                  like: list[np.ndarray]) -> tuple[list[np.ndarray] | None, dict[int, float]]:
        """The server's update from the sampled clients' (None: no update), and the pre-clip norm of each result
        the server clipped (by its index in ``results``)."""
        if not results:
            return None, {}
        weights = self.weights(results)
        weights = weights / weights.sum()
        out = [sum(w * r.update[k] for w, r in zip(weights, results, strict=True)) for k in range(len(like))]
        if self.reveals_counts:  # per-item parameters: averaged over the clients that saw each item
            for k in results[0].row_weights:
                out[k] = average_rows([r.update[k] for r in results], [r.row_weights[k] for r in results])
        return out, {}

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NoDP(DPMode):
    name, label = "none", "no DP"
    private = False
    reveals_counts = reveals_answered_items = reveals_train_loss = True

    def weights(self, results: Sequence[LocalResult]) -> np.ndarray:
        return np.array([r.n_students for r in results], float)


class ClientLevelDP(DPMode):
    name, label = "client", "client-level DP"
    noise_at_server = True

    def check(self, fed: ModeConfig) -> None:
        if not fed.noise_multiplier > 0 or not fed.clip_norm > 0:
            raise ValueError("client-level DP needs noise_multiplier > 0 and clip_norm > 0")

    def round_mechanism(self, fed: ModeConfig) -> Mechanism | None:
        return fed.noise_multiplier, fed.client_sample_rate, 1

    def clip_norm(self, fed: ModeConfig) -> float | None:
        return fed.clip_norm

    def with_noise(self, fed: F, noise_multiplier: float) -> F:
        return dataclasses.replace(fed, noise_multiplier=noise_multiplier)  # type: ignore[type-var]

    def aggregate(self, results: list[LocalResult], *, n_clients: int, fed: ModeConfig, rng: np.random.Generator,
                  like: list[np.ndarray]) -> tuple[list[np.ndarray] | None, dict[int, float]]:
        total = [np.zeros_like(a) for a in like]
        norms: dict[int, float] = {}
        for i, result in enumerate(results):
            clipped, norms[i] = clip_update(result.update, clip_norm=fed.clip_norm)
            total = [t + c for t, c in zip(total, clipped, strict=True)]
        noisy = add_gaussian_noise(total, noise_multiplier=fed.noise_multiplier, clip_norm=fed.clip_norm, rng=rng)
        expected = fed.client_sample_rate * n_clients
        return [a / expected for a in noisy], norms


class StudentLevelDP(DPMode):
    name, label = "student", "student-level DP"
    noise_at_clients = releases_item_sums = True

    def check(self, fed: ModeConfig) -> None:
        if fed.student_dp is None or not fed.student_dp.noise_multiplier > 0:
            raise ValueError("student-level DP needs student_dp with noise_multiplier > 0")

    def local_dp(self, fed: ModeConfig) -> StudentDP | None:
        return fed.student_dp

    def round_mechanism(self, fed: ModeConfig) -> Mechanism | None:
        dp = fed.student_dp
        return (dp.noise_multiplier, dp.sample_rate, dp.steps) if dp is not None else None

    def clip_norm(self, fed: ModeConfig) -> float | None:
        return fed.student_dp.clip_norm if fed.student_dp is not None else fed.clip_norm

    def configure(self, fed: F, *, epsilon_budget: float | None, student: Callable[[], StudentDP]) -> F:
        return dataclasses.replace(fed, dp=self, student_dp=student(),  # type: ignore[type-var]
                                   epsilon_budget=epsilon_budget)

    def with_noise(self, fed: F, noise_multiplier: float) -> F:
        if fed.student_dp is None:
            return fed
        student = dataclasses.replace(fed.student_dp, noise_multiplier=noise_multiplier)
        return dataclasses.replace(fed, student_dp=student)  # type: ignore[type-var]


# The registry: the one place a mode's name is read.
DP_MODES: dict[str, DPMode] = {mode.name: mode for mode in (NoDP(), StudentLevelDP(), ClientLevelDP())}


def dp_mode(value: DPMode | str) -> DPMode:
    """The mode a name stands for (a mode is returned as it is); ``ValueError`` for an unknown name."""
    if isinstance(value, DPMode):
        return value
    mode = DP_MODES.get(value)
    if mode is None:
        names = [repr(n) for n in DP_MODES]
        raise ValueError(f"dp must be {', '.join(names[:-1])} or {names[-1]}, got {value!r}")
    return mode


def calibrate(fed: F, *, epsilon: float, candidates: int = 1, prior: Iterable[Step] = ()) -> F:
    """``fed`` with the smallest noise multiplier (PLD) at which all its rounds, for ``candidates`` runs on the same
    students (they compose) after the ``prior`` releases, spend at most ``epsilon``. Unchanged without DP."""
    mechanism = fed.dp.round_mechanism(fed)
    if mechanism is None:
        return fed
    _, q, steps = mechanism
    sigma = noise_multiplier_for(target_epsilon=epsilon, delta=fed.delta, sample_rate=q,
                                 steps=fed.rounds * steps * candidates, prior=prior)
    return fed.dp.with_noise(fed, sigma)
