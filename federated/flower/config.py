"""What a Flower run is configured with, checked once on construction.

:class:`FlowerConfig` wraps the engine-independent :class:`~federated.inprocess.FedConfig`
(rounds, Poisson rate q, local training, DP mode and numbers, budget) and adds what only the
Flower runs have: the server aggregation rule and secure aggregation. Refusals are
``ValueError`` with a message that says why:

* SecAgg+ with trimmed mean or median. Secure aggregation hides every individual update
  from the server; trimmed mean and median must inspect them. The two cannot be combined.
* Client-level DP with trimmed mean or median. The Gaussian noise is calibrated to the L2
  sensitivity of the *sum* of clipped updates (C); a coordinate-wise order statistic has
  another sensitivity, which the accountant does not model.

The config serialises to a plain dict (``to_dict``/``from_dict``), so a ServerApp or
ClientApp in another process (the deployment engine) rebuilds exactly the same object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from federated.inprocess import AGGREGATIONS, Aggregation, FedConfig
from federated.item_release import check_release_share, release_noise
from federated.local import LocalConfig, StudentDP

__all__ = ["AGGREGATIONS", "Aggregation", "FlowerConfig", "item_release_noise", "releases_item_sums"]

ROBUST: frozenset[str] = frozenset({"trimmed_mean", "median"})


def releases_item_sums(fed: FedConfig, share: float) -> bool:
    """Whether a run of ``fed`` giving ``share`` of ε to the DP item release starts with it: student-level DP, an ε
    budget, rounds to run and a share of ε for it."""
    return share > 0 and fed.dp.releases_item_sums and fed.rounds > 0 and fed.epsilon_budget is not None


def item_release_noise(fed: FedConfig, share: float) -> float | None:
    """That release's noise multiplier: the one at which it spends its share of ε alone (None: no release)."""
    if not releases_item_sums(fed, share):
        return None
    return release_noise(epsilon=float(fed.epsilon_budget or 0) * share, delta=fed.delta)


@dataclass(frozen=True)
class FlowerConfig:
    """A Flower run: the shared :class:`FedConfig` plus aggregation rule and secure aggregation.

    ``clip_updates`` clips every client update to ``fed.clip_norm`` (L2, over the whole
    update) even without DP, which bounds what one poisoned client can do; client-level DP
    always clips. ``secagg_clipping_range`` is the per-coordinate range SecAgg+ quantises
    into when updates are *not* clipped (a clipped update has every coordinate within
    ``clip_norm``, which is then used instead).
    """

    fed: FedConfig = field(default_factory=FedConfig)
    aggregation: Aggregation = "fedavg"
    secagg: bool = False
    clip_updates: bool = False
    proximal_mu: float = 0.01
    trim_beta: float = 0.2
    secagg_num_shares: float = 1.0
    secagg_threshold: float = 0.5
    secagg_clipping_range: float = 8.0
    secagg_timeout: float | None = None
    node_wait_s: float = 120.0
    # publish the weights after the best held-out round (as the in-process trainer does) or after the last
    keep: Literal["best", "last"] = "best"
    # student-level DP with an ε budget: the share of it the one DP item release before the rounds spends
    # (federated.flower.release; 0: no release); the rounds then hold the per-item parameters fixed (StudentDP.frozen)
    item_release_share: float = 0.0

    def __post_init__(self) -> None:
        if self.keep not in ("best", "last"):
            raise ValueError(f"keep must be 'best' or 'last', got {self.keep!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}; got {self.aggregation!r}")
        if self.secagg and self.aggregation in ROBUST:
            raise ValueError(
                f"secure aggregation cannot be combined with aggregation={self.aggregation!r}: SecAgg+ hides "
                "each client's update from the server, while trimmed mean and median must inspect every update. "
                "Choose secagg=True with fedavg/fedprox, or a robust aggregation without secagg."
            )
        if self.fed.dp.noise_at_server and self.aggregation in ROBUST:
            raise ValueError(
                f"{self.fed.dp.label} cannot be combined with aggregation={self.aggregation!r}: the noise is "
                "calibrated to the sensitivity of the sum of clipped updates, not of a trimmed mean or median. Use "
                "fedavg or fedprox (or student-level DP, which composes with any aggregation)."
            )
        if self.aggregation == "fedprox" and not self.proximal_mu > 0:
            raise ValueError(f"fedprox needs proximal_mu > 0, got {self.proximal_mu}")
        if not 0 < self.trim_beta < 0.5:
            raise ValueError(f"trim_beta must be in (0, 0.5), got {self.trim_beta}")
        if self.clip_updates and not self.fed.clip_norm > 0:
            raise ValueError("clip_updates needs fed.clip_norm > 0")
        if not 0 < self.secagg_num_shares <= 1 or not 0 < self.secagg_threshold <= 1:
            raise ValueError("secagg_num_shares and secagg_threshold are fractions in (0, 1]")
        if not self.secagg_clipping_range > 0 or not self.node_wait_s > 0:
            raise ValueError("secagg_clipping_range and node_wait_s must be > 0")
        check_release_share(self.item_release_share)
        if self.releases_item_sums and (self.fed.student_dp is None or "item_delta" not in self.fed.student_dp.frozen):
            raise ValueError("with an item release the rounds hold item_delta fixed (StudentDP.frozen)")
        if self.secagg_timeout is not None and not self.secagg_timeout > 0:
            raise ValueError(f"secagg_timeout must be > 0 or None, got {self.secagg_timeout}")

    @property
    def clips(self) -> bool:
        """Whether client updates are clipped to ``fed.clip_norm``."""
        return self.fed.dp.noise_at_server or self.clip_updates

    @property
    def equal_weights(self) -> bool:
        """Whether the server ignores client-claimed counts (student count, responses per item) and clients send
        none. Counts are trusted only by plain averaging (FedAvg/FedProx) without DP or SecAgg+: under DP they
        would be an unprivatised release, under SecAgg+ the server could not check them, and with trimmed mean or
        median a client claiming huge counts would override the robust rule (each item's rows averaged by them)."""
        return not self.fed.dp.reveals_counts or self.secagg or self.aggregation in ROBUST

    @property
    def warm_starts(self) -> bool:
        """Whether the run starts the bank from the clients' plain per-item sums (the in-process trainer's non-DP
        warm start, ``federated.flower.warm_start``): only where client-claimed counts are revealed and trusted
        (not :attr:`equal_weights`: no DP, no SecAgg+, plain averaging) and rounds are to run (``rounds=0`` is the
        untrained model)."""
        return not self.equal_weights and self.fed.rounds > 0

    @property
    def releases_item_sums(self) -> bool:
        """Whether the run starts with the DP item release (:func:`releases_item_sums`)."""
        return releases_item_sums(self.fed, self.item_release_share)

    @cached_property
    def item_release_noise(self) -> float | None:
        """The release's noise multiplier (:func:`item_release_noise`; None: no release). Derived, never configured,
        so a node computes it from the budget it accepted, whatever a coordinator says."""
        return item_release_noise(self.fed, self.item_release_share)

    @property
    def client_noise(self) -> bool:
        """Whether the server adds client-level Gaussian noise."""
        return self.fed.dp.noise_at_server

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["fed"]["dp"] = self.fed.dp.name  # from_dict looks the name up again (FedConfig)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FlowerConfig:
        fed = dict(data["fed"])
        fed["local"] = LocalConfig(**fed["local"])
        student = fed.get("student_dp")
        fed["student_dp"] = StudentDP(**{**student, "frozen": tuple(student.get("frozen", ()))}) if student else None
        return cls(**{**data, "fed": FedConfig(**fed)})
