"""What a diagnosis reads of a tenant's configuration, cached per worker until the tenant (or the shared rows)
change.

A diagnosis needs the tenant's current Q-matrix version, the newest calibration fitted on it and the tenant's
privacy policy. Each is a database read, and each changes rarely. :class:`TenantConfigCache` keeps what it
read per tenant together with the tenant's configuration generation (``app.storage.generations``) and, per
request, reads only that generation: one indexed statement. A write to any of the three, in any worker, raises
the generation in the same transaction, so the next request in every worker re-reads — a change applies to
the next request exactly as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from app.db import engine_of
from app.schemas import PrivacyPolicyPublic
from app.storage.calibrations import CalibrationStore, StoredCalibration
from app.storage.generations import read_generations
from app.storage.policies import PolicyStore
from app.storage.qmatrices import QMatrixStore, StoredQMatrix

__all__ = ["NotInMemory", "TenantConfig", "TenantConfigCache"]

T = TypeVar("T")


@dataclass
class _Memo:
    generations: tuple[int, int]
    qmatrices: dict[str, StoredQMatrix] = field(default_factory=dict)
    calibrations: dict[tuple[str, int], StoredCalibration | None] = field(default_factory=dict)
    policy: PrivacyPolicyPublic | None = None  # read on first use


class NotInMemory(LookupError):
    """A memory-only :class:`TenantConfig` (:meth:`TenantConfig.from_memory`) was asked for what it has not read."""


class TenantConfig:
    """One tenant's configuration as of one generation; reads the stores only for what it has not seen yet.

    Synchronous (it may query the database on a miss): call it from a worker thread, never the event loop — unless
    it is :meth:`from_memory`, which raises :class:`NotInMemory` instead of querying anything.
    """

    def __init__(self, cache: TenantConfigCache, tenant: str, memo: _Memo, *, memory_only: bool = False) -> None:
        self._cache, self.tenant, self._memo, self._memory_only = cache, tenant, memo, memory_only

    def from_memory(self) -> TenantConfig:
        """The same configuration, answering only from what is remembered (no I/O: fit for the event loop); a read
        it would have to query raises :class:`NotInMemory`. What it remembers is shared with this one."""
        return TenantConfig(self._cache, self.tenant, self._memo, memory_only=True)

    def _load(self, read: Callable[[], T]) -> T:
        """Every store read goes through here, so a memory-only configuration never queries."""
        if self._memory_only:
            raise NotInMemory(self.tenant)
        return read()

    def qmatrix(self, qid: str) -> StoredQMatrix | None:
        memo = self._memo.qmatrices
        if qid in memo:
            return memo[qid]
        stored = self._load(lambda: self._cache.qmatrices.get(self.tenant, qid))
        if stored is not None:  # unknown ids are not remembered: a caller naming many cannot grow the memo
            memo[qid] = stored
        return stored

    def latest_calibration(self, qmatrix_id: str, version: int) -> StoredCalibration | None:
        memo, key = self._memo.calibrations, (qmatrix_id, version)
        if key not in memo:
            memo[key] = self._load(lambda: self._cache.calibrations.latest_for(self.tenant, qmatrix_id, version))
        return memo[key]

    def calibration(self, calibration_id: str) -> StoredCalibration | None:
        """The tenant's (or a shared) record by id; not remembered (a request naming its record is rare)."""
        return self._load(lambda: self._cache.calibrations.get(self.tenant, calibration_id))

    def policy(self) -> PrivacyPolicyPublic:
        if self._memo.policy is None:
            self._memo.policy = self._load(lambda: self._cache.policies.current(self.tenant))
        return self._memo.policy


class TenantConfigCache:
    """Per-tenant :class:`TenantConfig` memos, at most ``max_tenants`` (least recently used out first)."""

    def __init__(
        self, *, qmatrices: QMatrixStore, calibrations: CalibrationStore, policies: PolicyStore,
        max_tenants: int = 10_000,
    ) -> None:
        self.qmatrices, self.calibrations, self.policies = qmatrices, calibrations, policies
        self._memos: OrderedDict[str, _Memo] = OrderedDict()
        self._max_tenants = max_tenants
        self._lock = threading.Lock()

    def current(self, tenant: str, generations: tuple[int, int] | None = None) -> TenantConfig:
        """The tenant's configuration as of now (one statement: the generations), or as of ``generations`` the
        caller read a moment ago (with the request's API key: ``app.auth``), then without any I/O."""
        if generations is None:
            with engine_of(self.qmatrices.sessions).connect() as conn:
                generations = read_generations(conn, tenant)
        with self._lock:
            memo = self._memos.get(tenant)
            if memo is None or memo.generations != generations:
                # A memo of an older generation is dropped whole: a Q-matrix write may change which calibration
                # is the newest, a policy write the budget rule — nothing of it is trusted after any write.
                newer = memo is None or all(n >= o for n, o in zip(generations, memo.generations, strict=True))
                memo = _Memo(generations)
                if newer:  # a request that read before a concurrent one never replaces the newer memo
                    self._memos[tenant] = memo
            if tenant in self._memos:
                self._memos.move_to_end(tenant)
            while len(self._memos) > self._max_tenants:
                self._memos.popitem(last=False)
        return TenantConfig(self, tenant, memo)
