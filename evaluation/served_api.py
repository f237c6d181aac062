"""The ``served-via-api`` row of ``fedcd evaluate --protocol heldout --served-via-api``: the served row measured the
way a tutoring platform gets it, through a running gateway (issue 21: "FrcSub uploaded as a tenant's history gives
held-out students, diagnosed through the API, within 0.01 AUC of the served row").

A fresh ``fedcd serve`` process (its own state folder, loopback port, the evaluation's entities declared, every
served default inherited from this process's settings) is driven over HTTP only:

1. the operator's CLI (``fedcd keys create``) makes an admin key for a new tenant;
2. the tenant registers the Q-matrix (``POST /v1/qmatrices``) and uploads its history — the evaluation's train and
   validation students, all their responses — to ``POST /v1/qmatrices/{id}/train``; the train job holds out as
   many students for its calibration as the evaluation's validation split has (``FEDCD_TRAIN_CALIBRATION_*``),
   trains, gates and publishes the tenant's model, then the calibration job it submits runs;
3. every validation and test student's observed responses go to ``POST /v1/diagnose`` (the server's default noise,
   federation and aggregation); the answers are the row, scored by the evaluation like every other row.

Test students are never uploaded. Validation students are in the history (a platform uploads all it has); the
evaluation fits its 3-parameter link on their diagnoses, as it does for the in-process ``served`` row, whose
validation students calibrated that row.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.processes import Processes, free_port, wait_http
from evaluation.results import VIA_API_ROW
from evaluation.rows import Estimates
from evaluation.served import HeldoutStudents
from providers import EntitySpec
from qmatrix import Response
from qmatrix.io import qmatrix_to_json
from qmatrix.responses import write_responses_csv

__all__ = ["ServedViaApi"]

TENANT = "evaluation-upload"
_FINISHED = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class GatewayDefaults:
    """The served defaults the gateway process is started with: this evaluation's (``fedcd evaluate`` passes its
    ``Settings``' values), so the row over HTTP is served as the in-process one."""

    default_mechanism: str
    default_epsilon: float
    sensitivity: str
    default_calibration_method: str


