"""The per-student privacy ledger: every answered query spends its ε, up to a lifetime cap.

Each (tenant, student) has an accountant (:mod:`privacy.accountants`, ``basic`` composition by
default) whose history is that student's charged releases. :meth:`PrivacyLedger.charge` checks
the cap and records the spend in one SQLite transaction *before* the caller releases anything;
a query that would go over the cap raises :class:`BudgetExceeded` and spends nothing.

Rules the caller relies on:

* **Atomic check-and-spend.** ``charge`` runs ``BEGIN IMMEDIATE`` (SQLite's write lock), reads
  the student's accountant, tests the cap, writes the charge and the new state, and commits. An
  in-process lock keeps threads of one process from spinning on SQLite's busy handler; the
  write lock serialises processes sharing the file. So N concurrent requests whose cap allows k
  serve exactly k, in one process or several.
* **Durable.** WAL journal with ``synchronous=FULL``: a charge whose ``charge`` call returned is
  on disk and survives ``kill -9``; one interrupted before its commit never happened. A charge
  is *pending* until its answer is stored (the answer is stored before it is returned): a
  process killed in between released nothing, and at start-up :meth:`settle_orphans` refunds
  the pending charges of processes that are gone.
* **Repeat rule.** A request with the same ``(tenant, student_id, request_fingerprint)`` as a
  charged one, within ``repeat_window_s`` seconds of that first charge, is answered with the
  *stored* noisy answer, not fresh noise, and spends nothing. Repeating a query therefore cannot
  average the noise away: every repeat sees the same draw. After the window, the same request
  is a new query and spends again (its noise is then a fresh, paid-for release). The caller
  builds the fingerprint from the canonical request content (Q-matrix id, responses, ε, δ,
  mechanism, entities), so any change in what is asked is a different query.
* **Concurrent identical requests.** The first one's charge row doubles as a reservation: an
  identical request arriving while its answer is still being computed gets that charge back
  with ``repeat=True`` and ``answer_json=None`` (``Charge.pending``), is not charged, and waits
  for the answer with :meth:`PrivacyLedger.await_answer`. A reservation whose answer never came
  (its process died) stops counting as a repeat after ``pending_ttl_s``; its spend stays.
* **Refunds.** ``refund`` returns a charge only while it has no stored answer: call it when
  *every* entity failed and nothing was released. Once any noisy answer has gone out (store it
  with ``store_answer`` before returning it) the spend is final, even if some entities failed.

Errors::

    LedgerError
    ├── BudgetExceeded      the query would exceed the student's cap (the API answers 429)
    ├── UnknownCharge       no charge with that id
    └── ChargeStateError    refund after release, answer for a refunded charge, corrupt state

The ledger keeps its own tables (``privacy_students``, ``privacy_charges``) and may share the
application's SQLite file; it opens its own engines on it and never imports ``app``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from privacy.accountants import Accountant, make_accountant

__all__ = [
    "BudgetExceeded",
    "Charge",
    "ChargeStateError",
    "LedgerError",
    "PrivacyLedger",
    "UnknownCharge",
]

_REL_TOL = 1e-9  # float slack on the cap: 5 × 0.1 must fit a cap of 0.5
_CHARGED, _RELEASED, _REFUNDED = "charged", "released", "refunded"


class LedgerError(Exception):
    """Base class of the ledger's errors."""


class BudgetExceeded(LedgerError):
    """The query would take the student past the cap; nothing was spent."""

    def __init__(
        self,
        tenant: str,
        student_id: str,
        spent: float,
        cap: float,
        requested: float,
        *,
        spent_delta: float = 0.0,
        cap_delta: float = 0.0,
        requested_delta: float = 0.0,
    ) -> None:
        self.tenant, self.student_id = tenant, student_id
        self.spent, self.cap, self.requested = spent, cap, requested
        self.spent_delta, self.cap_delta, self.requested_delta = spent_delta, cap_delta, requested_delta
        used = f"ε={spent:.6g} of {cap:.6g}"
        if requested_delta > 0:
            used += f", δ={spent_delta:.3g} of {cap_delta:.3g}"
        asked = f"ε={requested:.6g}" + (f", δ={requested_delta:.3g}" if requested_delta > 0 else "")
        # The message goes back to API callers and into logs: it names no student (the caller knows which).
        super().__init__(
            f"this student's privacy budget is spent: {used} used; a query with {asked} would exceed the lifetime cap"
        )


