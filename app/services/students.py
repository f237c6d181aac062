"""A student's data rights: export everything stored about one student, or erase it (README "Student data").

What is stored about a student, all under the keyed hash of ``app.pseudonyms`` (never the id):

* the privacy ledger: each charge's *spend* (ε, δ, mechanism, releases, status, when, source) and the budget row —
  kept through erasure, because the cap is enforced on them (erasing them would hand the student a fresh budget);
  and each charge's *release* (the stored diagnosis of the repeat rule, the request fingerprint) — erased;
* calibration jobs' inputs (the student's validation record: responses, truth) and their per-student results —
  erased (the record is replaced by ``null``, so the other records keep their positions);
* response-cache entries made from the student's responses (tagged, ``providers.cache``) — erased;
* an uploaded responses CSV while its train job runs (raw ids: it is the caller's file) — deleted when the job ends;
  the train job's request lists the keyed hash of each student in it (``student_rows``) — the student's entry erased.

Erasure refuses (``Conflict``) while a diagnosis of the student is in flight or a job that holds the student is queued,
running or cancelling (a cancelling job's worker may still store a result): erasing under them would let them store
what was just erased. Retry once they finish. A job's stored request is rewritten by compare-and-swap: two erasures
of students of one job (a class), or an erasure racing the retention purge, each re-read what the other wrote rather
than put back a stale copy. Another tenant's student is never visible: every lookup is by (tenant, keyed hash), and
the tenant is the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, select, update
from sqlalchemy.orm import sessionmaker

from app.db import JobItemRow, JobRow, engine_of
from app.domain_errors import Conflict
from app.pseudonyms import Pseudonyms, cache_tag
from app.schemas import StudentBudget
from app.schemas.students import (
    ChargeRecord,
    ErasureKept,
    JobRecord,
    StoredDiagnosis,
    StudentErasure,
    StudentExport,
    UploadRecord,
)
from app.storage import PolicyStore, UsageStore, budget_rule
from app.storage.retention import RetentionStore
from privacy import PrivacyLedger, iso_utc
from privacy.ledger.records import erase_released, pending_charges, student_charges, student_row
from privacy.ledger.tables import REFUNDED, students
from providers.cache import CacheStore, CacheStoreUnavailable
from qmatrix.responses import read_responses_csv

__all__ = ["GROUP_SOURCES", "StudentDataService"]

log = logging.getLogger("fedcd.students")
# Charges whose stored "answer" is only the label of a group release ("cohort-report", "calibration cal-…"): no data
# of the student's, and the audit trail of what spent the ε — kept by erasure and retention (privacy.ledger.records).
GROUP_SOURCES = ("cohort", "calibration")
# A released job (shutdown) is "running" with no claim: it will resume. A cancelling one may still store a result.
ACTIVE = ("queued", "running", "cancelling")
_SWAP_TRIES = 50  # compare-and-swap retries of one job's request: each lost race means another writer progressed


@dataclass
class _InJob:
    """A job whose stored input holds the student, and where."""

    row: JobRow
    request: dict[str, Any]
    positions: list[int]


@dataclass
class _Found:
    jobs: list[_InJob] = field(default_factory=list)
    uploads: list[tuple[JobRow, Path, int | None]] = field(default_factory=list)  # rows of the student; None: unreadable
    listed_in: list[str] = field(default_factory=list)  # train jobs listing the student's key (their upload may be gone)


def _without_student(request: dict[str, Any], key: str) -> tuple[list[int], bool]:
    """Take the student stored as ``key`` out of a job's request, in place: (the record positions set null — kept, as
    job items are keyed by them — and whether an upload's ``student_rows`` entry was removed)."""
    records = request.get("records")
    positions = [i for i, r in enumerate(records) if isinstance(r, dict) and r.get("student_id") == key] \
        if isinstance(records, list) else []
    for i in positions:
        records[i] = None  # type: ignore[index]
    rows = request.get("student_rows")
    return positions, isinstance(rows, dict) and rows.pop(key, None) is not None


