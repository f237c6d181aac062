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
and **no metrics**: no student count, loss or gradient norm; and, once per run when the run has one, the DP
item release's four noisy vectors (:mod:`federated.flower.release`). The noise (and the sampling of
students) comes from the node's own OS randomness, never from the seed the server sends,
which in simulation makes runs reproduce but here would let the coordinator subtract the noise. Student ids and responses stay
here; ``tests/federated/test_federation.py`` records every request a node sends and checks.

A node exits when its run ends. The coordinator's SuperLink lives for one run (``fedcd federation
coordinator`` stops it once the run is over), so a node that has connected and then cannot reach
its SuperLink for ``max_wait_s`` seconds (``flower-supernode --max-wait-time``) is done: it stops,
exit code 0, instead of retrying forever (Flower's default). ``flower-supernode`` 1.42 logs that it
gives up but keeps running (its runtime API thread keeps the process alive), so :meth:`Node.wait`
watches for that line and ends the process tree itself. A node that never reached its SuperLink
within ``max_wait_s`` exits non-zero (Flower's exit code 305).
"""

from __future__ import annotations

import json
import re
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
from federated.models import DiagnosisModel, build_model
from federated.flower.client import CDClient, secagg_if_configured
from federated.flower.deployment import supernode_command
from federated.flower.files import ClientSettings, client_settings
from federated.flower.processes import ProcessTree, flower_env, free_port
from federated.flower.release import ItemReleaseMod, ReleaseInputs
from federated.local import LocalResult
from qmatrix import QMatrix, StudentResponses, load_qmatrix, qmatrix_fingerprint, read_responses_csv

__all__ = ["DEFAULT_MAX_WAIT_S", "Node", "NodeClient", "NodeLink", "NodeData", "check_run", "load_node_data",
           "make_node_client_app"]

# How long a node keeps trying to reach its SuperLink (before its first connection, or once the coordinator has
# finished) before it exits. Longer than a round trip's hiccup, short enough that a finished federation frees its nodes.
DEFAULT_MAX_WAIT_S = 120.0

# flower-supernode 1.42's log lines this module reads
_CONNECTED = "SuperNode ID:"
_GAVE_UP = "Giving up reconnection"
_ROUND = re.compile(r"\[RUN (\d+), ROUND (\d+)\]")


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
    if not fed.dp.noise_at_clients or fed.student_dp is None:
        raise PermissionError(f"this node trains only with student-level DP-SGD; the run asks dp={fed.dp.name!r}")
    if max_epsilon is not None and (fed.epsilon_budget is None or fed.epsilon_budget > max_epsilon):
        raise PermissionError(f"the run's ε budget {fed.epsilon_budget} exceeds this node's limit {max_epsilon}")
    if run.qmatrix_sha256 != fingerprint:
        raise PermissionError("the coordinator's Q-matrix differs from this node's (content fingerprints differ): "
                              "both sides must use the same Q-matrix file")


def _own_generator(config: dict[str, Scalar]) -> torch.Generator:
    """A node's randomness for DP-SGD and its item release: never the seed the server sent (whoever knows the seed
    can regenerate the DP noise and subtract it); 63 bits from the OS CSPRNG seed torch's generator, out of the
    coordinator's reach."""
    return torch.Generator().manual_seed(secrets.randbits(63))


class NodeClient(CDClient):
    """A :class:`CDClient` that reports nothing but its update (no student count, loss or norms), and
    draws its randomness itself (:func:`_own_generator`)."""

    def generator(self, config: dict[str, Scalar]) -> torch.Generator:
        return _own_generator(config)

    def metrics(self, result: LocalResult, norm: float) -> dict[str, Scalar]:
        return {}


def _checked(context: Context) -> tuple[ClientSettings, DiagnosisModel, ResponseTensors]:
    """The run, the model and this node's students, once the run passes :func:`check_run`."""
    run = client_settings(context.run_config)
    data_path, qmatrix_path = Path(str(context.node_config["data-path"])), Path(str(context.node_config["qmatrix-path"]))
    limit = context.node_config.get("max-epsilon")
    model = run.new_model()
    fingerprint, data = _tensors(str(data_path), data_path.stat().st_mtime_ns, str(qmatrix_path),
                                 qmatrix_path.stat().st_mtime_ns, json.dumps(model.config(), sort_keys=True))
    check_run(run, fingerprint=fingerprint, max_epsilon=float(limit) if limit is not None else None)
    return run, model, data


def _node_client(context: Context) -> NodeClient:
    run, model, data = _checked(context)
    return NodeClient(model, data, config=run.config)


def _node_release(context: Context) -> ReleaseInputs:
    run, model, data = _checked(context)
    return ReleaseInputs(model, data, run.config.item_release_noise, _own_generator)


def _node_client_fn(context: Context) -> Client:
    return _node_client(context).to_client()


def make_node_client_app() -> ClientApp:
    """The ClientApp of a real federation's node (SecAgg+ when the run asks for it; the run's one DP item release
    when it has one, :mod:`federated.flower.release`, after the same checks)."""
    return ClientApp(client_fn=_node_client_fn, mods=[ItemReleaseMod(_node_release), secagg_if_configured])


@dataclass(frozen=True, kw_only=True)
class NodeLink:
    """How a node reaches the coordinator's SuperLink: its address, the CA certificate that signs the link's TLS
    certificate, the node's private key (registered with the coordinator), the local port of its runtime API
    (None: a free one), and how long to keep trying to reach the link (None: Flower's own default)."""

    superlink: str
    root_cert: Path
    auth_key: Path
    runtime_port: int | None = None
    max_wait_s: float | None = DEFAULT_MAX_WAIT_S


class Node:
    """``flower-supernode`` for one institution, as a child process tree (a context manager).

    ``start`` reads and checks the data first (a bad file fails here, not in a round);
    ``wait`` follows the SuperNode's output until it exits and returns its exit code.
    """

    def __init__(self, *, link: NodeLink, data: Path, qmatrix: Path, max_epsilon: float | None = None,
                 log_dir: Path | None = None) -> None:
        self.superlink, self.root_cert, self.auth_key = link.superlink, Path(link.root_cert), Path(link.auth_key)
        self.data, self.qmatrix, self.max_epsilon = Path(data).resolve(), Path(qmatrix).resolve(), max_epsilon
        self.runtime_port, self.max_wait_s = link.runtime_port, link.max_wait_s
        self.link_gone = False  # set by wait(): connected, then the SuperLink stayed unreachable for max_wait_s
        self._home = Path(tempfile.mkdtemp(prefix="fedcd-node-"))
        self.log_dir = Path(log_dir) if log_dir is not None else self._home / "logs"
        self.processes = ProcessTree(flower_env(self._home), self.log_dir)
        self.summary: NodeData | None = None

    def start(self) -> Node:
        self.summary = load_node_data(self.data, self.qmatrix)
        config: dict[str, Any] = {"data-path": str(self.data), "qmatrix-path": str(self.qmatrix)}
        if self.max_epsilon is not None:
            config["max-epsilon"] = float(self.max_epsilon)
        command = supernode_command(self.superlink, node_config=config, root_cert=self.root_cert.resolve(),
                                    auth_key=self.auth_key.resolve(), runtime_port=self.runtime_port or free_port())
        if self.max_wait_s is not None:
            command += ["--max-wait-time", f"{float(self.max_wait_s):g}"]
        self.processes.spawn(command, "supernode.log")
        return self

    def wait(self, on_output: Callable[[str], None] | None = None, poll_s: float = 0.5) -> int:
        """Block until the SuperNode exits, or until its run has ended (module docstring: ``link_gone``, then 0);
        pass each new line of its log to ``on_output``."""
        proc, shown = self.processes.procs[0], 0

        def show(text: str, final: bool) -> None:
            nonlocal shown
            if on_output is not None:
                for line in text[shown:].splitlines(keepends=True):
                    if line.endswith("\n") or final:
                        on_output(line.rstrip("\n"))
                        shown += len(line)

        while True:
            code = proc.poll()
            text = self.processes.log("supernode.log")
            show(text, final=code is not None)
            connected = text.find(_CONNECTED)
            if connected >= 0 and text.find(_GAVE_UP, connected) >= 0:
                self.link_gone = True
                if code is None:  # it would stay up (module docstring); what it logs while being stopped is noise
                    self.processes.close()
                return 0
            if code is not None:
                return int(code)
            time.sleep(poll_s)

    @property
    def rounds(self) -> list[tuple[int, int]]:
        """The (run id, round) pairs this node received work for, in order."""
        seen: dict[tuple[int, int], None] = {}
        for run, rnd in _ROUND.findall(self.processes.log("supernode.log")):
            seen[(int(run), int(rnd))] = None
        return list(seen)

    @property
    def unreachable(self) -> bool:
        """Whether the SuperNode gave up before it ever reached its SuperLink (``max_wait_s`` passed)."""
        text = self.processes.log("supernode.log")
        return _CONNECTED not in text and "Failed to initialize the connection" in text

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