class UnknownCharge(LedgerError, LookupError):
    """No charge has this id."""


class ChargeStateError(LedgerError):
    """The charge is in the wrong state for the operation, or the stored state is corrupt."""


@dataclass(frozen=True, kw_only=True)
class Charge:
    """One charged query. ``repeat``: an earlier identical charge, reused (nothing spent now)."""

    id: str
    tenant: str
    student_id: str
    epsilon: float
    delta: float
    mechanism: str
    releases: int
    fingerprint: str | None
    created_at: float
    status: str  # charged | released | refunded
    answer_json: str | None
    repeat: bool
    spent_epsilon: float  # the student's totals after this charge
    spent_delta: float
    remaining_epsilon: float

    @property
    def pending(self) -> bool:
        """A repeat whose first request has not stored its answer yet."""
        return self.repeat and self.answer_json is None and self.status == _CHARGED


class _Base(DeclarativeBase):
    pass


class StudentBudgetRow(_Base):
    __tablename__ = "privacy_students"

    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    student_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    accountant_json: Mapped[str] = mapped_column(Text)  # Accountant.state_dict()
    queries: Mapped[int] = mapped_column(Integer)  # unrefunded charges
    updated_at: Mapped[float] = mapped_column(Float)


class ChargeRow(_Base):
    __tablename__ = "privacy_charges"
    __table_args__ = (Index("ix_privacy_charges_student", "tenant", "student_id", "fingerprint"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(32), unique=True)
    tenant: Mapped[str] = mapped_column(String(128))
    student_id: Mapped[str] = mapped_column(String(256))
    fingerprint: Mapped[str | None] = mapped_column(String(256), nullable=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    mechanism: Mapped[str] = mapped_column(String(32))
    sigma_over_sensitivity: Mapped[float | None] = mapped_column(Float, nullable=True)
    releases: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    answer_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    settled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the ledger (process) that made it


_students, _charges = StudentBudgetRow.__table__, ChargeRow.__table__
_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _database_path(source: Any) -> Path:
    """The SQLite file: a path (a directory means ``<dir>/fedcd.db``), or that of an engine/sessionmaker."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_dir():
            path = path / "fedcd.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.resolve()
    bind = source.kw.get("bind") if isinstance(source, sessionmaker) else source
    if isinstance(bind, Engine) and bind.url.get_backend_name() == "sqlite":
        if bind.url.database not in (None, "", ":memory:"):
            return Path(bind.url.database).resolve()
    raise ValueError(f"the privacy ledger needs an SQLite database file, got {source!r}")


def _engine(path: Path, *, immediate: bool, busy_timeout_s: float) -> Engine:
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": busy_timeout_s})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None  # the driver opens no transactions; "begin" below does
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")  # a committed charge survives a crash
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:  # type: ignore[no-untyped-def]
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class PrivacyLedger:
    """Per-(tenant, student) lifetime privacy budgets, persisted in SQLite. See the module docstring."""

    def __init__(
        self,
        sessions_or_path: Any,
        *,
        cap_epsilon: float,
        cap_delta: float = 0.0,
        accountant: str = "basic",
        repeat_window_s: float = 3600.0,
        pending_ttl_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = 30.0,
        owner: str | None = None,
    ) -> None:
        if not (cap_epsilon > 0):  # math.inf means no cap
            raise ValueError(f"cap_epsilon must be > 0, got {cap_epsilon}")
        if not (0.0 <= cap_delta < 1.0):
            raise ValueError(f"cap_delta must lie in [0, 1), got {cap_delta}")
        if not (repeat_window_s >= 0 and pending_ttl_s >= 0):
            raise ValueError("repeat_window_s and pending_ttl_s must be >= 0")
        make_accountant(accountant)  # an unknown name fails here
        self.cap_epsilon, self.cap_delta, self.accountant = float(cap_epsilon), float(cap_delta), accountant
        self.repeat_window_s, self.pending_ttl_s = float(repeat_window_s), float(pending_ttl_s)
        self._clock = clock
        # Charges are stamped with their owner so pending ones of a dead process can be settled (settle_orphans).
        self.owner = owner or uuid.uuid4().hex
        self.path = _database_path(sessions_or_path)
        self._writer = _engine(self.path, immediate=True, busy_timeout_s=busy_timeout_s)
        self._reader = _engine(self.path, immediate=False, busy_timeout_s=busy_timeout_s)
        with _PROCESS_LOCKS_GUARD:
            self._lock = _PROCESS_LOCKS.setdefault(str(self.path), threading.Lock())
        with self._lock:
            _Base.metadata.create_all(self._writer)

    # -- charging -------------------------------------------------------------------------------
    def charge(
        self,
        *,
        tenant: str,
        student_id: str,
        epsilon: float,
        delta: float = 0.0,
        mechanism: str,
        request_fingerprint: str | None = None,
        sigma_over_sensitivity: float | None = None,
        releases: int = 1,
    ) -> Charge:
        """Spend ``releases`` × (ε, δ) for the student, or raise :class:`BudgetExceeded`; call before releasing.

        ``releases`` is the number of independently noised answers the query releases (e.g. one
        per entity). An identical request (same ``request_fingerprint``) inside the repeat window
        returns the earlier charge with ``repeat=True`` and spends nothing.
        """
        if not (tenant and student_id):
            raise ValueError("tenant and student_id must be non-empty")
        if not (isinstance(releases, int) and releases >= 1):
            raise ValueError(f"releases must be an int >= 1, got {releases!r}")
        step = {
            "epsilon": epsilon, "delta": delta, "mechanism": mechanism,
            "sigma_over_sensitivity": sigma_over_sensitivity,
        }
        make_accountant(self.accountant).step(**step)  # validates before taking any lock
        now = float(self._clock())
        with self._lock, self._writer.begin() as conn:
            if request_fingerprint is not None:
                earlier = self._find_repeat(conn, tenant, student_id, request_fingerprint, now)
                if earlier is not None:
                    return self._charge_of(earlier, self._load(conn, tenant, student_id)[0], repeat=True)
            accountant, queries = self._load(conn, tenant, student_id)
            spent_epsilon, spent_delta = accountant.spent(self.cap_delta)
            for _ in range(releases):
                accountant.step(**step)
            after_epsilon, after_delta = accountant.spent(self.cap_delta)
            if not self._fits(after_epsilon, after_delta):
                raise BudgetExceeded(
                    tenant, student_id, spent_epsilon, self.cap_epsilon, releases * float(epsilon),
                    spent_delta=spent_delta, cap_delta=self.cap_delta, requested_delta=releases * float(delta),
                )
            row = {
                "id": uuid.uuid4().hex, "tenant": tenant, "student_id": student_id,
                "fingerprint": request_fingerprint, "epsilon": float(epsilon), "delta": float(delta),
                "mechanism": mechanism, "releases": releases, "status": _CHARGED, "answer_json": None,
                "created_at": now, "settled_at": None, "owner": self.owner,
                "sigma_over_sensitivity": None if sigma_over_sensitivity is None else float(sigma_over_sensitivity),
            }
            conn.execute(insert(_charges).values(**row))
            self._save(conn, tenant, student_id, accountant, queries + 1, now)
        return self._charge_of(row, accountant, repeat=False)

    def store_answer(self, charge_id: str, answer_json: str, *, releases: int | None = None) -> Charge:
        """Keep the released answer of a charge (for repeats); after this, no refund is possible.

        ``releases`` (at most the number charged) settles the charge at the answers actually
        released — e.g. entities that failed or answered nothing are given back; the student's
        totals are recomputed. Returns the settled charge with the student's totals.
        """
        if not isinstance(answer_json, str):
            raise TypeError("answer_json must be a JSON string")
        with self._lock, self._writer.begin() as conn:
            row = self._get(conn, charge_id)
            if row["status"] == _RELEASED and row["answer_json"] == answer_json:
                return self._charge_of(row, self._load(conn, row["tenant"], row["student_id"])[0], repeat=False)
            if row["status"] != _CHARGED:
                raise ChargeStateError(f"charge {charge_id} is {row['status']}; its answer cannot be stored")
            if releases is not None and not (isinstance(releases, int) and 1 <= releases <= row["releases"]):
                raise ValueError(f"releases must be an int in [1, {row['releases']}], got {releases!r}")
            now = float(self._clock())
            settled = {"status": _RELEASED, "answer_json": answer_json, "settled_at": now}
            if releases is not None and releases < row["releases"]:
                settled["releases"] = releases
            conn.execute(update(_charges).where(_charges.c.id == charge_id).values(**settled))
            row.update(settled)
            if "releases" in settled:
                accountant, queries = self._rebuild(conn, row["tenant"], row["student_id"])
                self._save(conn, row["tenant"], row["student_id"], accountant, queries, now)
            else:
                accountant = self._load(conn, row["tenant"], row["student_id"])[0]
        return self._charge_of(row, accountant, repeat=False)

    def refund(self, charge_id: str) -> None:
        """Undo a charge whose query released nothing (every entity failed); idempotent."""
        with self._lock, self._writer.begin() as conn:
            row = self._get(conn, charge_id)
            if row["status"] == _REFUNDED:
                return
            if row["status"] == _RELEASED:
                raise ChargeStateError(f"charge {charge_id} released an answer; its privacy spend is final")
            now = float(self._clock())
            conn.execute(update(_charges).where(_charges.c.id == charge_id).values(status=_REFUNDED, settled_at=now))
            accountant, queries = self._rebuild(conn, row["tenant"], row["student_id"])
            self._save(conn, row["tenant"], row["student_id"], accountant, queries, now)

    def settle_orphans(self, *, live_owners: Collection[str]) -> int:
        """Refund every pending charge (no answer stored) whose owner is not live; returns how many.

        A process killed between charging and storing its answer released nothing (the answer
        is stored before it is returned), so its pending charges are refunded — and an identical
        retry is then a normal new request instead of waiting on a reservation nobody will fill.
        """
        live = list(live_owners)
        now = float(self._clock())
        with self._lock, self._writer.begin() as conn:
            orphans = conn.execute(
                select(_charges.c.id, _charges.c.tenant, _charges.c.student_id).where(
                    _charges.c.status == _CHARGED, (_charges.c.owner.is_(None)) | (_charges.c.owner.not_in(live))
                )
            ).all()
            if not orphans:
                return 0
            conn.execute(
                update(_charges).where(_charges.c.id.in_([o.id for o in orphans])).values(status=_REFUNDED, settled_at=now)
            )
            for tenant, student_id in {(o.tenant, o.student_id) for o in orphans}:
                accountant, queries = self._rebuild(conn, tenant, student_id)
                self._save(conn, tenant, student_id, accountant, queries, now)
        return len(orphans)

    # -- reading --------------------------------------------------------------------------------
    def lookup_repeat(self, *, tenant: str, student_id: str, request_fingerprint: str) -> str | None:
        """The stored answer of an identical released request inside the window, else ``None``."""
        with self._reader.begin() as conn:
            row = self._find_repeat(conn, tenant, student_id, request_fingerprint, float(self._clock()))
        return row["answer_json"] if row is not None and row["status"] == _RELEASED else None

    def get_charge(self, charge_id: str) -> Charge:
        with self._reader.begin() as conn:
            row = self._get(conn, charge_id)
            accountant = self._load(conn, row["tenant"], row["student_id"])[0]
        return self._charge_of(row, accountant, repeat=False)

    def status(self, tenant: str, student_id: str) -> dict[str, Any]:
        """Spent and remaining budget of one student (zeros for a student never charged)."""
        with self._reader.begin() as conn:
            accountant, queries = self._load(conn, tenant, student_id)
        spent_epsilon, spent_delta = accountant.spent(self.cap_delta)
        return {
            "tenant": tenant,
            "student_id": student_id,
            "accountant": accountant.mechanism(),
            "spent_epsilon": spent_epsilon,
            "spent_delta": spent_delta,
            "cap_epsilon": self.cap_epsilon,
            "cap_delta": self.cap_delta,
            "remaining_epsilon": max(0.0, self.cap_epsilon - spent_epsilon),
            "remaining_delta": max(0.0, self.cap_delta - spent_delta),
            "queries": queries,
        }

    def charge_all(self, *, tenant: str, student_ids: Sequence[str], epsilon: float, mechanism: str) -> list[Charge]:
        """Charge every student once for one group release (a cohort report, a calibration), all or nothing.

        If any student's budget is spent, the charges already made are refunded and
        :class:`BudgetExceeded` is raised: nothing is released and nobody pays.
        """
        charges: list[Charge] = []
        try:
            for student_id in dict.fromkeys(student_ids):
                charges.append(self.charge(tenant=tenant, student_id=student_id, epsilon=epsilon, mechanism=mechanism))
        except BudgetExceeded:
            for charge in charges:
                self.refund(charge.id)
            raise
        return charges

    def settle_all(self, charges: Sequence[Charge], *, released: str | None) -> None:
        """After a group release: store ``released`` on every charge, or refund them all when ``None``."""
        for charge in charges:
            if released is None:
                self.refund(charge.id)
            else:
                self.store_answer(charge.id, released)

    # -- async façade (each call runs in a worker thread, off the event loop) --------------------
    async def acharge_all(self, **kwargs: Any) -> list[Charge]:
        return await asyncio.to_thread(lambda: self.charge_all(**kwargs))

    async def asettle_all(self, charges: Sequence[Charge], *, released: str | None) -> None:
        await asyncio.to_thread(lambda: self.settle_all(charges, released=released))

    async def acharge(self, **kwargs: Any) -> Charge:
        return await asyncio.to_thread(lambda: self.charge(**kwargs))

    async def astore_answer(self, charge_id: str, answer_json: str, *, releases: int | None = None) -> Charge:
        return await asyncio.to_thread(lambda: self.store_answer(charge_id, answer_json, releases=releases))

    async def arefund(self, charge_id: str) -> None:
        await asyncio.to_thread(self.refund, charge_id)

    async def alookup_repeat(self, **kwargs: Any) -> str | None:
        return await asyncio.to_thread(lambda: self.lookup_repeat(**kwargs))

    async def astatus(self, tenant: str, student_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.status, tenant, student_id)

    async def await_answer(self, charge_id: str, *, timeout_s: float = 30.0, poll_s: float = 0.05) -> str | None:
        """Wait for a pending charge's answer; ``None`` if it was refunded (then charge anew).

        Raises ``TimeoutError`` if it is still pending after ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            charge = await asyncio.to_thread(self.get_charge, charge_id)
            if charge.status == _RELEASED:
                return charge.answer_json
            if charge.status == _REFUNDED:
                return None
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the answer of charge {charge_id} is still pending after {timeout_s}s")
            await asyncio.sleep(poll_s)

    def close(self) -> None:
        self._writer.dispose()
        self._reader.dispose()

    def __enter__(self) -> PrivacyLedger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------
    def _fits(self, epsilon: float, delta: float) -> bool:
        return epsilon <= self.cap_epsilon * (1 + _REL_TOL) and delta <= self.cap_delta * (1 + _REL_TOL)

    def _find_repeat(self, conn: Connection, tenant: str, student_id: str, fingerprint: str, now: float) -> dict | None:
        if self.repeat_window_s <= 0:
            return None
        row = conn.execute(
            select(_charges)
            .where(
                _charges.c.tenant == tenant,
                _charges.c.student_id == student_id,
                _charges.c.fingerprint == fingerprint,
                _charges.c.status != _REFUNDED,
                _charges.c.created_at >= now - self.repeat_window_s,
            )
            .order_by(_charges.c.seq.desc())
            .limit(1)
        ).mappings().first()
        if row is None or (row["status"] == _CHARGED and row["created_at"] < now - self.pending_ttl_s):
            return None  # nothing, or a reservation whose process never stored its answer
        return dict(row)

    def _get(self, conn: Connection, charge_id: str) -> dict:
        row = conn.execute(select(_charges).where(_charges.c.id == charge_id)).mappings().first()
        if row is None:
            raise UnknownCharge(f"no privacy charge with id {charge_id!r}")
        return dict(row)

    def _load(self, conn: Connection, tenant: str, student_id: str) -> tuple[Accountant, int]:
        """The student's accountant from its saved state, checked against the charges table."""
        row = conn.execute(
            select(_students).where(_students.c.tenant == tenant, _students.c.student_id == student_id)
        ).mappings().first()
        if row is None:
            return make_accountant(self.accountant), 0
        try:
            state = json.loads(row["accountant_json"])
        except ValueError as exc:
            raise ChargeStateError(f"ledger state of student {student_id!r} (tenant {tenant!r}) is not JSON") from exc
        if not isinstance(state, dict) or state.get("accountant") != self.accountant:
            return self._rebuild(conn, tenant, student_id)  # saved by another accountant: replay the charges
        accountant = make_accountant(self.accountant)
        try:
            accountant.load_state_dict(state)
        except ValueError as exc:
            raise ChargeStateError(
                f"ledger state of student {student_id!r} (tenant {tenant!r}) is corrupt: {exc}"
            ) from exc
        releases, queries = conn.execute(
            select(func.coalesce(func.sum(_charges.c.releases), 0), func.count())
            .where(_charges.c.tenant == tenant, _charges.c.student_id == student_id, _charges.c.status != _REFUNDED)
        ).one()
        if (len(accountant), row["queries"]) != (releases, queries):
            raise ChargeStateError(
                f"ledger state of student {student_id!r} (tenant {tenant!r}) disagrees with its charges: "
                f"{len(accountant)} releases in {row['queries']} queries saved, {releases} in {queries} charged"
            )
        return accountant, queries

    def _rebuild(self, conn: Connection, tenant: str, student_id: str) -> tuple[Accountant, int]:
        accountant, queries = make_accountant(self.accountant), 0
        rows = conn.execute(
            select(_charges)
            .where(_charges.c.tenant == tenant, _charges.c.student_id == student_id, _charges.c.status != _REFUNDED)
            .order_by(_charges.c.seq)
        ).mappings()
        for row in rows:
            queries += 1
            for _ in range(row["releases"]):
                accountant.step(
                    epsilon=row["epsilon"], delta=row["delta"], mechanism=row["mechanism"],
                    sigma_over_sensitivity=row["sigma_over_sensitivity"],
                )
        return accountant, queries

    def _save(
        self, conn: Connection, tenant: str, student_id: str, accountant: Accountant, queries: int, now: float
    ) -> None:
        values = {"accountant_json": json.dumps(accountant.state_dict()), "queries": queries, "updated_at": now}
        conn.execute(
            sqlite_insert(_students)
            .values(tenant=tenant, student_id=student_id, **values)
            .on_conflict_do_update(index_elements=[_students.c.tenant, _students.c.student_id], set_=values)
        )

    def _charge_of(self, row: dict, accountant: Accountant, *, repeat: bool) -> Charge:
        spent_epsilon, spent_delta = accountant.spent(self.cap_delta)
        return Charge(
            id=row["id"], tenant=row["tenant"], student_id=row["student_id"], epsilon=row["epsilon"],
            delta=row["delta"], mechanism=row["mechanism"], releases=row["releases"],
            fingerprint=row["fingerprint"], created_at=row["created_at"], status=row["status"],
            answer_json=row["answer_json"], repeat=repeat, spent_epsilon=spent_epsilon, spent_delta=spent_delta,
            remaining_epsilon=max(0.0, self.cap_epsilon - spent_epsilon),
        )
