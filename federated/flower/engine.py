"""The in-process engine: the real ServerApp loop and ClientApp, with an in-memory ``Grid``.

Flower's simulation engine needs Ray; its deployment engine needs a SuperLink, SuperNodes
and a process per message. For tests and quick runs, :class:`LocalGrid` swaps the transport
and nothing else (like an httpx ``MockTransport``): it implements Flower's small ``Grid``
interface by handing each message, as a copy, to the destination node's ``ClientApp`` in
this process, with that node's own persistent ``Context`` (where ``secaggplus_mod`` keeps
its protocol state). A ClientApp that raises becomes an error reply, as a SuperNode would
send, so dropouts reach the workflows exactly as they do in deployment.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from uuid import uuid4

from flwr.app import Context, Message, RecordDict
from flwr.app.error import Error
from flwr.app.user_config import UserConfig
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from federated.flower.client import make_client_app
from federated.flower.files import load_settings, run_config
from federated.flower.server import FlowerRoundRecord, serve
from federated.inprocess import FedResult

__all__ = ["LocalGrid", "run_grid", "run_inprocess"]


class LocalGrid(Grid):
    """Delivers every message at once to an in-process ``ClientApp``: no network, no Ray, no SuperLink.

    Node ids are ``first_node_id + i`` for ``node_configs[i]``, so sorted node order is
    partition order.
    """

    def __init__(self, client_app: ClientApp, node_configs: Sequence[UserConfig], *, run_config: UserConfig,
                 run_id: int = 1, first_node_id: int = 1) -> None:
        if not node_configs:
            raise ValueError("need at least one node")
        self._app = client_app
        self._contexts = {first_node_id + i: Context(run_id=run_id, node_id=first_node_id + i, node_config=dict(cfg),
                                                     state=RecordDict(), run_config=dict(run_config))
                          for i, cfg in enumerate(node_configs)}
        self._run = Run.create_empty(run_id)
        self._replies: dict[str, Message] = {}
        self.run_config = dict(run_config)
        self.delivered = 0

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self._contexts)

    def _deliver(self, message: Message) -> Message:
        incoming = copy.deepcopy(message)  # a wire copies: nodes never share records with the server
        context = self._contexts.get(incoming.metadata.dst_node_id)
        if context is None:
            return Message(Error(ErrorCode.NODE_UNAVAILABLE, "no such node"), reply_to=incoming)
        self.delivered += 1
        try:
            reply = self._app(incoming, context)
        except Exception as exc:  # noqa: BLE001 - a crashing ClientApp is a dropout, as in deployment
            return Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, f"{type(exc).__name__}: {exc}"),
                           reply_to=incoming)
        return copy.deepcopy(reply)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            ids.append(uuid4().hex)
            self._replies[ids[-1]] = self._deliver(message)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


@contextmanager
def _task_identity(run_id: int) -> Iterator[None]:
    """Set the process-wide task identity Flower stamps on new messages, as its ServerApp runtime does."""
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
    try:
        yield
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def run_inprocess(data_dir: Path | str, out_dir: Path | str, *, client_app: ClientApp | None = None,
                  on_round: Callable[[FlowerRoundRecord], None] | None = None) -> FedResult:
    """Run the federation written to ``data_dir`` (:func:`~federated.flower.files.write_run`) in this process.

    ``client_app`` defaults to :func:`~federated.flower.client.make_client_app` (tests pass
    one with extra mods, e.g. a client that drops out or poisons its update).
    """
    settings = load_settings(data_dir)
    nodes = [{"partition-id": i, "num-partitions": settings.n_clients} for i in range(settings.n_clients)]
    return run_grid(LocalGrid(client_app or make_client_app(), nodes, run_config=run_config(data_dir, out_dir)),
                    on_round=on_round)


def run_grid(grid: LocalGrid, *, on_round: Callable[[FlowerRoundRecord], None] | None = None) -> FedResult:
    """Run the ServerApp loop over an in-process ``grid`` (its run config names the run folder)."""
    config: UserConfig = dict(grid.run_config)
    context = Context(run_id=1, node_id=SUPERLINK_NODE_ID, node_config={}, state=RecordDict(), run_config=config)
    with _task_identity(run_id=1):
        return serve(grid, context, on_round=on_round)
