"""Scale-out on PostgreSQL with real gateway processes: the ledger stays exact across processes (and after
``kill -9`` of one mid-burst), and a job whose worker dies is finished by another."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from app.auth import KeyStore
from app.db import Database
from tests.app.gateway_processes import free_port, start_gateway, stop_gateway
from tests.providers.wire_servers import Delay, WireServer, success

SIM = [{"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"}]
ITEMS = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]


def _body(n: int) -> dict:
    return {"student_id": "one-student", "qmatrix_id": "example-prealgebra", "epsilon": 1.0,
            "responses": [{"item_id": i, "correct": bool((n >> k) & 1)} for k, i in enumerate(ITEMS)]}


def _key(url: str, role: str = "client") -> dict[str, str]:
    db = Database(url)
    try:
        return {"Authorization": f"Bearer {KeyStore(db.sessions).create(tenant='school', role=role).api_key}"}
    finally:
        db.close()


def _rows(url: str, query: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(query))]
    finally:
        engine.dispose()


async def _burst(ports: list[int], headers: dict[str, str], n: int) -> list[int | str]:
    limits = httpx.Limits(max_connections=100)
    # No limit on the wait for a free connection: on a busy 2-core machine 1,000 requests queue for minutes, and
    # this test counts outcomes, not time (each request, once sent, still has 60 s).
    timeout = httpx.Timeout(60, pool=None)
    async with httpx.AsyncClient(headers=headers, timeout=timeout, limits=limits) as client:
        async def one(k: int) -> int | str:
            try:
                r = await client.post(f"http://127.0.0.1:{ports[k % len(ports)]}/v1/diagnose", json=_body(k))
                return r.status_code
            except httpx.HTTPError as exc:
                return type(exc).__name__

        return list(await asyncio.gather(*(one(k) for k in range(n))))


def _env(url: str, state: Path, **extra: str) -> dict[str, str]:
    return {"FEDCD_DATABASE_URL": url, "FEDCD_STATE_DIR": str(state), "FEDCD_ENTITIES": json.dumps(SIM),
            "FEDCD_PRIVACY_PERIOD": "lifetime", "FEDCD_PRIVACY_CAP_EPSILON": "5", "FEDCD_PRIVACY_REPEAT_WINDOW_S": "0",
            "FEDCD_WORKER_HEARTBEAT_S": "0.5", "FEDCD_WORKER_STALE_S": "3", **extra}


def test_a_thousand_requests_across_two_processes_spend_exactly_the_cap(postgres_url: str, tmp_path: Path) -> None:
    headers = _key(postgres_url)
    ports = [free_port(), free_port()]
    procs = [start_gateway(p, _env(postgres_url, tmp_path)) for p in ports]
    try:
        codes = asyncio.run(_burst(ports, headers, 1000))
    finally:
        for proc in procs:
            stop_gateway(proc)
    assert codes.count(200) == 5 and codes.count(429) == 995, {c: codes.count(c) for c in set(codes)}
    assert _rows(postgres_url, "SELECT status, count(*) FROM privacy_charges GROUP BY status") == [("released", 5)]
    assert _rows(postgres_url, "SELECT queries FROM privacy_students") == [(5,)]


def test_kill_minus_nine_of_one_process_mid_burst_leaves_the_ledger_exact(postgres_url: str, tmp_path: Path) -> None:
    headers = _key(postgres_url)
    ports = [free_port(), free_port()]
    env = _env(postgres_url, tmp_path, FEDCD_PRIVACY_CAP_EPSILON="300")
    procs = [start_gateway(p, env) for p in ports]
    victim = procs[0]

    async def burst_and_kill() -> list[int | str]:
        task = asyncio.create_task(_burst(ports, headers, 1000))
        while not _rows(postgres_url, "SELECT 1 FROM privacy_charges LIMIT 1"):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # mid-burst
        os.kill(victim.pid, signal.SIGKILL)
        return await task

    try:
        codes = asyncio.run(burst_and_kill())
        victim.wait(timeout=10)
        procs[0] = start_gateway(ports[0], env)  # the restart settles what the dead process left pending
        status = httpx.post(f"http://127.0.0.1:{ports[0]}/v1/privacy/lookup", json={"student_id": "one-student"},
                            headers=headers, timeout=30).json()
    finally:
        for proc in procs:
            stop_gateway(proc)
    by_status = dict(_rows(postgres_url, "SELECT status, count(*) FROM privacy_charges GROUP BY status"))
    assert "charged" not in by_status, by_status  # nothing left pending
    spent = by_status.get("released", 0)
    assert codes.count(200) <= spent <= 300  # every answer was charged; a few were stored but never delivered
    assert status["queries"] == spent and status["lifetime_epsilon"] == float(spent)  # the saved state agrees
    assert any(c not in (200, 429) for c in codes)  # the kill did cut requests off


def test_a_job_whose_worker_dies_is_finished_by_another(postgres_url: str, tmp_path: Path) -> None:
    headers = _key(postgres_url, role="admin")
    reply = success({"Add and subtract fractions": 0.6, "Solve two-step linear equations": 0.4,
                     "Multiply and divide fractions": 0.5, "Percent and ratio": 0.5, "Exponents and order": 0.5,
                     "Linear inequalities": 0.5})
    with WireServer(fallback=Delay(0.15, reply)) as wire:
        entity = [{"name": "slow", "kind": "openai_compatible", "base_url": f"{wire.url}/v1", "model": "m",
                   "max_attempts": 1, "concurrency": 2}]
        # Unnoised calibration of real records: allowed by the server (the takeover is tested here, not the noise).
        env = _env(postgres_url, tmp_path, FEDCD_ENTITIES=json.dumps(entity), FEDCD_BATCH_CONCURRENCY="2",
                   FEDCD_ALLOW_UNNOISED="true")
        ports = [free_port(), free_port()]
        procs = [start_gateway(p, env) for p in ports]
        try:
            records = [{"student_id": f"v{k}", "responses": _body(k)["responses"]} for k in range(40)]  # 40 distinct prompts
            body = {"qmatrix_id": "example-prealgebra", "records": records, "epsilon": "none", "method": "bias",
                    "release_epsilon": "none"}
            job_id = httpx.post(f"http://127.0.0.1:{ports[1]}/v1/calibrate", json=body, headers=headers, timeout=30).json()["job_id"]
            deadline = time.monotonic() + 60
            while True:
                job = httpx.get(f"http://127.0.0.1:{ports[1]}/v1/calibrate/{job_id}", headers=headers, timeout=30).json()
                if job["progress"]["done"] >= 6:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.1)
            runner = next(e["worker"] for e in job["history"] if e["status"] == "running")
            pid = int(runner.split(":")[1])
            victim = next(p for p in procs if p.pid == pid)
            survivor = ports[procs.index(victim) ^ 1]
            os.kill(pid, signal.SIGKILL)
            victim.wait(timeout=10)
            deadline = time.monotonic() + 90
            while job["status"] not in ("succeeded", "failed"):
                assert time.monotonic() < deadline, job
                time.sleep(0.2)
                job = httpx.get(f"http://127.0.0.1:{survivor}/v1/calibrate/{job_id}", headers=headers, timeout=30).json()
        finally:
            for proc in procs:
                stop_gateway(proc)
        calls = len(wire.requests_to("/v1/chat/completions"))
    assert job["status"] == "succeeded", job
    assert job["resumed"] >= 1 and job["progress"]["done"] == 40
    events = [(e["status"], e["worker"]) for e in job["history"]]
    assert events[0][0] == "queued" and ("running", runner) in events
    resumed_by = [w for s, w in events if s == "running" and w != runner]
    assert resumed_by and any("stored progress" in e["message"] for e in job["history"])
    assert events[-1][0] == "succeeded" and events[-1][1] == resumed_by[-1]
    # Every student's result stored once; only the few in flight at the kill were asked twice.
    assert _rows(postgres_url, f"SELECT count(*), count(DISTINCT idx) FROM job_items WHERE job_id = '{job_id}'") == [(40, 40)]
    assert 40 <= calls <= 40 + 4
