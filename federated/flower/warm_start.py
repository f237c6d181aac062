"""The non-DP warm start on Flower: one message each way before round 1, as the in-process trainer starts.

Without DP, the in-process trainer starts every item's intercept from the pooled per-item (sum of scores, responses)
of every client (:func:`federated.candidates.warm_start`, ``ItemBank.warm_start``: the logit of each item's smoothed
proportion correct) before round 1. Those sums are what :class:`~federated.modes.NoDP` lets a client reveal
(``reveals_counts``: client sizes, per-item response counts and sums), and a plain Flower client already sends its
per-item response counts with every update. So the ServerApp asks every node once, before round 1, for the same two
vectors over its own students (message type ``query.item_sums``), sums them in node order and starts the bank from
them with the same function. A node that fails contributes nothing.

Only where the run trusts client-claimed counts (``FlowerConfig.warm_starts``: not ``equal_weights``):

* **DP** (student- or client-level): the sums would be an unprivatised release. Student-level DP has its own,
  noised one instead (:mod:`federated.flower.release`); client-level DP starts from the feature fallback, as in
  process.
* **SecAgg+**: the server must not see one client's data in the clear; the sums would show it item by item.
* **Trimmed mean, median**: a poisoning client could claim any sums and set any item's start, past the robust
  rule (the reason these rules ignore claimed counts). The in-process trainer, whose SIMULATED clients are honest,
  warm-starts under them too; the Flower engines, built to face such clients, do not.

``rounds=0`` (the untrained model) asks nothing, in either engine. A real federation's nodes train only with
student-level DP (:func:`federated.flower.node.check_run`), so they are never asked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.serverapp import Grid

from federated.data import ResponseTensors
from federated.flower.files import RunSettings
from federated.itembank import ItemBank
from federated.models import DiagnosisModel

__all__ = ["MESSAGE_TYPE", "ItemSumsMod", "SumsInputs", "server_warm_start"]

MESSAGE_TYPE = "query.item_sums"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SumsInputs:
    """What a node's answer reads: whether its run warm-starts (``FlowerConfig.warm_starts``, from the run it
    accepted), the model whose bank the sums are over, and its students."""

    allowed: bool
    model: DiagnosisModel
    data: ResponseTensors


class ItemSumsMod:
    """A client mod: answers the server's ``query.item_sums`` with this client's per-item (sum of scores, responses)
    and lets every other message through; refuses in a run not configured for the warm start."""

    def __init__(self, inputs: Callable[[Context], SumsInputs]) -> None:
        self.inputs = inputs

    def __call__(self, msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MESSAGE_TYPE:
            return call_next(msg, context)
        inputs = self.inputs(context)
        if not inputs.allowed or not isinstance(inputs.model, ItemBank):
            raise PermissionError("this run does not start from plain per-item sums (DP, SecAgg+ or a robust rule)")
        if len(inputs.data) == 0:  # as a client refuses to train: such a node takes no part
            raise ValueError("this node holds no students")
        data = inputs.data
        correct, count = inputs.model.item_sums(data.features, data.item_index, data.observed, data.scores)
        return Message(RecordDict({"sums": ArrayRecord([correct, count])}), reply_to=msg)


def server_warm_start(grid: Grid, node_ids: Sequence[int], settings: RunSettings, *, model: DiagnosisModel,
                      table: np.ndarray) -> int:
    """Start ``model``'s bank from every node's plain sums where the run does (module docstring); returns how many
    nodes contributed (0: no warm start)."""
    if not settings.config.warm_starts or not isinstance(model, ItemBank):
        return 0
    messages = [Message(RecordDict(), node_id, MESSAGE_TYPE, group_id="warm-start") for node_id in node_ids]
    replies = sorted((r for r in grid.send_and_receive(messages, timeout=settings.config.node_wait_s)
                      if not r.has_error()), key=lambda r: r.metadata.src_node_id)  # node order: as in process
    size = len(model.items) + 1
    sums = [s for s in (_sums(r, size) for r in replies) if s is not None]
    if sums:
        model.warm_start(table, sum(s[0] for s in sums), sum(s[1] for s in sums))
    return len(sums)


def _sums(reply: Message, size: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A node's (per-item sums of scores, responses), or None — logged, and the node contributes nothing, as a failed
    one — unless they are two finite vectors of ``size`` with 0 ≤ sum ≤ count (a NaN would start every item at NaN)."""
    try:
        correct, count = (np.asarray(a, dtype=float) for a in reply.content.array_records["sums"].to_numpy_ndarrays())
    except (KeyError, TypeError, ValueError):
        log.warning("warm start: node %s sent no readable sums; left out", reply.metadata.src_node_id)
        return None
    finite = np.isfinite(correct).all() and np.isfinite(count).all()
    if correct.shape != (size,) or count.shape != (size,) or not finite or (correct < 0).any() or (correct > count).any():
        log.warning("warm start: node %s sent sums that no students give (shape, NaN or sum > count); left out",
                    reply.metadata.src_node_id)
        return None
    return correct, count
