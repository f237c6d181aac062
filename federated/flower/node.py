"""One institution in a real federation: a SuperNode whose ClientApp reads only this node's CSV.

``fedcd federation node`` starts ``flower-supernode`` (TLS, authenticated with the node's
private key) with a node config naming three things, which never leave the machine:

* ``data-path``: the institution's responses CSV (long or wide, :func:`qmatrix.read_responses_csv`);
* ``qmatrix-path``: its copy of the Q-matrix (CSV or JSON);
* ``max-epsilon`` (optional): the largest student-level ε budget this node accepts.

Before training, the ClientApp checks the run it is asked to join and refuses (an error
reply, no update) unless: the run uses **student-level DP-SGD**, so the noise is added here
and the coordinator is trusted with nothing but noised updates; its ε budget is at most
``max-epsilon``; and the coordinator's Q-matrix has the same content as the node's
(fingerprint, :func:`qmatrix.qmatrix_fingerprint`).

What leaves the node, per round it is sampled in: the model update after DP-SGD on its own
students (clipped per student, Gaussian noise, optionally masked by SecAgg+), with weight 1
and **no metrics**: no student count, loss or gradient norm. The noise (and the sampling of
students) comes from the node's own OS randomness, never from the seed the server sends,
which in simulation makes runs reproduce but here would let the coordinator subtract the noise. Student ids and responses stay
here; ``tests/federated/test_federation.py`` records every request a node sends and checks.
"""

from __future__ import annotations

import json

import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.client import Client
from flwr.clientapp import ClientApp
from flwr.common import Scalar
import torch

from federated.data import ResponseTensors, encode_students
from federated.models import build_model
from federated.flower.client import CDClient, secagg_if_configured
from federated.flower.deployment import supernode_command
from federated.flower.files import ClientSettings, client_settings
from federated.flower.processes import ProcessTree, flower_env, free_port
from federated.local import LocalResult
from qmatrix import QMatrix, StudentResponses, load_qmatrix, qmatrix_fingerprint, read_responses_csv

__all__ = ["Node", "NodeClient", "NodeData", "check_run", "load_node_data", "make_node_client_app"]


@dataclass(frozen=True)
class NodeData:
    """What one institution holds: its Q-matrix and its students' responses (read locally, never sent)."""

    qmatrix: QMatrix
    students: list[StudentResponses]

    @property
    def n_responses(self) -> int:
        return sum(len(s.responses) for s in self.students)


def load_node_data(data_path: Path | str, qmatrix_path: Path | str) -> NodeData:
    """Read and check the node's files: every response names an item of its Q-matrix."""
    qmatrix, students = load_qmatrix(qmatrix_path), read_responses_csv(data_path)
    if not students:
        raise ValueError(f"{data_path}: no student responses")
    unknown = qmatrix.unknown_items(r.item_id for s in students for r in s.responses)
    if unknown:
        raise ValueError(f"{data_path}: items not in the Q-matrix {qmatrix_path}: {', '.join(unknown[:20])}")
    return NodeData(qmatrix=qmatrix, students=students)


@lru_cache(maxsize=8)
def _tensors(data_path: str, data_mtime: int, qmatrix_path: str, qmatrix_mtime: int,
             model_config: str) -> tuple[str, ResponseTensors]:
    data = load_node_data(data_path, qmatrix_path)
    table = build_model(json.loads(model_config)).item_table(data.qmatrix)
    return qmatrix_fingerprint(data.qmatrix), encode_students(data.qmatrix, data.students, table=table)


def check_run(run: ClientSettings, *, fingerprint: str, max_epsilon: float | None) -> None:
    """Raise ``PermissionError`` saying why this node refuses the run (module docstring), else nothing."""
    fed = run.config.fed
    if fed.dp != "student" or fed.student_dp is None:
        raise PermissionError(f"this node trains only with student-level DP-SGD; the run asks dp={fed.dp!r}")
    if max_epsilon is not None and (fed.epsilon_budget is None or fed.epsilon_budget > max_epsilon):
        raise PermissionError(f"the run's ε budget {fed.epsilon_budget} exceeds this node's limit {max_epsilon}")
    if run.qmatrix_sha256 != fingerprint:
        raise PermissionError("the coordinator's Q-matrix differs from this node's (content fingerprints differ): "
                              "both sides must use the same Q-matrix file")