class ServedViaApi:
    """A :class:`evaluation.served.ServedRowSource`: upload, train and diagnose through a fresh gateway process."""

    def __init__(self, defaults: GatewayDefaults, entities: Sequence[EntitySpec], *, seed: int,
                 release_epsilon: float | None, rounds: int, concurrency: int = 4, max_seconds: float = 3600.0,
                 progress: Callable[[str], None] = lambda _: None) -> None:
        self.defaults, self.entities, self.seed, self.release_epsilon = defaults, list(entities), seed, release_epsilon
        self.rounds = rounds  # the train job's rounds: the evaluation's local-fed rounds
        self.concurrency, self.max_seconds, self.progress = concurrency, max_seconds, progress
        self.facts: dict[str, Any] = {}  # what the run did, for the report's notes

    async def __call__(self, students: HeldoutStudents) -> Estimates:
        work = Path(tempfile.mkdtemp(prefix="fedcd-served-via-api-"))
        procs = Processes(work)
        try:
            base = await asyncio.to_thread(self._start, work, procs, len(students.validation), len(students.history))
            headers = {"Authorization": f"Bearer {await asyncio.to_thread(self._admin_key, work)}"}
            async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120.0) as client:
                await self._upload_and_train(client, students, work)
                validation = await self._diagnose_all(client, students, students.validation, "validation")
                test = await self._diagnose_all(client, students, students.test, "test")
        finally:
            await asyncio.to_thread(procs.stop_all)
        noise = self.defaults.default_mechanism
        return Estimates(name=VIA_API_ROW, epsilon=self.defaults.default_epsilon, validation=validation, test=test,
                         mechanism=noise)

    # -- the gateway --------------------------------------------------------------------------------
    def _env(self, work: Path) -> dict[str, str]:
        return {**os.environ, "FEDCD_CONFIG": str(work / "fedcd.yaml"), "FEDCD_STATE_DIR": str(work / "state"),
                "PYTHONUNBUFFERED": "1"}

    def _start(self, work: Path, procs: Processes, validation: int, history: int) -> str:
        """Write the gateway's configuration and start it; its base URL once it answers."""
        config = {
            "entities": [spec.model_dump(mode="json", exclude_defaults=True) for spec in self.entities],
            # The evaluation's served defaults, named (the process also inherits this one's FEDCD_ environment).
            "default_mechanism": self.defaults.default_mechanism, "default_epsilon": self.defaults.default_epsilon,
            "sensitivity": self.defaults.sensitivity,
            "default_calibration_method": self.defaults.default_calibration_method,
            "calibration_release_epsilon": self.release_epsilon,  # as the evaluation's served calibration
            # Nothing but the tenant's upload trains or calibrates; the job holds out the evaluation's validation size.
            "default_calibration": False, "train_default_model": False, "train_seed": self.seed,
            "train_rounds": self.rounds,
            "train_calibration_fraction": validation / history, "train_calibration_students": validation,
        }
        (work / "fedcd.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        port = free_port()
        self.progress(f"starting fedcd serve on 127.0.0.1:{port} (state {work / 'state'})")
        gateway = procs.start("gateway", [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
                              self._env(work))
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", gateway, seconds=300.0)
        except RuntimeError as exc:
            tail = (work / "gateway.log").read_text(errors="replace").strip().splitlines()[-12:]
            raise RuntimeError(f"{exc}; the gateway's log ends:\n" + "\n".join(tail)) from exc
        return f"http://127.0.0.1:{port}"

    def _admin_key(self, work: Path) -> str:
        """An admin key of a new tenant, made by the operator's CLI (as an operator onboards a platform)."""
        out = subprocess.run(
            [sys.executable, "-m", "app.cli", "keys", "create", "--tenant", TENANT, "--role", "admin", "--json"],
            env=self._env(work), capture_output=True, text=True, timeout=120, check=True,
        )
        return str(json.loads(out.stdout)["api_key"])

    # -- upload, train, calibrate -------------------------------------------------------------------
    async def _upload_and_train(self, client: httpx.AsyncClient, students: HeldoutStudents, work: Path) -> None:
        q = students.qmatrix  # registered under the tenant's own id (a built-in id cannot be replaced)
        _ok(await client.post("/v1/qmatrices", json={**qmatrix_to_json(q), "id": _bank_id(q.id)}), 201)
        history = work / "history.csv"
        write_responses_csv(history, students.history)
        self.progress(f"uploading {len(students.history)} students' history to /v1/qmatrices/{_bank_id(q.id)}/train")
        r = _ok(await client.post(f"/v1/qmatrices/{_bank_id(q.id)}/train",
                                  files={"responses": ("history.csv", history.read_bytes(), "text/csv")}), 202)
        train = await self._finished(client, r.json()["job_id"])
        calibration = await self._finished(client, train["metrics"]["calibration_job_id"])
        self.facts = {"tenant": TENANT, "uploaded_students": len(students.history), "train_job": train["metrics"],
                      "calibration_job": {k: calibration.get(k) for k in ("job_id", "calibration_id", "metrics")}}

    async def _finished(self, client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
        """The job once it has finished (succeeded, else an error naming its state and last message)."""
        deadline = time.monotonic() + self.max_seconds
        last = None
        while time.monotonic() < deadline:
            job = _ok(await client.get(f"/v1/jobs/{job_id}"), 200).json()
            message = (job.get("history") or [{}])[-1].get("message")
            if message != last:
                self.progress(f"job {job_id} ({job['kind']}): {job['status']} {message or ''}")
                last = message
            if job["status"] in _FINISHED:
                if job["status"] != "succeeded":
                    raise RuntimeError(f"{job['kind']} job {job_id} {job['status']}: {job.get('error') or message}")
                return dict(job)
            await asyncio.sleep(1.0)
        raise RuntimeError(f"job {job_id} did not finish within {self.max_seconds:.0f} s")

    # -- diagnoses --------------------------------------------------------------------------------------
    async def _diagnose_all(self, client: httpx.AsyncClient, students: HeldoutStudents,
                            observed: Sequence[Sequence[Response]], part: str) -> list[dict[str, float]]:
        gate = asyncio.Semaphore(self.concurrency)
        bases: dict[str, int] = {}

        async def one(i: int, responses: Sequence[Response]) -> dict[str, float]:
            async with gate:
                r = _ok(await client.post("/v1/diagnose", json={
                    "student_id": f"{part}-{i}", "qmatrix_id": _bank_id(students.qmatrix.id),
                    "responses": [r.model_dump(exclude_none=True) for r in responses]}), 200)
            body = r.json()
            basis = body.get("basis") or {}
            key = f"{basis.get('local_model')} {basis.get('local_model_version')}, {basis.get('calibration')}"
            bases[key] = bases.get(key, 0) + 1
            return {c: float(v) for c, v in body["mastery"].items()}

        self.progress(f"diagnosing {len(observed)} {part} students through /v1/diagnose")
        out = list(await asyncio.gather(*(one(i, r) for i, r in enumerate(observed))))
        self.facts.setdefault("bases", {})[part] = bases  # e.g. {"trained v0001, calibrated": 107}
        return out


def _bank_id(qmatrix_id: str) -> str:
    return f"{qmatrix_id}-bank"


def _ok(response: httpx.Response, status: int) -> httpx.Response:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.method} {response.request.url.path}: {response.status_code} "
                           f"{response.text[:500]}")
    return response
