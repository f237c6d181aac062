"""Client mods for Flower tests: SIMULATED misbehaving institutions (dropout, poisoning) and a recorder.

Each is a Flower ``Mod`` (message, context, call_next). Passed to
``make_client_app(mods)``, they run inside secure aggregation, so they see and change the
plain reply a client would send.
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable, Mod
from flwr.common import FitRes, NDArrays, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat


def _partition(context: Context) -> int:
    return int(context.node_config["partition-id"])


def drop_out(partition: int, rounds: set[int]) -> Mod:
    """Institution ``partition`` crashes while training in ``rounds`` (a ClientApp exception)."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        if _partition(context) == partition and int(msg.metadata.group_id) in rounds:
            raise RuntimeError(f"institution {partition} went offline")
        return call_next(msg, context)

    return mod


def scale_update(partition: int, factor: float) -> Mod:
    """Institution ``partition`` multiplies its update by ``factor`` (a model-poisoning client)."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        out = call_next(msg, context)
        if _partition(context) != partition or not out.has_content():
            return out
        res = compat.recorddict_to_fitres(out.content, keep_input=True)
        scaled = [a * factor for a in parameters_to_ndarrays(res.parameters)]
        poisoned = FitRes(res.status, ndarrays_to_parameters(scaled), res.num_examples, res.metrics)
        return Message(compat.fitres_to_recorddict(poisoned, keep_input=True), reply_to=msg)

    return mod


def record_updates(store: dict[tuple[int, int], NDArrays]) -> Mod:
    """Keep each client's plain reply (round, partition) -> update, as it leaves the client."""

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        out = call_next(msg, context)
        if out.has_content() and out.content.array_records:
            fitres = compat.recorddict_to_fitres(out.content, keep_input=True)
            store[(int(msg.metadata.group_id), _partition(context))] = parameters_to_ndarrays(fitres.parameters)
        return out

    return mod