class NodeClient(CDClient):
    """A :class:`CDClient` that reports nothing but its update (no student count, loss or norms), and
    draws its randomness itself."""

    def generator(self, config: dict[str, Scalar]) -> torch.Generator:
        # Never the seed the server sent: whoever knows the seed can regenerate the DP noise and subtract it.
        # 63 bits from the OS CSPRNG seed torch's generator, out of the coordinator's reach.
        return torch.Generator().manual_seed(secrets.randbits(63))

    def metrics(self, result: LocalResult, norm: float) -> dict[str, Scalar]:
        return {}


def _node_client_fn(context: Context) -> Client:
    run = client_settings(context.run_config)
    data_path, qmatrix_path = Path(str(context.node_config["data-path"])), Path(str(context.node_config["qmatrix-path"]))
    limit = context.node_config.get("max-epsilon")
    model = run.new_model()
    fingerprint, data = _tensors(str(data_path), data_path.stat().st_mtime_ns, str(qmatrix_path),
                                 qmatrix_path.stat().st_mtime_ns, json.dumps(model.config(), sort_keys=True))
    check_run(run, fingerprint=fingerprint, max_epsilon=float(limit) if limit is not None else None)
    return NodeClient(model, data, config=run.config).to_client()


def make_node_client_app() -> ClientApp:
    """The ClientApp of a real federation's node (SecAgg+ when the run asks for it)."""
    return ClientApp(client_fn=_node_client_fn, mods=[secagg_if_configured])


class Node:
    """``flower-supernode`` for one institution, as a child process tree (a context manager).

    ``start`` reads and checks the data first (a bad file fails here, not in a round);
    ``wait`` follows the SuperNode's output until it exits and returns its exit code.
    """

    def __init__(self, *, superlink: str, root_cert: Path, auth_key: Path, data: Path, qmatrix: Path,
                 max_epsilon: float | None = None, log_dir: Path | None = None, runtime_port: int | None = None) -> None:
        self.superlink, self.root_cert, self.auth_key = superlink, Path(root_cert), Path(auth_key)
        self.data, self.qmatrix, self.max_epsilon = Path(data).resolve(), Path(qmatrix).resolve(), max_epsilon
        self.runtime_port = runtime_port
        self._home = Path(tempfile.mkdtemp(prefix="fedcd-node-"))
        self.log_dir = Path(log_dir) if log_dir is not None else self._home / "logs"
        self.processes = ProcessTree(flower_env(self._home), self.log_dir)
        self.summary: NodeData | None = None

    def start(self) -> Node:
        self.summary = load_node_data(self.data, self.qmatrix)
        config: dict[str, Any] = {"data-path": str(self.data), "qmatrix-path": str(self.qmatrix)}
        if self.max_epsilon is not None:
            config["max-epsilon"] = float(self.max_epsilon)
        self.processes.spawn(supernode_command(self.superlink, node_config=config, root_cert=self.root_cert.resolve(),
                                               auth_key=self.auth_key.resolve(),
                                               runtime_port=self.runtime_port or free_port()), "supernode.log")
        return self

    def wait(self, on_output: Callable[[str], None] | None = None, poll_s: float = 0.5) -> int:
        """Block until the SuperNode exits; pass each new line of its log to ``on_output``."""
        proc, shown = self.processes.procs[0], 0
        while True:
            code = proc.poll()
            text = self.processes.log("supernode.log")
            if on_output is not None:
                for line in text[shown:].splitlines(keepends=True):
                    if line.endswith("\n") or code is not None:
                        on_output(line.rstrip("\n"))
                        shown += len(line)
            if code is not None:
                return int(code)
            time.sleep(poll_s)

    @property
    def refused(self) -> bool:
        """Whether the SuperLink refused this node (its public key is not registered there)."""
        return "Failed to activate SuperNode" in self.processes.log("supernode.log")

    def close(self) -> None:
        try:
            self.processes.close()
        finally:
            shutil.rmtree(self._home, ignore_errors=True)

    def __enter__(self) -> Node:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
