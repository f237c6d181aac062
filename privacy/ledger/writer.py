"""Group commit for the async face on SQLite: one ledger-owned thread runs the queued write calls in batches.

Why: a diagnosis makes two durable write transactions (charge, release). Run one by one from the default executor,
each pays a thread-pool hop, a pool checkout, ``BEGIN IMMEDIATE``, a ``COMMIT`` with its WAL fsync
(``synchronous=FULL``) and a wake-up of the event loop. Under load most of that is the same work repeated, and the
calls queue on SQLite's single write lock anyway. :class:`GroupCommitter` queues them to one thread, which drains up
to :data:`BATCH` calls and runs them in ONE write transaction, each call inside its own ``SAVEPOINT``, commits once
(one fsync for the batch) and only then resolves the callers' futures, one loop wake-up per batch and loop.

The guarantees are the ledger's (``privacy.ledger.core``), unchanged:

* **Durable after return.** A caller's future is resolved only after the batch's ``COMMIT`` returned, so a charge
  whose ``await`` returned survives ``kill -9``; a batch killed before its commit never happened, for every caller.
* **Exact check-and-spend.** The calls of a batch run one after another on one connection under the write lock, each
  seeing the ones before it: N concurrent charges whose cap allows k serve exactly k, inside one batch too.
* **A failing call fails alone.** A call that raises (``BudgetExceeded``, ``ChargeStateError``, a bad argument) rolls
  back its own savepoint and its caller gets that exception; the rest of the batch commits.
* **Nothing half-applied on a database error.** A database error inside a call rolls the whole batch back (nothing
  of it was committed), and each call is run again in its own transaction, so only the call that meets the error
  again fails. If the ``COMMIT`` itself fails, every caller of the batch gets that error, as each would have from
  its own commit.
* **Processes and threads** still serialise on the per-file process lock and ``BEGIN IMMEDIATE``
  (``privacy.ledger.engines``); callers on several event loops are resolved on their own loops.

The thread keeps one connection of its own between batches (no pool round trip per batch). It starts on the first
write call, and again in a forked child, after :data:`IDLE_S` idle seconds, or after :meth:`GroupCommitter.close`
(``PrivacyLedger.close``), which commits what is queued and stops it.

A group's writes (``charge_all``, ``settle_all``: a cohort or a calibration, one write per student) are not queued
here: they run in a worker thread, a transaction per student, so a diagnosis's charge never waits behind thousands
of them (``privacy.ledger.aio``). A writer thread that died (a bug) is replaced by the next call, which also takes
over its queued calls.

PostgreSQL keeps one transaction per call (its charges lock students' rows; a batch over many students would need a
lock order), so only SQLite ledgers have a committer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    from privacy.ledger.engines import LedgerEngines

__all__ = ["BATCH", "GroupCommitter"]

log = logging.getLogger("fedcd.privacy")

P = ParamSpec("P")
R = TypeVar("R")

BATCH = 64  # calls per transaction at most: bounds the write lock's hold time and a failed batch's re-runs
IDLE_S = 10.0  # an idle writer thread stops after this long (the next call starts one): see _idle_exit


@dataclass(slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    result: Any = None
    error: BaseException | None = None


_STOP = object()


class GroupCommitter:
    """The writer thread of one SQLite ledger (see the module docstring). Started on the first call; :meth:`close`
    runs what is queued and stops it (a later call starts a new one, as the engines reopen after ``dispose``).
    The ledger's synchronous calls, on other threads, still run their own transactions under the same locks."""

    def __init__(self, engines: LedgerEngines, *, batch: int = BATCH) -> None:
        self._engines, self._batch = engines, batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()  # the process the thread runs in: a forked child starts its own
        # Starting, queueing and stopping under one lock: a call queued before close() runs before the thread stops,
        # and one queued after it goes to a new thread with a queue of its own.
        self._guard = threading.Lock()
        self._db_errors: tuple[type[BaseException], ...] = (SQLAlchemyError, engines.writer.dialect.dbapi.Error)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[R]:
        """Queue ``fn(*args, **kwargs)`` (a ledger write call) for the writer; its future resolves after the commit."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        with self._guard:
            dead = self._thread is not None and self._pid == os.getpid() and not self._thread.is_alive()
            if self._thread is None or dead or self._pid != os.getpid():
                left = self._queue if dead else None
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                if left is not None:  # a writer that died (a bug) left calls queued: the new one runs them
                    log.error("the ledger's writer thread had stopped; a new one runs its queued calls")
                    _moved(left, self._queue)
                self._thread = threading.Thread(
                    target=self._serve, args=(self._queue,), name="fedcd-ledger-writer", daemon=True
                )
                self._thread.start()
            self._queue.put(_Call(fn, args, kwargs, loop, future))
        return future

    def close(self) -> None:
        """Run every call queued so far, then stop the thread (waits for it)."""
        with self._guard:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._queue.put(_STOP)
        thread.join()

    # -- the writer thread ------------------------------------------------------------------------
    def _serve(self, calls_in: queue.SimpleQueue[Any]) -> None:
        conn: Connection | None = None  # the thread's own connection, kept between batches (no pool round trip)
        stop = False
        try:
            while not stop:
                calls: list[_Call] = []
                try:
                    item = calls_in.get(timeout=IDLE_S)
                except queue.Empty:
                    if self._idle_exit(calls_in):
                        return
                    continue
                while True:
                    if item is _STOP:
                        stop = True
                        break
                    calls.append(item)
                    if len(calls) >= self._batch:
                        break
                    try:
                        item = calls_in.get_nowait()
                    except queue.Empty:
                        break
                if not calls:
                    continue
                try:
                    conn = conn or self._engines.writer.connect()
                    self._batched(conn, calls)
                except BaseException as exc:
                    # Rolled back: nothing of the batch is in the database. A fresh connection for the next batch.
                    conn = _closed(conn)
                    self._one_by_one(calls, exc)
                _resolve(calls)
        finally:
            _closed(conn)

    def _idle_exit(self, calls_in: queue.SimpleQueue[Any]) -> bool:
        """Whether this idle thread is done: nothing queued, and the next call will start a new one. An idle thread
        leaves so that a ledger nobody closed (and its connection) can be collected."""
        with self._guard:  # submit() queues under the same lock: nothing can slip in between
            if calls_in.empty() and self._thread is threading.current_thread():
                self._thread = None
                return True
            return False

    def _batched(self, conn: Connection, calls: list[_Call]) -> None:
        """The batch in one transaction; each call's ``write()`` is a savepoint of it (``LedgerEngines.batch``).
        A database error propagates (the transaction is rolled back on the way out); a failing ``COMMIT`` fails
        every call of the batch with its error, as each call's own commit would have."""
        with self._engines.batch(conn):
            for call in calls:
                try:
                    call.result = call.fn(*call.args, **call.kwargs)
                except self._db_errors:
                    raise
                except Exception as exc:  # the call's own failure: its savepoint is rolled back already
                    call.error = exc
            try:
                conn.commit()
            except Exception as exc:  # not re-run: whether a failed COMMIT reached the disk is not known
                for call in calls:
                    if call.error is None:  # a call that failed on its own keeps its own error (e.g. BudgetExceeded)
                        call.result, call.error = None, exc

    def _one_by_one(self, calls: list[_Call], exc: BaseException) -> None:
        """After a batch rolled back on a database error (at ``BEGIN`` or in a call): each call again, in its own
        transaction, so only a call that meets the error again fails. Anything else fails the whole batch."""
        for call in calls:
            if not isinstance(exc, self._db_errors):
                call.result, call.error = None, exc
                continue
            try:
                call.result, call.error = call.fn(*call.args, **call.kwargs), None
            except BaseException as error:  # whatever it is, its caller gets it: the thread must outlive it
                call.result, call.error = None, error


def _moved(source: queue.SimpleQueue[Any], target: queue.SimpleQueue[Any]) -> None:
    """The calls still queued in ``source`` (a dead writer's), queued to ``target`` in order."""
    while True:
        try:
            item = source.get_nowait()
        except queue.Empty:
            return
        if item is not _STOP:
            target.put(item)


def _closed(conn: Connection | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


def _resolve(calls: list[_Call]) -> None:
    """Each caller's future, on its own loop: one wake-up per loop for the batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Call]] = {}
    for call in calls:
        by_loop.setdefault(call.loop, []).append(call)
    for loop, mine in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, mine)
        except RuntimeError:  # the loop is closed: nobody is waiting there any more
            log.warning("%d ledger result(s) for a closed event loop were dropped", len(mine))


def _settle(calls: list[_Call]) -> None:
    for call in calls:
        if call.future.done():  # the caller was cancelled; the call ran all the same (as a worker thread's does)
            continue
        if call.error is not None:
            call.future.set_exception(call.error)
        else:
            call.future.set_result(call.result)
