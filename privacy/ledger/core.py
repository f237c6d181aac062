"""The per-student privacy ledger: every answered query spends its ε, up to a cap per period.

Each (tenant, student) has every charge it was ever made recorded, and a *lifetime* accountant
(:mod:`privacy.accountants`, ``basic`` composition by default) over them. A
:class:`~privacy.periods.BudgetRule` says how much may be spent per period (lifetime, a rolling
window, a calendar day/week, school terms): :meth:`PrivacyLedger.charge` composes the charges of
the current window with the new one, checks the cap and records the spend in one transaction
*before* the caller releases anything; a query that would go over raises
:class:`BudgetExceeded` (saying when the allowance renews) and spends nothing. Spend older than
the window stops counting toward the cap but stays recorded: the lifetime total is exact.

Rules the caller relies on:

* **Atomic check-and-spend** per student, in one process or many (``privacy.ledger.engines``:
  SQLite's write lock, or a PostgreSQL row lock). So N concurrent requests whose cap allows k
  serve exactly k, at a window boundary too.
* **Durable.** A charge whose ``charge`` call returned is committed and survives ``kill -9``; one
  interrupted before its commit never happened. A charge is *pending* until its answer is stored
  (the answer is stored before it is returned): a process killed in between released nothing,
  and at start-up :meth:`settle_orphans` refunds the pending charges of processes that are gone.
* **Repeat rule.** A request with the same ``(tenant, student_id, request_fingerprint)`` as a
  charged one, within ``repeat_window_s`` seconds of that first charge, is answered with the
  *stored* noisy answer, not fresh noise, and spends nothing. Repeating a query therefore cannot
  average the noise away: every repeat sees the same draw. After the window, the same request
  is a new query and spends again (its noise is then a fresh, paid-for release).
* **Concurrent identical requests.** The first one's charge row doubles as a reservation: an
  identical request arriving while its answer is still being computed gets that charge back
  with ``repeat=True`` and ``answer_json=None`` (``Charge.pending``), is not charged, and waits
  for the answer (:meth:`privacy.ledger.aio.AsyncLedger.await_answer`).
* **Refunds.** ``refund`` returns a charge only while it has no stored answer; ``store_answer``
  may settle a charge at fewer releases than charged (entities that released nothing). Once an
  answer is stored the spend is final.

The ledger keeps its own tables (``privacy_students``, ``privacy_charges``) and may share the
application's database; it opens its own engines on it and never imports ``app``. This is the synchronous
engine; :class:`~privacy.ledger.aio.AsyncLedger` is its async face (reads in a worker thread; writes on SQLite
group-committed by one writer thread, :mod:`privacy.ledger.writer`, each returned only once committed), and
:class:`~privacy.ledger.release.Release` its charge → settle-or-refund sequence. The accountant arithmetic over
a student's rows is :mod:`privacy.ledger.books`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, select, update

from privacy.accountants import make_accountant
from privacy.ledger.books import Books, fits
from privacy.ledger.charge import Charge, charge_from_row
from privacy.ledger.engines import LedgerEngines, ledger_url
from privacy.ledger.errors import BudgetExceeded, ChargeStateError, UnknownCharge
from privacy.ledger.keys import StudentKey
from privacy.ledger.statements import CHARGE_COLUMNS, charge_path
from privacy.ledger.tables import CHARGED, REFUNDED, RELEASED, charges
from privacy.mechanisms import ReleaseCost
from privacy.periods import BudgetRule, Lifetime, Rolling, iso_utc

__all__ = ["Charge", "PrivacyLedger", "StudentKey"]


class PrivacyLedger:
    """Per-(tenant, student) privacy budgets with periods. See the module docstring."""

    def __init__(
        self,
        database: Any,
        *,
        cap_epsilon: float = float("inf"),
        cap_delta: float = 0.0,
        accountant: str = "basic",
        repeat_window_s: float = 3600.0,
        pending_ttl_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = 30.0,
        owner: str | None = None,
        rule: BudgetRule | None = None,
    ) -> None:
        """``database``: a SQLAlchemy URL, an SQLite file or folder, or an engine/sessionmaker on one.

        ``rule`` is the default budget (used when a call gives none); without it, a lifetime cap of
        ``cap_epsilon``/``cap_delta``.
        """
        if not (repeat_window_s >= 0 and pending_ttl_s >= 0):
            raise ValueError("repeat_window_s and pending_ttl_s must be >= 0")
        make_accountant(accountant)  # an unknown name fails here, before any engine is opened
        self.rule = rule or BudgetRule(cap_epsilon=cap_epsilon, cap_delta=cap_delta, period=Lifetime())
        self.accountant = accountant
        self.repeat_window_s, self.pending_ttl_s = float(repeat_window_s), float(pending_ttl_s)
        self._clock = clock
        # Charges are stamped with their owner so pending ones of a dead process can be settled (settle_orphans).
        self.owner = owner or uuid.uuid4().hex
        self._db = LedgerEngines(ledger_url(database), busy_timeout_s=busy_timeout_s)
        self._books = Books(accountant, self._db)  # the accountant arithmetic over the student's rows

    @property
    def engines(self) -> LedgerEngines:
        """The ledger's engines, for the record keeping of ``privacy.ledger.records`` (export, erasure, retention)."""
        return self._db

    @property
    def cap_epsilon(self) -> float:
        return self.rule.cap_epsilon

    @property
    def cap_delta(self) -> float:
        return self.rule.cap_delta

    # -- charging -------------------------------------------------------------------------------
    def charge(
        self,
        *,
        tenant: str,
        student: StudentKey,
        cost: ReleaseCost,
        request_fingerprint: str | None = None,
        releases: int = 1,
        rule: BudgetRule | None = None,
        source: str | None = None,
    ) -> Charge:
        """Spend ``releases`` × ``cost`` for the student, or raise :class:`BudgetExceeded`; call before releasing.

        ``releases`` is the number of independently noised answers the query releases (e.g. one
        per entity). An identical request (same ``request_fingerprint``) inside the repeat window
        returns the earlier charge with ``repeat=True`` and spends nothing.
        """
        if not tenant:
            raise ValueError("tenant must be non-empty")
        if not isinstance(student, StudentKey):
            raise TypeError(f"the ledger charges a StudentKey (the keyed hash), got {type(student).__name__}")
        if not (isinstance(releases, int) and releases >= 1):
            raise ValueError(f"releases must be an int >= 1, got {releases!r}")
        rule = rule or self.rule
        make_accountant(self.accountant).step(cost)  # the accountant may refuse it: before taking any lock
        now = float(self._clock())
        with self._db.write() as conn:
            self._db.lock_student(conn, tenant, student, now, self._books.empty_state)
            if request_fingerprint is not None:
                earlier = self._find_repeat(conn, tenant, student, request_fingerprint, now)
                if earlier is not None:
                    return self._books.charge_of(conn, earlier, rule, now, repeat=True)
            lifetime, queries = self._books.load(conn, tenant, student, verify=False)  # the hot path trusts its own state
            spend = self._books.spend(conn, tenant, student, rule, now, lifetime)
            spent_epsilon, spent_delta = spend.accountant.spent(rule.cap_delta)
            for _ in range(releases):
                spend.accountant.step(cost)
            if not fits(rule, *spend.accountant.spent(rule.cap_delta)):
                raise BudgetExceeded(
                    tenant, student, spent_epsilon, rule.cap_epsilon, releases * cost.epsilon,
                    spent_delta=spent_delta, cap_delta=rule.cap_delta, requested_delta=releases * cost.delta,
                    period=rule.period.label, renews_at=self._books.renewal(spend, rule, cost, releases),
                )
            row = {  # the storage edge: the key's text and the cost's numbers, in the table's columns
                "id": uuid.uuid4().hex, "tenant": tenant, "student_id": str(student),
                "fingerprint": request_fingerprint, "epsilon": cost.epsilon, "delta": cost.delta,
                "mechanism": cost.mechanism, "releases": releases, "status": CHARGED, "answer_json": None,
                "created_at": now, "settled_at": None, "owner": self.owner, "source": source,
                "sigma_over_sensitivity": cost.sigma_over_sensitivity,
            }
            assert row.keys() == set(CHARGE_COLUMNS)  # exactly the prepared INSERT's columns
            charge_path.insert_charge.rowcount(conn, row)
            for _ in range(releases):
                lifetime.step(cost)
            self._books.save(conn, tenant, student, lifetime, queries + 1, now)
            # The window after this charge is the one just composed (spend.accountant took the new releases).
            renews_at = spend.renews_at if spend.counted or not isinstance(rule.period, Rolling) else now + rule.period.window_s
            return charge_from_row(row, rule, spend.accountant, lifetime, renews_at, repeat=False)

    def store_answer(
        self, charge_id: str, answer_json: str, *, releases: int | None = None, rule: BudgetRule | None = None
    ) -> Charge:
        """Keep the released answer of a charge (for repeats); after this, no refund is possible.

        ``releases`` (at most the number charged) settles the charge at the answers actually
        released — e.g. entities that failed or answered nothing are given back; the student's
        totals are recomputed. Returns the settled charge with the student's totals under ``rule``.
        """
        if not isinstance(answer_json, str):
            raise TypeError("answer_json must be a JSON string")
        rule = rule or self.rule
        now = float(self._clock())
        with self._db.write() as conn:
            row = self._get(conn, charge_id)
            self._db.lock_student(conn, row["tenant"], row["student_id"], now, self._books.empty_state)
            if row["status"] == RELEASED and row["answer_json"] == answer_json:
                return self._books.charge_of(conn, row, rule, now, repeat=False)
            if row["status"] != CHARGED:
                raise ChargeStateError(f"charge {charge_id} is {row['status']}; its answer cannot be stored")
            if releases is not None and not (isinstance(releases, int) and 1 <= releases <= row["releases"]):
                raise ValueError(f"releases must be an int in [1, {row['releases']}], got {releases!r}")
            settled: dict[str, Any] = {"status": RELEASED, "answer_json": answer_json, "settled_at": now}
            if releases is not None and releases < row["releases"]:
                settled["releases"] = releases
            conn.execute(update(charges).where(charges.c.id == charge_id).values(**settled))
            row.update(settled)
            if "releases" in settled:
                self._books.recount(conn, row["tenant"], row["student_id"], now)
            return self._books.charge_of(conn, row, rule, now, repeat=False)

    def release(self, charge: Charge, answer_json: str) -> Charge:
        """Keep the answer of a charge that released everything it charged for — the common case — in one
        statement: nothing is recounted, so the student's totals returned are those the charge computed (a
        concurrent charge of the same student made since is not in them; the ledger itself is exact).
        Raises :class:`ChargeStateError` when the charge is no longer pending (refunded, or released already)."""
        if not isinstance(answer_json, str):
            raise TypeError("answer_json must be a JSON string")
        now = float(self._clock())
        with self._db.write() as conn:
            changed = charge_path.release.rowcount(conn, {"charge_id": charge.id, "answer": answer_json, "now": now})
        if changed != 1:
            raise ChargeStateError(f"charge {charge.id} is no longer pending; its answer cannot be stored")
        return replace(charge, status=RELEASED, answer_json=answer_json)

    def refund(self, charge_id: str) -> None:
        """Undo a charge whose query released nothing; idempotent."""
        now = float(self._clock())
        with self._db.write() as conn:
            row = self._get(conn, charge_id)
            self._db.lock_student(conn, row["tenant"], row["student_id"], now, self._books.empty_state)
            row = self._get(conn, charge_id)  # re-read under the student's lock
            if row["status"] == REFUNDED:
                return
            if row["status"] == RELEASED:
                raise ChargeStateError(f"charge {charge_id} released an answer; its privacy spend is final")
            refunded = conn.execute(  # guarded like release(): of a refund and a release racing, exactly one wins
                update(charges).where(charges.c.id == charge_id, charges.c.status == CHARGED)
                .values(status=REFUNDED, settled_at=now)
            )
            if refunded.rowcount != 1:
                raise ChargeStateError(f"charge {charge_id} released an answer; its privacy spend is final")
            self._books.recount(conn, row["tenant"], row["student_id"], now)

    def settle_orphans(self, *, live_owners: Collection[str]) -> int:
        """Refund every pending charge (no answer stored) whose owner is not live; returns how many.

        A process killed between charging and storing its answer released nothing (the answer
        is stored before it is returned), so its pending charges are refunded — and an identical
        retry is then a normal new request instead of waiting on a reservation nobody will fill.
        """
        live = list(live_owners)
        with self._db.read() as conn:
            orphans = conn.execute(
                select(charges.c.id).where(
                    charges.c.status == CHARGED, (charges.c.owner.is_(None)) | (charges.c.owner.not_in(live))
                )
            ).scalars().all()
        for charge_id in orphans:
            self.refund(charge_id)  # each under its student's lock; a charge settled meanwhile is left as it is
        return len(orphans)

    def charge_all(
        self, *, tenant: str, students: Sequence[StudentKey], cost: ReleaseCost, rule: BudgetRule | None = None,
        source: str | None = None,
    ) -> list[Charge]:
        """Charge every student once for one group release (a cohort report, a calibration), all or nothing.

        If any student's budget is spent, the charges already made are refunded and
        :class:`BudgetExceeded` is raised: nothing is released and nobody pays.
        """
        made: list[Charge] = []
        try:
            for student in dict.fromkeys(students):
                made.append(self.charge(tenant=tenant, student=student, cost=cost, rule=rule, source=source))
        except BudgetExceeded:
            for charge in made:
                self.refund(charge.id)
            raise
        return made

    def settle_all(self, made: Sequence[Charge], *, released: str | None) -> None:
        """After a group release: store ``released`` on every charge, or refund them all when ``None``."""
        for charge in made:
            if released is None:
                self.refund(charge.id)
            else:
                self.store_answer(charge.id, released)

    # -- reading --------------------------------------------------------------------------------
    def lookup_repeat(self, *, tenant: str, student: StudentKey, request_fingerprint: str) -> str | None:
        """The stored answer of an identical released request inside the window, else ``None``."""
        with self._db.read() as conn:
            row = self._find_repeat(conn, tenant, student, request_fingerprint, float(self._clock()))
        return row["answer_json"] if row is not None and row["status"] == RELEASED else None

    def get_charge(self, charge_id: str, *, rule: BudgetRule | None = None) -> Charge:
        now = float(self._clock())
        with self._db.read() as conn:
            return self._books.charge_of(conn, self._get(conn, charge_id), rule or self.rule, now, repeat=False)

    def status(self, tenant: str, student: StudentKey, *, rule: BudgetRule | None = None) -> dict[str, Any]:
        """The student's budget now: the period's spend and allowance, when it renews, and the lifetime total."""
        rule = rule or self.rule
        now = float(self._clock())
        with self._db.read() as conn:
            lifetime, queries = self._books.load(conn, tenant, student)
            spend = self._books.spend(conn, tenant, student, rule, now, lifetime)
        spent_epsilon, spent_delta = spend.accountant.spent(rule.cap_delta)
        lifetime_epsilon, lifetime_delta = lifetime.spent(rule.cap_delta)
        return {
            "tenant": tenant,
            "student_id": str(student),
            "accountant": lifetime.mechanism(),
            "period": rule.period.label,
            "spent_epsilon": spent_epsilon,
            "spent_delta": spent_delta,
            "cap_epsilon": rule.cap_epsilon,
            "cap_delta": rule.cap_delta,
            "remaining_epsilon": max(0.0, rule.cap_epsilon - spent_epsilon),
            "remaining_delta": max(0.0, rule.cap_delta - spent_delta),
            "renews_at": iso_utc(spend.renews_at),
            "lifetime_epsilon": lifetime_epsilon,
            "lifetime_delta": lifetime_delta,
            "queries": queries,
        }

    def close(self) -> None:
        """Stop the async face's writer thread (after committing what is queued) and close the connections."""
        self._db.dispose()

    def __enter__(self) -> PrivacyLedger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------
    def _find_repeat(self, conn: Connection, tenant: str, student_id: str, fingerprint: str, now: float) -> dict | None:
        if self.repeat_window_s <= 0:
            return None
        row = charge_path.repeat.first(conn, {
            "tenant": tenant, "student_id": student_id, "fingerprint": fingerprint, "since": now - self.repeat_window_s,
        })
        if row is None or (row["status"] == CHARGED and row["created_at"] < now - self.pending_ttl_s):
            return None  # nothing, or a reservation whose process never stored its answer
        return row

    def _get(self, conn: Connection, charge_id: str) -> dict:
        row = conn.execute(select(charges).where(charges.c.id == charge_id)).mappings().first()
        if row is None:
            raise UnknownCharge(f"no privacy charge with id {charge_id!r}")
        return dict(row)