class StudentDataService:
    def __init__(
        self, *, sessions: sessionmaker, ledger: PrivacyLedger | None, pseudonyms: Pseudonyms, policies: PolicyStore,
        retention: RetentionStore, usage: UsageStore, uploads: Path, cache: CacheStore | None = None,
        pending_ttl_s: float = 120.0,
    ) -> None:
        self.sessions, self.ledger, self.pseudonyms, self.policies = sessions, ledger, pseudonyms, policies
        self.retention, self.usage, self.uploads, self.cache = retention, usage, uploads, cache
        self.pending_ttl_s = ledger.pending_ttl_s if ledger is not None else pending_ttl_s

    # -- export ---------------------------------------------------------------------------------
    async def export(self, tenant: str, student_id: str) -> StudentExport:
        key = self.pseudonyms.key(tenant, student_id)
        export = await asyncio.to_thread(self._export, tenant, student_id, key)
        if self.cache is not None:
            try:
                export.cache_entries = await self.cache.tagged(cache_tag(tenant, key))
            except CacheStoreUnavailable as exc:
                export.notes.append(f"the response cache could not be read: {exc}")
        else:
            export.notes.append("cached entity answers: not counted here (each worker's in-process cache expires its "
                                "entries after FEDCD_CACHE_TTL_S)")
        return export

    async def diagnoses(self, tenant: str, student_id: str) -> list[StoredDiagnosis]:
        """The student's released diagnoses still stored (retention and erasure remove them), oldest first, each
        with the id the caller sent."""
        key = self.pseudonyms.key(tenant, student_id)
        return await asyncio.to_thread(self._diagnoses, tenant, student_id, key)

    def _diagnoses(self, tenant: str, student_id: str, key: str) -> list[StoredDiagnosis]:
        with self._ledger_read() as conn:
            rows = student_charges(conn, tenant, key)
        return [_stored(row, student_id) for row in rows if _is_diagnosis(row["answer_json"])]

    def _export(self, tenant: str, student_id: str, key: str) -> StudentExport:
        with self._ledger_read() as conn:
            rows = student_charges(conn, tenant, key)
        charges, diagnoses = [], []
        for row in rows:
            charges.append(ChargeRecord(
                id=row["id"], created_at=iso_utc(row["created_at"]) or "", settled_at=iso_utc(row["settled_at"]),
                source=row["source"], mechanism=row["mechanism"], epsilon=row["epsilon"], delta=row["delta"],
                releases=row["releases"], status=row["status"], diagnosis_stored=_is_diagnosis(row["answer_json"]),
                release=row["answer_json"] if row["source"] in GROUP_SOURCES else None,
                epsilon_total=0.0 if row["status"] == REFUNDED else row["epsilon"] * row["releases"],
            ))
            if _is_diagnosis(row["answer_json"]):
                diagnoses.append(_stored(row, student_id))
        found = self._find(tenant, student_id, key)
        jobs = [self._job_record(tenant, student_id, job) for job in found.jobs]
        uploads = [UploadRecord(job_id=job.id, status=job.status, rows=n or 0) for job, _, n in found.uploads]
        notes = [f"job {job.id}: its upload is not on this host; it may hold the student until the job ends"
                 for job, _, n in found.uploads if n is None]
        notes.append("usage rows (tokens, cost per entity call) name no student; a job's usage is listed with the job")
        return StudentExport(
            tenant=tenant, student_id=student_id, student_key=key, exported_at=iso_utc(time.time()) or "",
            budget=self._budget(tenant, student_id, key), charges=charges, diagnoses=diagnoses, jobs=jobs,
            uploads=uploads, cache_entries=0, retention=self.retention.current(tenant), notes=notes,
        )

    def _budget(self, tenant: str, student_id: str, key: str) -> StudentBudget | None:
        if self.ledger is None:
            return None
        status = self.ledger.status(tenant, key, rule=budget_rule(self.policies.current(tenant)))
        return StudentBudget(**{**status, "student_id": student_id})

    def _job_record(self, tenant: str, student_id: str, job: _InJob) -> JobRecord:
        records = [{**job.request["records"][i], "student_id": student_id} for i in job.positions]
        with self.sessions() as session:
            items = session.scalars(select(JobItemRow).where(
                JobItemRow.job_id == job.row.id, JobItemRow.idx.in_(job.positions)).order_by(JobItemRow.idx)).all()
            results = [{"record": job.positions.index(r.idx), **json.loads(r.result_json)} for r in items]
        return JobRecord(job_id=job.row.id, kind=job.row.kind, status=job.row.status, created_at=job.row.created_at,
                         records=records, results=results, usage=self.usage.job_total(tenant, job.row.id))

    # -- erasure --------------------------------------------------------------------------------
    async def erase(self, tenant: str, student_id: str) -> StudentErasure:
        key = self.pseudonyms.key(tenant, student_id)
        removed = await asyncio.to_thread(self._erase, tenant, student_id, key)
        kept_note = []
        if self.cache is not None:
            try:
                removed["cache_entries"] = await self.cache.forget(cache_tag(tenant, key))
            except CacheStoreUnavailable as exc:  # the entries expire on their own; say so rather than fail
                log.warning("erasure: the response cache could not be cleared: %s", exc)
                kept_note.append(ErasureKept(what="cache_entries", count=0, why=(
                    "the response cache was unavailable; its entries expire after FEDCD_CACHE_TTL_S — erase again")))
        else:
            kept_note.append(ErasureKept(what="cache_entries", count=0, why=(
                "each worker's in-process response cache is out of reach here; its entries expire after "
                "FEDCD_CACHE_TTL_S (erase through the API, or use FEDCD_REDIS_URL, to clear them at once)")))
        return StudentErasure(tenant=tenant, student_id=student_id, removed=removed,
                              kept=[*await asyncio.to_thread(self._kept, tenant, key), *kept_note])

    def _erase(self, tenant: str, student_id: str, key: str) -> dict[str, int]:
        found = self._find(tenant, student_id, key)
        busy = [f"job {j.row.id} ({j.row.kind}, {j.row.status})" for j in found.jobs if j.row.status in ACTIVE]
        busy += [f"job {job.id} (train, {job.status}: its upload holds the student)"
                 for job, _, n in found.uploads if job.status in ACTIVE and n != 0]
        if busy:
            raise Conflict(("student_id",), [
                f"{', '.join(busy)} uses this student's data; erase again once it has finished (erasing now would "
                "let it store what was erased)"])
        removed = {"diagnoses": 0, "job_inputs": 0, "job_results": 0, "uploads": 0, "cache_entries": 0}
        with self._ledger_write(tenant, key) as conn:
            if pending_charges(conn, tenant, key, since=time.time() - self.pending_ttl_s):
                raise Conflict(("student_id",), [
                    "a diagnosis of this student is being answered; erase again in a few seconds"])
            removed["diagnoses"] = erase_released(conn, tenant, key, labels=GROUP_SOURCES)
        for job_id in dict.fromkeys([*(j.row.id for j in found.jobs), *found.listed_in]):
            inputs, results = self._forget_in_job(job_id, key)
            removed["job_inputs"] += inputs
            removed["job_results"] += results
        for job, path, n in found.uploads:
            if job.status not in ACTIVE and n and path.is_file():  # a finished job's leftover (its job deletes it)
                path.unlink(missing_ok=True)
                removed["uploads"] += 1
        log.info("erased the stored data of a student of tenant %s: %s", tenant, removed)
        return removed

    def _forget_in_job(self, job_id: str, key: str) -> tuple[int, int]:
        """Take the student out of one job's stored request and delete their results: (records, results) removed.
        The request is re-read and swapped only if unchanged since (compare-and-swap): a concurrent erasure or the
        retention purge of the same job is never overwritten by a stale copy, which would restore what it erased."""
        for _ in range(_SWAP_TRIES):
            with self.sessions() as session:
                current = session.scalar(select(JobRow.request_json).where(JobRow.id == job_id))
            if current is None:
                return 0, 0
            request = json.loads(current)
            positions, upload_entry = _without_student(request, key) if isinstance(request, dict) else ([], False)
            if not positions and not upload_entry:
                return 0, 0
            with self.sessions.begin() as session:
                if session.execute(update(JobRow).where(JobRow.id == job_id, JobRow.request_json == current)
                                   .values(request_json=json.dumps(request), updated_at=JobRow.updated_at)
                                   .execution_options(synchronize_session=False)).rowcount != 1:
                    continue  # another writer changed it first: read it again
                results = session.execute(delete(JobItemRow).where(
                    JobItemRow.job_id == job_id, JobItemRow.idx.in_(positions))).rowcount or 0 if positions else 0
                return len(positions), results
        raise Conflict(("student_id",), [
            f"job {job_id}'s stored request kept changing while it was being erased; erase again"])

    def _kept(self, tenant: str, key: str) -> list[ErasureKept]:
        with self._ledger_read() as conn:
            rows = student_charges(conn, tenant, key)
            budget = student_row(conn, tenant, key)
        return [
            ErasureKept(what="privacy_charges", count=len(rows), why=(
                "each charge's spend (ε, δ, mechanism, releases, status, time, source, and the name of a group "
                "release: a calibration or cohort report) under the keyed hash, without the released diagnosis: the "
                "budget cap is enforced on them, so erasure never resets a budget — a new "
                "diagnosis of the same id counts this spend")),
            ErasureKept(what="privacy_budget", count=int(budget is not None), why=(
                "the running total of those charges (the lifetime accountant), under the keyed hash")),
            ErasureKept(what="usage", count=0, why=(
                "usage rows (tokens, cost per entity call) hold no reference to a student")),
            ErasureKept(what="calibrations", count=0, why=(
                "a calibration record holds aggregate parameters over all its validation students, released with "
                "noise when they were real students (unless the tenant's policy allowed unnoised calibrations, or "
                "the operator left FEDCD_CALIBRATION_RELEASE_EPSILON unset); nothing per student")),
        ]

    # -- where a student is stored, besides the ledger ---------------------------------------------
    def _find(self, tenant: str, student_id: str, key: str) -> _Found:
        found = _Found()
        with self.sessions() as session:
            rows = session.scalars(select(JobRow).where(
                JobRow.tenant == tenant, JobRow.request_json.like(f'%"{key}"%'))).all()
            # Train jobs from before a job listed its upload's students (student_rows): only their files say
            legacy = session.scalars(select(JobRow).where(
                JobRow.tenant == tenant, JobRow.kind == "train",
                JobRow.request_json.not_like('%"student_rows"%'))).all()
        for row in rows:
            request = json.loads(row.request_json)
            records = request.get("records") or []
            positions = [i for i, r in enumerate(records) if isinstance(r, dict) and r.get("student_id") == key]
            if positions:
                found.jobs.append(_InJob(row, request, positions))
            upload_rows = (request.get("student_rows") or {}).get(key) if row.kind == "train" else None
            upload = self.uploads / Path(str(request.get("upload", ""))).name
            if upload_rows:
                found.listed_in.append(row.id)
            if upload_rows and (row.status in ACTIVE or upload.is_file()):  # the file goes when its job ends
                found.uploads.append((row, upload, int(upload_rows)))
        for row in legacy:
            name = str(json.loads(row.request_json).get("upload", ""))
            path = self.uploads / name
            if name and path.is_file():
                found.uploads.append((row, path, _rows_of(path, student_id)))
            elif name and row.status in ACTIVE:
                found.uploads.append((row, path, None))  # on another host's disk, or not yet readable
        return found

    # -- the ledger's tables, through the ledger's engines when it is on ---------------------------
    def _ledger_read(self) -> contextlib.AbstractContextManager[Connection]:
        return self.ledger.engines.read() if self.ledger is not None else engine_of(self.sessions).begin()

    @contextlib.contextmanager
    def _ledger_write(self, tenant: str, key: str) -> Iterator[Connection]:
        """The ledger's write transaction holding the student's row lock (PostgreSQL) or the write lock (SQLite):
        erasure is serialised with the student's charges."""
        ledger = self.ledger
        with (ledger.engines.write() if ledger is not None else engine_of(self.sessions).begin()) as conn:
            if ledger is not None and not ledger.engines.sqlite:
                conn.execute(select(students.c.tenant).where(
                    students.c.tenant == tenant, students.c.student_id == key).with_for_update())
            yield conn


def _stored(row: dict[str, Any], student_id: str) -> StoredDiagnosis:
    answer = json.loads(row["answer_json"])
    answer["student_id"] = student_id  # stored under the key; shown as it was returned
    return StoredDiagnosis(charge_id=row["id"], created_at=iso_utc(row["created_at"]) or "", diagnosis=answer)


def _is_diagnosis(answer: str | None) -> bool:
    return answer is not None and answer.startswith("{")


def _rows_of(path: Path, student_id: str) -> int | None:
    """The student's responses in an uploaded CSV (0: not in it; None: unreadable)."""
    try:
        return sum(len(s.responses) for s in read_responses_csv(path) if s.student_id == student_id)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
