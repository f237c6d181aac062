"""The async face's group commit on SQLite (privacy.ledger.writer): a batch of queued write calls in one
transaction, a savepoint each. A failing call fails alone, the cap stays exact inside a batch, a database error
re-runs the batch's calls one by one, a failed COMMIT fails every caller, close() stops the thread.

Batches are made deterministic by a first call that holds the writer inside its batch until every call under test
is queued: those are then the next batch (``BATCH`` = 64 at most).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event, text
from sqlalchemy.exc import OperationalError

from privacy.ledger import AsyncLedger, BudgetExceeded, ChargeStateError, PrivacyLedger, StudentKey
from privacy.ledger import writer
from privacy.ledger.writer import BATCH, GroupCommitter
from privacy.mechanisms import ReleaseCost
from privacy.registry import PAPER_MECHANISM

T, S = "tenant-a", StudentKey("student-1")
COST = ReleaseCost(epsilon=0.1, delta=0.0, mechanism=PAPER_MECHANISM)


def _committer(ledger: PrivacyLedger) -> GroupCommitter:
    committer = ledger.engines.committer
    assert committer is not None  # an SQLite ledger group-commits
    return committer


@contextlib.contextmanager
def _begins(ledger: PrivacyLedger) -> Iterator[list[str]]:
    """The write transactions begun on the ledger's write engine meanwhile (its ``BEGIN IMMEDIATE``\\ s)."""
    seen: list[str] = []

    def count(conn, cursor, statement, *_rest) -> None:  # type: ignore[no-untyped-def]
        if statement.startswith("BEGIN"):
            seen.append(statement)

    event.listen(ledger.engines.writer, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(ledger.engines.writer, "before_cursor_execute", count)


async def _one_batch(ledger: PrivacyLedger, calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run ``calls`` in one batch (after a first one that holds the writer): the result, or the exception, of each."""
    committer = _committer(ledger)
    started, gate = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(timeout=30)

    first = committer.submit(hold)
    assert await asyncio.to_thread(started.wait, 30)
    tasks = [asyncio.ensure_future(call()) for call in calls]
    while committer._queue.qsize() < len(calls):  # each task runs up to its submit
        await asyncio.sleep(0.001)
    gate.set()
    await first
    return list(await asyncio.gather(*tasks, return_exceptions=True))


def _student_row(conn: Connection, student: str) -> None:
    """A write of a call under test: a student's row (the ledger's own writes need no nesting here)."""
    conn.execute(text("INSERT INTO privacy_students (tenant, student_id, accountant_json, queries, updated_at) "
                      "VALUES (:t, :s, '{}', 0, 0)"), {"t": T, "s": student})


def _rows(ledger: PrivacyLedger, student: str) -> int:
    with ledger.engines.read() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM privacy_students WHERE student_id = :s"),
                                {"s": student}).scalar_one())


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[PrivacyLedger]:
    engine = PrivacyLedger(tmp_path / "ledger.db", cap_epsilon=0.5)
    yield engine
    engine.close()


def _reopened(ledger: PrivacyLedger) -> PrivacyLedger:
    """A second ledger on the same file: what is committed, read by another connection."""
    return PrivacyLedger(ledger.engines.url, cap_epsilon=ledger.cap_epsilon)


async def test_a_batch_is_one_transaction_and_a_failing_call_fails_alone(ledger: PrivacyLedger) -> None:
    face = AsyncLedger(ledger)
    refunded = await face.charge(tenant=T, student=StudentKey("r"), cost=COST)
    await face.refund(refunded.id)
    pending = await face.charge(tenant=T, student=StudentKey("p"), cost=COST)

    def written_then_failed() -> None:  # writes, then raises inside its own savepoint
        with ledger.engines.write() as conn:
            _student_row(conn, "rolled-back")
            raise RuntimeError("after a write")

    with _begins(ledger) as begins:
        results = await _one_batch(ledger, [
            lambda: face.charge(tenant=T, student=StudentKey("a"), cost=COST),
            lambda: face.release(refunded, "[1]"),  # refunded: ChargeStateError
            lambda: face.charge(tenant=T, student=StudentKey("b"), cost=ReleaseCost(epsilon=0.6, delta=0.0,
                                                                                   mechanism=PAPER_MECHANISM)),
            lambda: _committer(ledger).submit(written_then_failed),
            lambda: face.store_answer(pending.id, "[2]", releases=5),  # more than charged: ValueError
            lambda: face.charge(tenant=T, student=StudentKey("c"), cost=COST),
        ])

    assert len(begins) == 2  # the holding batch, then all six calls in one transaction
    a, released, over, failed, stored, c = results
    assert isinstance(released, ChargeStateError) and isinstance(over, BudgetExceeded)
    assert isinstance(failed, RuntimeError) and isinstance(stored, ValueError)
    assert not a.repeat and not c.repeat
    committed = _reopened(ledger)
    try:
        assert [committed.status(T, StudentKey(s))["queries"] for s in ("a", "b", "c")] == [1, 0, 1]
        assert _rows(committed, "rolled-back") == 0
        assert committed.get_charge(refunded.id).status == "refunded"
        assert committed.get_charge(pending.id).status == "charged"  # the bad settlement changed nothing
    finally:
        committed.close()


async def _served(face: AsyncLedger, fingerprint: str) -> bool:
    """One charge of S (a distinct request): served, or refused for the budget."""
    try:
        await face.charge(tenant=T, student=S, cost=COST, request_fingerprint=fingerprint)
        return True
    except BudgetExceeded:
        return False


async def test_a_burst_inside_one_batch_serves_exactly_the_cap(ledger: PrivacyLedger) -> None:
    face = AsyncLedger(ledger)  # the cap (0.5) allows 5 charges of 0.1

    with _begins(ledger) as begins:
        served = await _one_batch(ledger, [lambda i=i: _served(face, f"q{i}") for i in range(BATCH)])

    assert len(begins) == 2 and sum(served) == 5
    with _begins(ledger) as begins:  # and a larger burst, free-running: batches of up to BATCH calls
        more = await asyncio.gather(*(_served(face, f"more{i}") for i in range(300)))
    assert sum(more) == 0 and len(begins) < 300
    assert (ledger.status(T, S)["queries"], ledger.status(T, S)["spent_epsilon"]) == (5, pytest.approx(0.5))


async def test_a_database_error_rolls_the_batch_back_and_reruns_each_call_alone(ledger: PrivacyLedger) -> None:
    face = AsyncLedger(ledger)
    runs: list[str] = []

    def broken() -> None:  # a write, then a database error: the batch cannot commit around it
        runs.append("broken")
        with ledger.engines.write() as conn:
            _student_row(conn, "broken")
            conn.execute(text("SELECT * FROM no_such_table"))

    with _begins(ledger) as begins:
        results = await _one_batch(ledger, [
            lambda: face.charge(tenant=T, student=StudentKey("a"), cost=COST),
            lambda: _committer(ledger).submit(broken),
            lambda: face.charge(tenant=T, student=StudentKey("b"), cost=COST),
        ])

    a, error, b = results
    assert isinstance(error, OperationalError) and "no_such_table" in str(error)
    assert runs == ["broken", "broken"]  # in the batch, then again in its own transaction
    assert len(begins) == 2 + 3  # the holding batch, the rolled-back one, then one transaction per call
    committed = _reopened(ledger)
    try:
        assert [committed.status(T, StudentKey(s))["queries"] for s in ("a", "b")] == [1, 1]
        assert _rows(committed, "broken") == 0
        assert {committed.get_charge(a.id).status, committed.get_charge(b.id).status} == {"charged"}
    finally:
        committed.close()


async def test_a_failed_commit_fails_every_caller_and_keeps_nothing(
    ledger: PrivacyLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    face = AsyncLedger(ledger)
    real_commit = Connection.commit
    commits: list[str] = []

    def second_commit_fails(conn: Connection) -> None:  # the holding batch's commit passes, the next one fails
        if threading.current_thread().name == "fedcd-ledger-writer":
            commits.append("commit")
            if len(commits) == 2:
                raise OperationalError("COMMIT", {}, sqlite3.OperationalError("disk I/O error"))
        real_commit(conn)

    await face.charge(tenant=T, student=StudentKey("warm"), cost=COST)  # the writer is up, its first commit made
    monkeypatch.setattr(Connection, "commit", second_commit_fails)
    results = await _one_batch(ledger, [
        lambda: face.charge(tenant=T, student=StudentKey(s), cost=COST) for s in ("a", "b")
    ])
    monkeypatch.undo()

    assert len(commits) == 2 and all(isinstance(r, OperationalError) for r in results), results
    assert [ledger.status(T, StudentKey(s))["queries"] for s in ("a", "b")] == [0, 0]
    assert not (await face.charge(tenant=T, student=StudentKey("a"), cost=COST)).repeat  # the writer goes on


async def test_a_failed_commit_leaves_a_call_its_own_error(
    ledger: PrivacyLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that failed on its own (over budget: a 429 to its caller) keeps that error when the batch's COMMIT
    fails; only the calls that had succeeded get the database error."""
    face = AsyncLedger(ledger)
    real_commit = Connection.commit
    commits: list[str] = []

    def second_commit_fails(conn: Connection) -> None:
        if threading.current_thread().name == "fedcd-ledger-writer":
            commits.append("commit")
            if len(commits) == 2:
                raise OperationalError("COMMIT", {}, sqlite3.OperationalError("disk I/O error"))
        real_commit(conn)

    await face.charge(tenant=T, student=StudentKey("warm"), cost=COST)
    monkeypatch.setattr(Connection, "commit", second_commit_fails)
    over = ReleaseCost(epsilon=0.6, delta=0.0, mechanism=PAPER_MECHANISM)  # past the cap of 0.5
    ok, refused = await _one_batch(ledger, [
        lambda: face.charge(tenant=T, student=StudentKey("a"), cost=COST),
        lambda: face.charge(tenant=T, student=StudentKey("b"), cost=over),
    ])
    monkeypatch.undo()

    assert isinstance(ok, OperationalError) and isinstance(refused, BudgetExceeded), (ok, refused)


async def test_a_writer_thread_that_died_is_replaced_and_its_queued_calls_run(ledger: PrivacyLedger) -> None:
    """A writer that stopped without close() (a bug killing the thread) must not leave later writes waiting for
    ever: the next call starts a new writer, which also runs what the dead one left queued."""
    face, committer = AsyncLedger(ledger), _committer(ledger)
    await face.charge(tenant=T, student=StudentKey("warm"), cost=COST)
    ledger.close()  # the writer stopped: nothing serves its queue any more
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    loop = asyncio.get_running_loop()
    orphan: asyncio.Future[Any] = loop.create_future()
    with committer._guard:  # the state a dead writer leaves: its thread object, not alive, a call in its queue
        committer._thread = dead
        committer._queue.put(writer._Call(ledger.charge, (), {"tenant": T, "student": StudentKey("orphan"),
                                                              "cost": COST}, loop, orphan))

    fresh = await asyncio.wait_for(face.charge(tenant=T, student=StudentKey("fresh"), cost=COST), 30)
    left = await asyncio.wait_for(orphan, 30)

    assert committer.running and committer._thread is not dead
    assert not fresh.repeat and not left.repeat
    assert [ledger.status(T, StudentKey(s))["queries"] for s in ("fresh", "orphan")] == [1, 1]


async def test_group_writes_run_apart_from_the_writer(ledger: PrivacyLedger) -> None:
    """A cohort's or a calibration's charges (one write per student) never occupy the writer thread: a diagnosis's
    charge queued meanwhile is not held behind thousands of them."""
    face, committer = AsyncLedger(ledger), _committer(ledger)
    queued: list[str] = []
    real_submit = committer.submit

    def counting(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        queued.append(fn.__name__)
        return real_submit(fn, *args, **kwargs)

    committer.submit = counting  # type: ignore[method-assign]
    made = await face.charge_all(tenant=T, students=[StudentKey(f"g{i}") for i in range(5)], cost=COST)
    await face.settle_all(made, released="[1]")
    await face.charge(tenant=T, student=StudentKey("one"), cost=COST)

    assert queued == ["charge"]
    assert all(ledger.get_charge(c.id).status == "released" for c in made)


async def test_close_commits_what_is_queued_and_stops_the_thread(ledger: PrivacyLedger) -> None:
    face = AsyncLedger(ledger)
    committer = _committer(ledger)
    assert not committer.running  # started by the first write call, not before
    tasks = [asyncio.ensure_future(face.charge(tenant=T, student=StudentKey(f"s{i}"), cost=COST)) for i in range(20)]
    await asyncio.sleep(0)  # every call queued
    assert committer.running

    thread = committer._thread
    assert thread is not None and thread.name == "fedcd-ledger-writer"

    ledger.close()

    assert not committer.running and not thread.is_alive()
    charges = await asyncio.gather(*tasks)  # resolved: committed before the thread stopped
    committed = _reopened(ledger)
    try:
        assert all(committed.get_charge(c.id).status == "charged" for c in charges)
    finally:
        committed.close()
    # A call after close() starts a writer again (as the engines reopen after dispose); close() stops it again.
    assert not (await face.charge(tenant=T, student=StudentKey("late"), cost=COST)).repeat
    assert committer.running
    ledger.close()
    assert not committer.running


async def test_an_idle_writer_stops_and_the_next_call_starts_one(
    ledger: PrivacyLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "IDLE_S", 0.01)  # a ledger nobody closes must not keep a thread (and its objects)
    face, committer = AsyncLedger(ledger), _committer(ledger)
    await face.charge(tenant=T, student=StudentKey("a"), cost=COST)
    thread = committer._thread
    assert thread is not None
    await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive() and not committer.running
    assert not (await face.charge(tenant=T, student=StudentKey("b"), cost=COST)).repeat
    assert ledger.status(T, StudentKey("b"))["queries"] == 1


def test_callers_on_several_event_loops_share_one_exact_cap(ledger: PrivacyLedger) -> None:
    face = AsyncLedger(ledger)  # the cap (0.5) allows 5 charges of 0.1
    served: list[int] = []

    async def attempts(loop_no: int) -> None:
        served.append(sum(await asyncio.gather(*(_served(face, f"{loop_no}-{i}") for i in range(50)))))

    threads = [threading.Thread(target=asyncio.run, args=(attempts(n),)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(served) == 4 and sum(served) == 5
    assert ledger.status(T, S)["queries"] == 5


def test_a_postgresql_ledger_keeps_a_transaction_per_call() -> None:
    from tests.postgres import fresh_postgres

    with fresh_postgres() as url:
        ledger = PrivacyLedger(url, cap_epsilon=1.0)
        try:
            assert ledger.engines.committer is None  # row locks per student: no batch across students
            charge = asyncio.run(AsyncLedger(ledger).charge(tenant=T, student=S, cost=COST))
            assert ledger.get_charge(charge.id).status == "charged"
        finally:
            ledger.close()


def _charge_in_child(ledger: PrivacyLedger) -> None:
    ledger.engines.writer.dispose(close=False)  # SQLAlchemy's rule after a fork: the parent's connections stay its own
    charge = asyncio.run(AsyncLedger(ledger).charge(tenant=T, student=StudentKey("child"), cost=COST))
    os._exit(0 if charge.status == "charged" else 1)


async def test_a_forked_child_starts_its_own_writer(ledger: PrivacyLedger) -> None:
    await AsyncLedger(ledger).charge(tenant=T, student=StudentKey("parent"), cost=COST)  # the parent's writer runs
    child = multiprocessing.get_context("fork").Process(target=_charge_in_child, args=(ledger,))
    child.start()
    await asyncio.to_thread(child.join, 60)
    if child.exitcode is None:  # the parent's thread is not in the child: a call queued to it would wait forever
        child.kill()
    assert child.exitcode == 0
    assert ledger.status(T, StudentKey("child"))["queries"] == 1
