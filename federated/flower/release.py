"""The DP item release (:mod:`federated.item_release`) on Flower: one message each way, before the rounds.

Under student-level DP with a release (``FlowerConfig.item_release_noise`` = σ), the ServerApp asks every node
once, before round 1, for its students' per-item and per-item-group sums (message type ``query.item_release``).
Each node answers with :func:`~federated.item_release.release_item_sums` on its own students: every student scaled
to L2 norm 1 over both levels, then N(0, σ²) on every coordinate at the *full* σ, drawn by the node (in simulation
from a seed the server sends, so runs reproduce; a real federation's node from its own OS randomness, as for
DP-SGD). The server pools the replies (:func:`~federated.item_release.pooled`), starts the bank from them
(:func:`~federated.item_release.private_warm_start`, through :class:`~federated.item_release.ItemRelease`),
lets that start compete as round 0, and charges the run's accountant one Gaussian step ``(σ, q = 1, 1 step)``
before the rounds, which hold ``item_delta`` fixed (``StudentDP.frozen``). The in-process trainer does the same.

Why the full σ at every node, rather than σ/√N each so that the pooled sum carries σ: every student belongs to one
node, so their data enter that node's reply only, and that reply alone is the Gaussian mechanism at sensitivity 1
and σ. Per student the release is exactly the in-process one, ``(σ, 1, 1)`` (parallel composition over nodes),
whatever the other nodes or the coordinator do. Split noise would reach σ only in the *sum*, so it would need every
other node to add its share honestly and the coordinator to see nothing but the sum (secure aggregation): one
node's reply seen alone would carry σ/√N. As with DP-SGD here, each node adds all the noise its students need and
trusts no one; the price is the pooled noise σ√N per coordinate, the same as in process.

A node answers one release per run (its context remembers) and only in a run configured for one; it sends the four
noisy vectors and nothing else (no count, no loss). The candidate kinds of one ``train_flower`` run (``auto``)
share the first kind's release: the ServerApp saves it as ``item-release.npz`` in its out-dir, and a later kind's
run finds it in its data folder and asks no node again, so the students' data are released once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Scalar
from flwr.serverapp import Grid

from federated.data import ResponseTensors
from federated.flower.files import RunSettings
from federated.item_release import ItemGroups, ItemRelease, ItemSums, pooled, release_item_sums
from federated.itembank import ItemBank
from federated.models import DiagnosisModel

__all__ = ["MESSAGE_TYPE", "RELEASE_FILE", "ItemReleaseMod", "ReleaseInputs", "load_release", "save_release",
           "server_release"]

MESSAGE_TYPE = "query.item_release"
RELEASE_FILE = "item-release.npz"
_RELEASED = "fedcd-item-released"  # a node's run context: this run's release has been answered


@dataclass(frozen=True)
class ReleaseInputs:
    """What a node's release reads, and nothing more: its students, the model whose bank (and item groups) the sums
    are over, the run's σ (``FlowerConfig.item_release_noise``; None: the run has no release) and where its noise
    comes from (``generator`` of the request's config: a simulation's seeded generator, a real node's OS
    randomness, as for its DP-SGD)."""

    model: DiagnosisModel
    data: ResponseTensors
    noise_multiplier: float | None
    generator: Callable[[dict[str, Scalar]], torch.Generator]


class ItemReleaseMod:
    """A client mod: answers the server's release request with this client's noisy sums (module docstring) and lets
    every other message through. ``inputs`` reads the release's inputs from the node's context (it checks the run)."""

    def __init__(self, inputs: Callable[[Context], ReleaseInputs]) -> None:
        self.inputs = inputs

    def __call__(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MESSAGE_TYPE:
            return call_next(msg, context)
        if _RELEASED in context.state:  # a second release would spend the students' budget again
            raise PermissionError("this node has already released its item sums in this run")
        inputs = self.inputs(context)
        sigma, model = inputs.noise_multiplier, inputs.model
        if sigma is None or not isinstance(model, ItemBank):
            raise PermissionError("this run is not configured for an item release")
        if len(inputs.data) == 0:  # as a client refuses to train: such a node takes no part
            raise ValueError("this node holds no students")
        config = dict(msg.content.config_records["config"]) if "config" in msg.content.config_records else {}
        groups = ItemGroups.of(model, inputs.data.features.numpy())
        sums = release_item_sums(model, inputs.data, groups, noise_multiplier=sigma, generator=inputs.generator(config))
        context.state[_RELEASED] = ConfigRecord({"noise_multiplier": sigma})
        return Message(RecordDict({"sums": ArrayRecord(sums.arrays())}), reply_to=msg)


def _request(grid: Grid, node_ids: Sequence[int], *, sigma: float, rng: np.random.Generator,
             timeout: float | None) -> list[ItemSums]:
    """Every node's noisy sums; a node that refuses or fails contributes nothing (its students released nothing).
    Each reply is taken to carry the configured σ, never what a node might claim."""
    messages = [Message(RecordDict({"config": ConfigRecord({"seed": int(rng.integers(2**62))})}), node_id,
                        MESSAGE_TYPE, group_id="item-release") for node_id in node_ids]
    replies = grid.send_and_receive(messages, timeout=timeout)
    return [ItemSums.of_arrays(r.content.array_records["sums"].to_numpy_ndarrays(), noise_sd=sigma)
            for r in replies if not r.has_error()]


def server_release(grid: Grid, node_ids: Sequence[int], settings: RunSettings, *, model: DiagnosisModel,
                   table: np.ndarray, out_dir: Path, rng: np.random.Generator) -> ItemRelease | None:
    """The run's release (None: the run has none): an earlier candidate kind's from the data folder, or every
    node's, pooled and saved to ``out_dir`` for the kinds after it."""
    sigma = settings.config.item_release_noise
    if sigma is None:
        return None
    if (settings.data_dir / RELEASE_FILE).exists():
        return load_release(settings.data_dir / RELEASE_FILE)
    if not isinstance(model, ItemBank):
        raise ValueError(f"an item release needs a model with an item bank, not {type(model).__name__}")
    groups = ItemGroups.of(model, table)
    sums = _request(grid, node_ids, sigma=sigma, rng=rng, timeout=settings.config.node_wait_s)
    shapes = {(len(s.correct), len(s.group_correct)) for s in sums}
    if shapes != {(len(model.items) + 1, len(groups))}:
        raise RuntimeError(f"item release: {len(sums)} replies of shapes {sorted(shapes)}, expected "
                           f"{(len(model.items) + 1, len(groups))}")
    # students: public in simulation (the manifest's train_students); a federation's coordinator does not know
    # them, and 0 makes the warm start weigh each response as 1 (response_weight), the conservative side
    release = ItemRelease(noise_multiplier=sigma, groups=groups, sums=pooled(sums), clients=len(sums),
                          students=settings.train_students or 0)
    save_release(release, out_dir / RELEASE_FILE)
    return release


def save_release(release: ItemRelease, path: Path) -> None:
    sums = release.sums
    np.savez(path, correct=sums.correct, count=sums.count, group_correct=sums.group_correct,
             group_count=sums.group_count, of_row=release.groups.of_row, patterns=release.groups.patterns,
             facts=np.array([release.noise_multiplier, sums.noise_sd, release.clients, release.students], np.float64))


def load_release(path: Path) -> ItemRelease:
    with np.load(path, allow_pickle=False) as raw:
        sigma, noise_sd, clients, students = (float(x) for x in raw["facts"])
        sums = ItemSums.of_arrays([raw["correct"], raw["count"], raw["group_correct"], raw["group_count"]],
                                  noise_sd=noise_sd)
        groups = ItemGroups(of_row=raw["of_row"], patterns=raw["patterns"])
    return ItemRelease(noise_multiplier=sigma, groups=groups, sums=sums, clients=int(clients), students=int(students))
