"""A separate process that charges a privacy ledger, for tests/privacy/test_ledger.py.

    ledger_crash_worker.py crash DB EPSILON
        Charge one student forever; after each committed charge print its id (flushed). The test
        kills this process with SIGKILL at an arbitrary point.
    ledger_crash_worker.py attempts DB EPSILON CAP N
        Open the ledger, print "ready", wait for a line on stdin, then try N charges for one
        student and print {"served": s, "refused": r} as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from privacy.ledger import BudgetExceeded, PrivacyLedger, StudentKey  # noqa: E402
from privacy.mechanisms import ReleaseCost  # noqa: E402

TENANT, STUDENT = "tenant-a", StudentKey("student-1")


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


if __name__ == "__main__":
    mode, db, eps = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if mode == "crash":
        crash(db, eps)
    elif mode == "attempts":
        attempts(db, eps, float(sys.argv[4]), int(sys.argv[5]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
