"""A separate process that charges a privacy ledger, for tests/privacy/test_ledger.py.

    ledger_crash_worker.py crash DB EPSILON
        Charge one student forever; after each committed charge print its id (flushed). The test
        kills this process with SIGKILL at an arbitrary point.
    ledger_crash_worker.py attempts DB EPSILON CAP N
        Open the ledger, print "ready", wait for a line on stdin, then try N charges for one
        student and print {"served": s, "refused": r} as JSON.
    ledger_crash_worker.py async-crash DB EPSILON / async-attempts DB EPSILON CAP N
        The same through the async face (on SQLite: the group-committing writer), CONCURRENCY
        charges in flight at once; an id is printed once its ``await`` has returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from privacy.ledger import AsyncLedger, BudgetExceeded, PrivacyLedger, StudentKey  # noqa: E402
from privacy.mechanisms import ReleaseCost  # noqa: E402

TENANT, STUDENT = "tenant-a", StudentKey("student-1")
CONCURRENCY = 8


def laplace(epsilon: float) -> ReleaseCost:
    return ReleaseCost(epsilon=epsilon, delta=0.0, mechanism="laplace")


def crash(db: str, epsilon: float) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=1e9)
    i = 0
    while True:
        fingerprint = f"crash-{os.getpid()}-{i}"  # unique: a restarted worker must not hit the repeat rule
        charge = ledger.charge(tenant=TENANT, student=STUDENT, cost=laplace(epsilon), request_fingerprint=fingerprint)
        print(charge.id, flush=True)
        i += 1


def attempts(db: str, epsilon: float, cap: float, n: int) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=cap)
    print("ready", flush=True)
    sys.stdin.readline()
    served = refused = 0
    for _ in range(n):
        try:
            ledger.charge(tenant=TENANT, student=STUDENT, cost=laplace(epsilon))
            served += 1
        except BudgetExceeded:
            refused += 1
    print(json.dumps({"served": served, "refused": refused}), flush=True)


async def async_crash(db: str, epsilon: float) -> None:
    ledger = AsyncLedger(PrivacyLedger(db, cap_epsilon=1e9))
    count = iter(range(10**9))

    async def charging() -> None:
        while True:
            fingerprint = f"crash-{os.getpid()}-{next(count)}"
            charge = await ledger.charge(tenant=TENANT, student=STUDENT, cost=laplace(epsilon),
                                         request_fingerprint=fingerprint)
            print(charge.id, flush=True)

    await asyncio.gather(*(charging() for _ in range(CONCURRENCY)))


async def async_attempts(db: str, epsilon: float, cap: float, n: int) -> None:
    ledger = AsyncLedger(PrivacyLedger(db, cap_epsilon=cap))
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)

    async def attempt() -> bool:
        try:
            await ledger.charge(tenant=TENANT, student=STUDENT, cost=laplace(epsilon))
            return True
        except BudgetExceeded:
            return False

    served = sum(await asyncio.gather(*(attempt() for _ in range(n))))
    ledger.engine.close()
    print(json.dumps({"served": served, "refused": n - served}), flush=True)


if __name__ == "__main__":
    mode, db, eps = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if mode == "crash":
        crash(db, eps)
    elif mode == "attempts":
        attempts(db, eps, float(sys.argv[4]), int(sys.argv[5]))
    elif mode == "async-crash":
        asyncio.run(async_crash(db, eps))
    elif mode == "async-attempts":
        asyncio.run(async_attempts(db, eps, float(sys.argv[4]), int(sys.argv[5])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
