"""app.jobs.runner: a worker never takes over a job it is running itself, however stale its heartbeat;
another worker still takes over a job whose worker stopped heartbeating; jobs run at background priority.
Work is counted (claims, handler runs, events), never elapsed time."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.db import Database, JobEventRow, JobRow
from app.jobs import JobContext, JobRunner, JobTiming
from providers.scheduling import call_priority


def _database(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'jobs.db'}")


def _events(database: Database, job_id: str) -> list[tuple[str, str]]:
    with database.sessions() as session:
        rows = session.query(JobEventRow).filter(JobEventRow.job_id == job_id).order_by(JobEventRow.seq).all()
        return [(row.status, row.message) for row in rows]


async def test_a_worker_whose_heartbeat_stalls_never_takes_over_its_own_job(tmp_path: Path) -> None:
    # Prepare: the heartbeat stalls (as when it waited behind model calls in a shared thread pool) while the
    # claim loop polls on and on; the job's heartbeat is stale after 0.01 s.
    database = _database(tmp_path)
    runner = JobRunner(database.sessions, worker_id="w1", timing=JobTiming(stale_s=0.01, heartbeat_s=3600.0, poll_s=0.01),
                       control_sessions=database.control_sessions)
    release, runs, claims = asyncio.Event(), [], []
    original_claim = runner._claim_one

    def counted_claim(running_here: frozenset[str] = frozenset()) -> Any:
        claims.append(running_here)
        return original_claim(running_here)

    runner._claim_one = counted_claim  # type: ignore[method-assign]
    runner._heartbeat_running = lambda: None  # type: ignore[method-assign]  # stalled

    async def handler(request: dict[str, Any], context: JobContext) -> dict[str, Any]:
        runs.append(call_priority())
        await release.wait()
        return {}

    runner.register("long", handler)
    job_id = runner.submit("long", {}, tenant="t")
    runner.start()

    # Execute: let the claim loop poll many times while the job runs with a stale heartbeat
    for _ in range(2000):
        if len(claims) >= 20:
            break
        await asyncio.sleep(0.005)
    release.set()
    await runner.wait(job_id)
    await runner.aclose()

    # Assert: polled often with the job marked as running here, ran once, claimed once, never "resumed"
    assert len(claims) >= 20 and any(job_id in c for c in claims)
    assert runs == ["background"]
    events = _events(database, job_id)
    assert [s for s, _ in events] == ["queued", "running", "succeeded"], events
    with database.sessions() as session:
        job = session.get(JobRow, job_id)
        assert job is not None and job.resumed == 0 and job.status == "succeeded"
    database.close()


def test_another_worker_takes_over_a_job_whose_worker_stopped_heartbeating(tmp_path: Path) -> None:
    # Prepare: worker w1 claimed a job and went silent (stale heartbeat); both workers look live
    database = _database(tmp_path)
    live = lambda: {"w1", "w2"}  # noqa: E731
    w1 = JobRunner(database.sessions, worker_id="w1", timing=JobTiming(stale_s=0.0), live_workers=live)
    w2 = JobRunner(database.sessions, worker_id="w2", timing=JobTiming(stale_s=0.0), live_workers=live)
    for runner in (w1, w2):
        runner.register("long", lambda request, context: asyncio.sleep(0))  # type: ignore[arg-type,return-value]
    job_id = w1.submit("long", {}, tenant="t")
    assert w1._claim_one() is not None

    # Execute / Assert: w1 itself (running it) never reclaims it; w2 takes it over, as resumed
    assert w1._claim_one(frozenset({job_id})) is None
    claimed = w2._claim_one()
    assert claimed is not None and claimed[0] == job_id and claimed[4] is True
    assert [s for s, _ in _events(database, job_id)] == ["queued", "running", "running"]
    database.close()
