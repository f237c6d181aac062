"""A federation of institutions, end to end, with real processes on loopback (about 2 minutes on 2 cores).

`fedcd federation split` makes the institutions' folders (SIMULATED institutions, real FrcSub
students), `fedcd federation certs` the CA, SuperLink certificate and node keys; the gateway
starts with `local-fed` (and a SIMULATED second entity) and no model for FrcSub; the
coordinator starts Flower's SuperLink with TLS and node authentication; three node
processes, each in its own folder with its own CSV (a third of FrcSub's students), join
through a recording proxy; a fourth node with an unregistered key is refused. Three rounds
of student-level DP-SGD later the model is published for FrcSub, and the running gateway
answers with it without a restart. Once the coordinator has finished, every node exits by itself (code 0).
Every request the nodes sent is searched for their students' ids and responses, and no process or temporary
file is left behind.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from federated.flower import free_port
from qmatrix import default_data_dir, load_qmatrix, read_responses_csv
from tests.federated.wire import RecordingProxy
from tests.federated.processes import marked_processes

ROOT = Path(__file__).resolve().parents[2]
NODES = 3


class Cluster:
    """The test's processes: started with one environment, stopped by SIGTERM, then checked gone."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.marker = tmp, uuid.uuid4().hex
        (tmp / "tmpdir").mkdir()
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp / "tmpdir"), "OPENBLAS_NUM_THREADS": "1",
                    "FEDCD_TEST_MARKER": self.marker, "COLUMNS": "200"}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"{name}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=self.tmp, stdout=log,
                                stderr=subprocess.STDOUT, env={**self.env, **(env or {})}, stdin=subprocess.DEVNULL)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def run(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=self.tmp, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop()


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the gateway exited while starting"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise TimeoutError(url)


def _wait_for_line(cluster: Cluster, name: str, text: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in cluster.log(name):
        assert proc.poll() is None, cluster.log(name)
        assert time.monotonic() < deadline, cluster.log(name)
        time.sleep(0.2)


def _diagnose(gateway: httpx.Client, qmatrix_id: str, student: str, responses: list[tuple[str, float]]) -> dict:
    body = {"student_id": student, "qmatrix_id": qmatrix_id, "include_entities": True, "epsilon": 32,
            "responses": [{"item_id": i, "correct": bool(v)} for i, v in responses]}
    r = gateway.post("/v1/diagnose", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _encodings(scores: list[float]) -> list[bytes]:
    """How a student's response vector could look in a binary message."""
    values = np.asarray(scores)
    return [values.astype("<f4").tobytes(), values.astype("<f8").tobytes(), values.astype(np.uint8).tobytes(),
            b"".join(struct.pack("<q", int(v)) for v in values)]


def test_three_institutions_train_publish_and_the_gateway_serves_the_model(cluster: Cluster) -> None:
    # Prepare: SIMULATED institutions from FrcSub (real students): the coordinator keeps a fifth as its own
    # held-out students, each node folder a third of the rest.
    tmp = cluster.tmp
    cluster.run("federation", "split", "--out", ".", "--nodes", str(NODES),
                "--dataset", "frcsub" if (default_data_dir() / "frcsub").is_dir() else "synthetic")
    q = load_qmatrix(tmp / "coordinator" / "qmatrix.json")
    probe = [(r.item_id, r.score) for r in read_responses_csv(tmp / "coordinator" / "heldout.csv")[0].responses]
    node_students = {s.student_id: [(r.item_id, r.score) for r in s.responses]
                     for n in range(1, NODES + 1) for s in read_responses_csv(tmp / f"node-{n}" / "responses.csv")}

    # Prepare: credentials; the rogue institution makes its own key, which nobody registers.
    cluster.run("federation", "certs", "--out", "certs", "--nodes", ",".join(f"node-{n}" for n in range(1, NODES + 1)))
    cluster.run("federation", "keygen", "rogue/rogue.key")

    # Prepare: the gateway, serving local-fed (no model for this Q-matrix yet) and a SIMULATED entity; and the
    # coordinator, whose SuperLink sits behind the recording proxy. Both start at once (their start-ups overlap).
    gport, lport, pport = free_port(), free_port(), free_port()
    entities = [{"name": "local-fed", "kind": "local_fed", "model": "federated-cdm", "model_path": str(tmp / "registry")},
                {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident", "seed": 1}]
    settings = {"FEDCD_STATE_DIR": str(tmp / "gateway"), "FEDCD_ENTITIES": json.dumps(entities),
                "FEDCD_DEFAULT_CALIBRATION": "false", "FEDCD_TRAIN_DEFAULT_MODEL": "false",
                "FEDCD_PRIVACY_CAP_EPSILON": "1e6"}
    key = json.loads(cluster.run("keys", "create", "--tenant", "school-board", "--role", "admin", "--json",
                                 env=settings))["api_key"]
    gateway = httpx.Client(base_url=f"http://127.0.0.1:{gport}", headers={"Authorization": f"Bearer {key}"},
                           timeout=60)
    gw = cluster.start("gateway", "serve", "--port", str(gport), env=settings)
    proxy = RecordingProxy(port=pport, upstream=lport, cert=tmp / "certs" / "superlink.pem",
                           key=tmp / "certs" / "superlink.key", ca=tmp / "certs" / "ca.pem").start()
    try:
        coordinator = cluster.start(
            "coordinator", "federation", "coordinator", "--qmatrix", "coordinator/qmatrix.json",
            "--heldout", "coordinator/heldout.csv", "--certs", "certs",
            *[a for n in range(1, NODES + 1) for a in ("--node-key", f"certs/nodes/node-{n}.pub")],
            "--rounds", "3", "--dp", "student", "--epsilon", "8", "--port", str(lport), "--node-wait", "150",
            "--registry", str(tmp / "registry"), "--timeout", "400")
        _wait_http(f"http://127.0.0.1:{gport}/healthz", gw)
        q_json = json.loads((tmp / "coordinator" / "qmatrix.json").read_text())
        assert gateway.post("/v1/qmatrices", json=q_json).status_code == 201
        before = _diagnose(gateway, q.id, "probe-1", probe)  # no node has joined: nothing can be published yet

        # Execute: three registered nodes and the rogue one join, once the coordinator has registered the keys.
        _wait_for_line(cluster, "coordinator", "waiting for", coordinator)
        for n in range(1, NODES + 1):
            cluster.start(f"node-{n}", "federation", "node", "--superlink", f"127.0.0.1:{pport}",
                          "--root-cert", "certs/ca.pem", "--auth-key", f"certs/nodes/node-{n}.key",
                          "--data", f"node-{n}/responses.csv", "--qmatrix", f"node-{n}/qmatrix.json",
                          "--max-wait", "30")
        rogue = cluster.start("rogue", "federation", "node", "--superlink", f"127.0.0.1:{pport}",
                              "--root-cert", "certs/ca.pem", "--auth-key", "rogue/rogue.key",
                              "--data", "node-1/responses.csv", "--qmatrix", "node-1/qmatrix.json")
        rogue_code = rogue.wait(timeout=120)
        code = coordinator.wait(timeout=420)
    finally:
        proxy.close()
    # the run is over and the coordinator has stopped its SuperLink: every node exits by itself (no SIGTERM)
    node_codes = [cluster.procs[f"node-{n}"].wait(timeout=240) for n in range(1, NODES + 1)]
    output = cluster.log("coordinator")
    after = _diagnose(gateway, q.id, "probe-2", probe)
    described = gateway.get("/v1/local-model", params={"qmatrix_id": q.id}).json()
    cluster.stop()

    # Assert: the coordinator trained three rounds with student-level DP and published v0001 for the Q-matrix.
    assert code == 0, output
    assert [line.split(":")[0] for line in output.splitlines() if line.startswith("round ")] == \
        ["round 1", "round 2", "round 3"]
    assert f"round 3: {NODES} nodes" in output and f"published v0001 for Q-matrix {q.id}" in output
    # ... each node exited 0 once the coordinator had finished, after taking part in the run
    assert node_codes == [0] * NODES, [cluster.log(f"node-{n}")[-2000:] for n in range(1, NODES + 1)]
    for n in range(1, NODES + 1):
        assert "the coordinator has finished its run" in cluster.log(f"node-{n}")
        assert "it took part in" in cluster.log(f"node-{n}")
    # ... the rogue node was refused
    assert rogue_code == 1 and "public key is not registered" in cluster.log("rogue")
    # ... the gateway served the untrained evidence model before, and the new model after, without a restart
    assert next(e for e in before["entities"] if e["name"] == "local-fed")["model"] == "fedcd-cdm/untrained"
    local = next(e for e in after["entities"] if e["name"] == "local-fed")
    assert local["status"] == "ok" and local["model"] == "fedcd-cdm/v0001" and after["skipped_entities"] == []
    assert described["version"] == "v0001" and described["signature_verified"] and described["nodes"] == NODES
    assert described["dp_mode"] == "student" and 0 < described["epsilon"] <= 8 and described["rounds"] == 3
    assert described["gate"]["accepted"] and described["heldout_metrics"]["auc"] > 0.6
    # ... nothing any node sent holds a student id or a student's responses
    sent = [body for _, body in proxy.requests]
    assert sum(len(b) for path, b in proxy.requests if "push" in path) > 3 * NODES * 1000  # the updates passed here
    leaks = [sid for sid in node_students if any(sid.encode() in body for body in sent)]
    assert leaks == [] and not any(b"responses.csv" in body for body in sent)  # nor where the data lie
    item_ids = [i.id for i in q.items if len(i.id) >= 6]  # shorter ids could occur by chance in float bytes
    assert not [i for i in item_ids if any(i.encode() in body for body in sent)]
    # a student who answered every item alike (all wrong) looks like any constant array, e.g. the zero update of the
    # item parameters the DP item release holds fixed: only vectors with a pattern can be searched for
    vectors = [enc for answers in node_students.values() if len(answers) >= 8 and len({v for _, v in answers}) > 1
               for enc in _encodings([v for _, v in answers])]
    assert not any(enc in body for enc in vectors for body in sent)
    # ... and no process or temporary file is left
    assert marked_processes(cluster.marker) == []
    # (torch keeps a per-user compile cache there, shared by every torch process: not ours to remove)
    assert [p.name for p in (tmp / "tmpdir").iterdir() if not p.name.startswith("torchinductor_")] == []
