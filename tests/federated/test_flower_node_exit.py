"""`fedcd federation node` exits when its run ends, instead of retrying forever.

Real processes on loopback: a TLS SuperLink that admits only the registered node key (what the coordinator
starts), and the node command. Once the node has connected, the SuperLink stops (the coordinator stops it after
its run): the node exits with code 0 after --max-wait seconds, saying so, and leaves no process behind. A node
whose SuperLink never answers gives up after --max-wait too, with an error. Every wait is bounded; no duration
is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from federated.flower import LinkTLS, ProcessTree, SuperLink, flower_env, free_port, make_credentials
from qmatrix import example_qmatrix, save_qmatrix
from tests.federated.processes import marked_processes

ROOT = Path(__file__).resolve().parents[2]


class NodeCommand:
    """`fedcd federation node` as a child process, its output in a file."""

    def __init__(self, tmp: Path, superlink: str, certs: Path, max_wait: float) -> None:
        self.marker, self.log = uuid.uuid4().hex, tmp / "node.log"
        save_qmatrix(example_qmatrix(), tmp / "q.json")
        rows = [f"s{k},{item},{(k + j) % 2}" for k in range(6) for j, item in enumerate(["q01", "q02", "q03", "q04"])]
        (tmp / "data.csv").write_text("student_id,item_id,correct\n" + "\n".join(rows) + "\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "COLUMNS": "200",
               "FEDCD_TEST_MARKER": self.marker}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "federation", "node", "--superlink", superlink,
                 "--root-cert", str(certs / "ca.pem"), "--auth-key", str(certs / "nodes" / "n1.key"),
                 "--data", str(tmp / "data.csv"), "--qmatrix", str(tmp / "q.json"), "--max-wait", f"{max_wait:g}"],
                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    make_credentials(tmp_path / "certs", nodes=["n1"])
    return tmp_path / "certs"


@pytest.fixture
def superlink(tmp_path: Path, certs: Path) -> Iterator[tuple[SuperLink, ProcessTree]]:
    """The coordinator's side: a TLS SuperLink with node authentication and the node's key registered."""
    processes = ProcessTree(flower_env(tmp_path / "flwr-home"), tmp_path / "link-logs")
    try:
        link = SuperLink(processes, home=tmp_path / "flwr-home", startup_timeout=120,
                         tls=LinkTLS(ca_cert=certs / "ca.pem", cert=certs / "superlink.pem",
                                     key=certs / "superlink.key")).start()
        link.register(certs / "nodes" / "n1.pub")
        yield link, processes
    finally:
        processes.close()


def test_a_node_exits_once_the_coordinator_has_finished(tmp_path: Path, certs: Path,
                                                        superlink: tuple[SuperLink, ProcessTree]) -> None:
    # Prepare: the node connects to the coordinator's SuperLink
    link, link_processes = superlink
    node = NodeCommand(tmp_path, link.local_address, certs, max_wait=2)
    try:
        node.wait_for("SuperNode ID:")

        # Execute: the run is over; the coordinator stops its SuperLink
        link_processes.close()
        code = node.proc.wait(timeout=240)
    finally:
        node.stop()

    # Assert: the node noticed, said so, exited 0 and left nothing running
    output = node.output()
    assert code == 0, output
    assert "unreachable for 2 s: the coordinator has finished its run" in output and "Exiting." in output
    assert marked_processes(node.marker) == []


def test_a_node_whose_superlink_never_answers_gives_up(tmp_path: Path, certs: Path) -> None:
    # Execute: nothing listens where the node is sent
    node = NodeCommand(tmp_path, f"127.0.0.1:{free_port()}", certs, max_wait=1)
    try:
        code = node.proc.wait(timeout=240)
    finally:
        node.stop()

    # Assert
    output = node.output()
    assert code == 1 and "could not reach the SuperLink" in output and "within 1 s" in output, output
    assert marked_processes(node.marker) == []
