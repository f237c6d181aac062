"""Background jobs that survive restarts and dead workers.

A job row is written ``queued`` before anything runs. Every worker runs a claim loop: it takes one
claimable job in one conditional ``UPDATE … RETURNING`` (on PostgreSQL the candidate is picked with
``FOR UPDATE SKIP LOCKED``), so each job runs in exactly one worker. A job is claimable when it is
queued, released (its worker shut down cleanly), or claimed by a worker that is no longer live or
whose job heartbeat went stale (the worker died). The claiming worker heartbeats the job while it
runs; each finished unit (a student) is stored as it completes, so a reclaimed job resumes from its
stored progress and computes no unit twice. Every transition is recorded in ``job_events`` — the
job's readable history. A job of a kind no longer available is failed with the reason; nothing is
silently lost.

Claims and heartbeats run on the runner's own thread and database connection (``control``), and the
heartbeat has its own loop: measured before, they shared the 6-thread pool with embedded-model calls,
the heartbeat went 30 s stale behind them and the worker took over *its own* running job twice (three
copies of the first-start calibration at once). A worker also never claims a job it is running itself,
whatever its heartbeat says. Jobs are claimed fairly across tenants, and a tenant may hold only so many active
(:mod:`app.jobs.quota`). Jobs run at background priority (``providers.scheduling``): a user's
diagnosis gets an entity's slots first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import sessionmaker

from app.db import JobEventRow, JobRow
from app.jobs.context import JobAbandoned, JobContext, JobHandler
from app.jobs.failures import failure_trace, stored_error
from app.jobs.quota import ACTIVE_STATES, QueueFull, active_jobs, fair_order
from app.jobs.records import JobRecords
from app.settings import Settings
from providers.scheduling import background_priority

__all__ = ["ACTIVE_STATES", "JobRunner", "JobTiming"]


log = logging.getLogger("fedcd.jobs")
T = TypeVar("T")


@dataclass(frozen=True)
class JobTiming:
    """How often a worker looks for work and shows it is alive, and when another worker may take its job over.

    ``stale_s``: a job whose heartbeat is older is claimable by any worker (its worker died);
    ``heartbeat_s``: how often a running job's heartbeat is renewed (well under ``stale_s``);
    ``poll_s``: how often an idle worker looks for a claimable job (a submit in this worker wakes it at once).
    """

    stale_s: float = 30.0
    heartbeat_s: float = 5.0
    poll_s: float = 2.0

    @classmethod
    def from_settings(cls, settings: Settings) -> JobTiming:
        return cls(stale_s=settings.worker_stale_s, heartbeat_s=settings.worker_heartbeat_s)


class JobRunner(JobRecords):
    """Claims and runs jobs in this worker; the handler returns the fields to store on success."""

    def __init__(
        self,
        sessions: sessionmaker,
        *,
        worker_id: str = "local",
        live_workers: Callable[[], set[str]] | None = None,
        timing: JobTiming = JobTiming(),
        concurrency: int = 2,
        control_sessions: sessionmaker | None = None,
        on_finish: Callable[[dict[str, Any]], object] | None = None,
    ) -> None:
        self.sessions, self.worker_id = sessions, worker_id
        # Told of each job this worker finished (the webhooks); called on the event loop, it must return at once.
        self.on_finish = on_finish
        # Claims and heartbeats: their own connection (when given) and their own thread.
        self._control_sessions = control_sessions or sessions
        self._control: Executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"jobs-control-{worker_id}")
        self._live_workers = live_workers or (lambda: {worker_id})
        self.timing, self.concurrency = timing, concurrency
        self.handlers: dict[str, JobHandler] = {}
        # What a job of a kind holds outside the database (a training upload), freed when it is cancelled without
        # its handler running: while queued, or while cancelling after its worker died (JobAbandoned).
        self.abandoned: dict[str, JobAbandoned] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._beat_now = asyncio.Event()  # a cancel was requested here: look for it before the next heartbeat
        self._contexts: dict[str, JobContext] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._beat_task: asyncio.Task[None] | None = None
        self._closing = False
        # A tenant's cap is counted and its job inserted under this lock in this process: threads submitting at once
        # (requests run submits in worker threads) cannot all read the same count (SQLite's count and insert are not
        # one serialised transaction). Other workers may still pass it by the few that race.
        self._submit_guard = threading.Lock()

    def register(self, kind: str, handler: JobHandler, *, on_abandoned: JobAbandoned | None = None) -> None:
        self.handlers[kind] = handler
        if on_abandoned is not None:
            self.abandoned[kind] = on_abandoned

    def start(self) -> None:
        """Start claiming (call once the handlers are registered)."""
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._claim_loop(), name=f"jobs-{self.worker_id}")
            self._beat_task = asyncio.create_task(self._heartbeat_loop(), name=f"jobs-heartbeat-{self.worker_id}")

    def submit(self, kind: str, request: dict[str, Any], *, tenant: str, max_active: int | None = None) -> str:
        """Queue a job of the tenant; with ``max_active``, refused (:class:`QueueFull`) while the tenant has that many
        active already (a tenant's requests, never the server's own jobs). Counted with the insert, under a lock in
        this process: concurrent submits on several workers may pass the cap by the few that race."""
        job_id = uuid.uuid4().hex
        guard = self._submit_guard if max_active is not None else contextlib.nullcontext()
        with guard, self.sessions.begin() as session:  # the insert committed before the lock is let go
            if max_active is not None:
                active = active_jobs(session, tenant)
                if active >= max_active:
                    raise QueueFull(tenant, active, max_active)
            session.add(JobRow(id=job_id, tenant=tenant, kind=kind, status="queued", request_json=json.dumps(request)))
            session.flush()  # the job row first: events reference it
            session.add(JobEventRow(job_id=job_id, status="queued", worker=self.worker_id, message="submitted"))
        self._wake.set()
        return job_id

    async def cancel(self, job_id: str, *, tenant: str, by: str | None = None) -> tuple[str | None, bool]:
        """Cancel the tenant's job: (its status now, whether this call cancelled it). Queued: ``cancelled`` at once;
        running: ``cancelling`` until the worker running it stops it (woken now); already finished or cancelling: its
        status, unchanged; ``(None, False)`` when the tenant has no such job."""
        status, kind, request = await asyncio.to_thread(self._cancel_row, job_id, tenant, by)
        if status == "cancelled" and kind is not None:  # (a running job reports its cancel when it stops)
            await asyncio.to_thread(self._abandon, job_id, kind, request)
            self._finished(job_id, kind, tenant, "cancelled")  # on the loop: webhooks schedule their delivery here
        self.wake()
        return status, kind is not None

    def _cancel_row(self, job_id: str, tenant: str, by: str | None) -> tuple[str | None, str | None, str | None]:
        who = f" by key {by}" if by else ""
        with self.sessions.begin() as session:
            changed = None
            for before, after in (("queued", "cancelled"), ("running", "cancelling")):
                if session.execute(
                    update(JobRow).where(JobRow.id == job_id, JobRow.tenant == tenant, JobRow.status == before)
                    .values(status=after).execution_options(synchronize_session=False)
                ).rowcount == 1:
                    session.add(JobEventRow(job_id=job_id, status=after, worker=self.worker_id,
                                            message=f"cancel requested{who}"))
                    changed = after
                    break
            row = session.get(JobRow, job_id)
            if row is None or row.tenant != tenant:
                return None, None, None
            return (changed or row.status), (row.kind if changed else None), row.request_json

    def _abandon(self, job_id: str, kind: str, request_json: str | None) -> None:
        """Free what a job cancelled without its handler running holds (``on_abandoned``); never fails the cancel."""
        hook = self.abandoned.get(kind)
        if hook is None or request_json is None:
            return
        try:
            hook(json.loads(request_json))
        except Exception:
            log.exception("job %s: freeing what the cancelled job held failed (retention frees it later)", job_id)

    def wake(self) -> None:
        """Look for work and for cancels now rather than at the next poll or heartbeat."""
        self._wake.set()
        self._beat_now.set()

    async def wait(self, job_id: str) -> None:
        task = self._tasks.get(job_id)
        if task is not None:
            await asyncio.shield(task)

    async def aclose(self) -> None:
        """Stop claiming; cancel running jobs and release their claims so another worker takes them at once."""
        # The flag as well as the cancel: Python 3.11's wait_for can swallow a cancel that coincides with the
        # wake-up it waits for (seen here with a short poll), and the loop would run on.
        self._closing = True
        self._wake.set()
        loops = [t for t in (self._loop_task, self._beat_task) if t is not None]
        for loop_task in loops:
            loop_task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._control.shutdown(wait=False)

    async def _on_control(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._control, fn, *args)

    # -- claiming -------------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while not self._closing:
            try:
                for job_id in await self._on_control(self._heartbeat_running) or ():
                    self._stop_cancelled(job_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # a database hiccup must not end the loop
                log.exception("job heartbeat: will retry")
            await _nap(self._beat_now, self.timing.heartbeat_s)

    def _stop_cancelled(self, job_id: str) -> None:
        """A user cancelled a job this worker runs: stop its task (``_run`` stores ``cancelled``)."""
        task, context = self._tasks.get(job_id), self._contexts.get(job_id)
        if task is not None and context is not None and not context.cancel_requested:
            context.cancel_requested = True
            task.cancel()

    async def _claim_loop(self) -> None:
        while not self._closing:
            try:
                while len(self._tasks) < self.concurrency and not self._closing:
                    claimed = await self._on_control(self._claim_one, frozenset(self._tasks))
                    if claimed is None:
                        break
                    self._run_claimed(*claimed)
            except asyncio.CancelledError:
                raise
            except Exception:  # a database hiccup must not end the loop
                log.exception("job claim loop: will retry")
            await _nap(self._wake, self.timing.poll_s)

    def _claim_one(self, running_here: frozenset[str] = frozenset()) -> tuple[str, str, dict[str, Any], str, bool] | None:
        """Claim the next claimable job, fairly across tenants (:func:`app.jobs.quota.fair_order`): (id, kind,
        request, tenant, reclaimed) or ``None``.

        ``running_here``: the jobs this worker is running; never claimable by it, however stale their heartbeat.
        """
        now = time.time()
        live = sorted(self._live_workers())
        claimable = or_(
            JobRow.status == "queued",
            (JobRow.status == "running")
            & or_(JobRow.claimed_by.is_(None), JobRow.claimed_by.not_in(live), JobRow.heartbeat_at < now - self.timing.stale_s),
        )
        if running_here:
            claimable = claimable & JobRow.id.not_in(sorted(running_here))
        with self._control_sessions.begin() as session:
            candidate = (
                select(JobRow.id).where(claimable).order_by(*fair_order()).limit(1)
                .with_for_update(skip_locked=True)
                .scalar_subquery()
            )
            row = session.execute(
                update(JobRow)
                .where(JobRow.id == candidate, claimable)  # re-checked: a concurrent claimer loses here
                .values(claimed_by=self.worker_id, heartbeat_at=now, status="running")
                .returning(JobRow.id, JobRow.kind, JobRow.request_json, JobRow.tenant, JobRow.resumed)
                .execution_options(synchronize_session=False)
            ).first()
            if row is None:
                return None
            job_id, kind, request_json, tenant, resumed = row
            started_before = session.scalar(
                select(func.count()).where(JobEventRow.job_id == job_id, JobEventRow.status == "running")
            ) or 0
            reclaimed = started_before > 0
            if kind not in self.handlers:
                session.execute(update(JobRow).where(JobRow.id == job_id).values(
                    status="failed", claimed_by=None,
                    error=f"cut off by a restart; job kind '{kind}' is no longer available",
                ))
                session.add(JobEventRow(job_id=job_id, status="failed", worker=self.worker_id,
                                        message=f"job kind '{kind}' is not available in this version"))
                return None
            if reclaimed:
                session.execute(update(JobRow).where(JobRow.id == job_id).values(resumed=resumed + 1))
            session.add(JobEventRow(
                job_id=job_id, status="running", worker=self.worker_id,
                message="resumed from its stored progress after its worker stopped" if reclaimed else "claimed",
            ))
        if reclaimed:
            log.info("job %s resumed by worker %s from its stored progress", job_id, self.worker_id)
        return job_id, kind, json.loads(request_json), tenant, reclaimed

    def _heartbeat_running(self) -> list[str]:
        """Heartbeat this worker's jobs; the ids of those a user asked to cancel. A ``cancelling`` job whose worker
        died is ``cancelled`` here (nobody would run it again), and what it held is freed (``on_abandoned``)."""
        now = time.time()
        cancelling: list[str] = []
        with self._control_sessions.begin() as session:
            orphans = session.execute(
                update(JobRow)
                .where(JobRow.status == "cancelling",
                       or_(JobRow.claimed_by.is_(None), JobRow.claimed_by.not_in(sorted(self._live_workers())),
                           JobRow.heartbeat_at < now - self.timing.stale_s))
                .values(status="cancelled", claimed_by=None)
                .returning(JobRow.id, JobRow.kind, JobRow.request_json).execution_options(synchronize_session=False)
            ).all()
            for job_id, _, _ in orphans:
                session.add(JobEventRow(job_id=job_id, status="cancelled", worker=self.worker_id,
                                        message="cancelled (its worker had stopped)"))
            if self._tasks:
                session.execute(
                    update(JobRow)
                    .where(JobRow.id.in_(list(self._tasks)), JobRow.claimed_by == self.worker_id)
                    .values(heartbeat_at=now)
                )
                cancelling = list(session.scalars(select(JobRow.id).where(
                    JobRow.id.in_(list(self._tasks)), JobRow.claimed_by == self.worker_id,
                    JobRow.status == "cancelling")))
        for job_id, kind, request_json in orphans:  # once the cancel is stored
            self._abandon(job_id, kind, request_json)
        return cancelling

    # -- running --------------------------------------------------------------------------------
    def _run_claimed(self, job_id: str, kind: str, request: dict[str, Any], tenant: str, _reclaimed: bool) -> None:
        self._tasks[job_id] = asyncio.create_task(self._run(job_id, kind, request, tenant), name=f"job-{job_id}")

    async def _run(self, job_id: str, kind: str, request: dict[str, Any], tenant: str) -> None:
        context = self._contexts[job_id] = JobContext(self.sessions, job_id, tenant)
        try:
            with background_priority():  # a user's diagnosis gets entity slots first
                outcome = await self.handlers[kind](request, context)
        except asyncio.CancelledError:
            if context.cancel_requested and not self._closing:  # a user's cancel: this job ends here
                if await asyncio.shield(asyncio.to_thread(self._finish, job_id, "cancelled", claimed_by=None,
                                                          message="cancelled")):
                    self._finished(job_id, kind, tenant, "cancelled")
                return
            # Shutting down: release the claim; another (or the next) worker resumes from the stored progress.
            await asyncio.shield(asyncio.to_thread(self._finish, job_id, "released", claimed_by=None,
                                                   message="released at shutdown"))
            raise
        except Exception as exc:
            error = stored_error(exc)  # never the exception's own text, which may quote the input (app.jobs.failures)
            log.error("job %s failed: %s\n%s", job_id, error, failure_trace(exc))
            if await asyncio.to_thread(self._finish, job_id, "failed", error=error, message=f"{type(exc).__name__}"):
                self._finished(job_id, kind, tenant, "failed", error=error)
        else:
            if await asyncio.to_thread(
                self._finish, job_id, "succeeded", calibration_id=outcome.get("calibration_id"),
                metrics_json=json.dumps(outcome.get("metrics", {})), notes_json=json.dumps(outcome.get("notes", [])),
                message="finished",
            ):
                self._finished(job_id, kind, tenant, "succeeded", calibration_id=outcome.get("calibration_id"))
        finally:
            self._tasks.pop(job_id, None)
            self._contexts.pop(job_id, None)
            self._wake.set()

    def _finish(self, job_id: str, status: str, *, message: str, **fields: Any) -> bool:
        """Store the outcome; ``False`` when another worker holds the job now (it reports the outcome, not this one)."""
        with self.sessions.begin() as session:
            values = dict(fields)
            if status != "released":
                values["status"] = status
            stored = session.execute(
                update(JobRow).where(JobRow.id == job_id, JobRow.claimed_by == self.worker_id).values(**values)
            ).rowcount == 1
            session.add(JobEventRow(job_id=job_id, status=status, worker=self.worker_id, message=message))
        return stored

    def _finished(self, job_id: str, kind: str, tenant: str, status: str, **fields: Any) -> None:
        """Tell ``on_finish`` (after the outcome is stored); whatever it does, the job is not concerned."""
        if self.on_finish is None:
            return
        try:
            self.on_finish({"job_id": job_id, "kind": kind, "tenant": tenant, "status": status,
                            "error": None, "calibration_id": None, **fields})
        except Exception:
            log.exception("job %s: on_finish failed (the job itself is finished and stored)", job_id)


async def _nap(wake: asyncio.Event, seconds: float) -> None:
    """A loop's pause: ``seconds``, or until ``wake`` is set (by a new job, a cancel) — whichever comes first."""
    wake.clear()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(wake.wait(), timeout=seconds)
