"""The per-student privacy ledger: caps, atomicity (threads and processes), crash safety, repeats, refunds."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dp_accounting
import pytest
from dp_accounting.rdp import RdpAccountant
from sqlalchemy import create_engine, text

from privacy.gaussian import analytic_gaussian_sigma
from privacy.ledger import AsyncLedger, BudgetExceeded, ChargeStateError, PrivacyLedger, StudentKey, UnknownCharge
from privacy.mechanisms import ReleaseCost
from privacy.ledger.engines import ledger_url

WORKER = Path(__file__).with_name("ledger_crash_worker.py")
T, S = "tenant-a", StudentKey("student-1")
CENTRAL = ReleaseCost(epsilon=0.5, delta=0.0, mechanism="central_laplace")


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _execute(db: Path | str, statement: str) -> list[tuple]:
    engine = create_engine(ledger_url(db))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement))
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def keys(students: list[str]) -> list[StudentKey]:
    return [StudentKey(s) for s in students]


def laplace(epsilon: float) -> ReleaseCost:
    return ReleaseCost(epsilon=epsilon, delta=0.0, mechanism="laplace")


def _charge(ledger: PrivacyLedger, fingerprint: str | None = None, **kw):  # type: ignore[no-untyped-def]
    cost = {name: kw.pop(name) for name in ("epsilon", "delta", "mechanism", "sigma_over_sensitivity") if name in kw}
    args = {"tenant": T, "student": StudentKey(kw.pop("student", S)), "request_fingerprint": fingerprint}
    defaults = {"epsilon": 0.5, "delta": 0.0, "mechanism": "laplace"}
    return ledger.charge(**(args | kw), cost=ReleaseCost(**(defaults | cost)))


# -- cap ------------------------------------------------------------------------------------------
def test_cap_refuses_the_query_that_would_exceed_it_with_a_clear_message(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=2.5)
    for _ in range(5):
        _charge(ledger)

    with pytest.raises(BudgetExceeded) as info:
        _charge(ledger)

    error = info.value
    assert (error.tenant, error.student_id, error.spent, error.cap, error.requested) == (T, S, 2.5, 2.5, 0.5)
    assert str(error).startswith("this student's privacy budget is spent (lifetime): ε=2.5 of 2.5 used") and S not in str(error)
    assert "does not renew" in str(error)
    assert ledger.status(T, S) == {
        "tenant": T, "student_id": S, "accountant": "basic", "period": "lifetime", "spent_epsilon": 2.5,
        "spent_delta": 0.0, "cap_epsilon": 2.5, "cap_delta": 0.0, "remaining_epsilon": 0.0, "remaining_delta": 0.0,
        "renews_at": None, "lifetime_epsilon": 2.5, "lifetime_delta": 0.0, "queries": 5,
    }


def test_a_query_larger_than_what_remains_is_refused_but_a_smaller_one_fits(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=1.0)
    _charge(ledger, epsilon=0.7)

    with pytest.raises(BudgetExceeded):
        _charge(ledger, epsilon=0.5)
    charge = _charge(ledger, epsilon=0.3)

    assert charge.spent_epsilon == pytest.approx(1.0)
    assert ledger.status(T, S)["queries"] == 2


def test_releases_multiply_the_spend(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=2.0)

    charge = _charge(ledger, epsilon=0.5, releases=3)

    assert charge.spent_epsilon == 1.5
    with pytest.raises(BudgetExceeded):
        _charge(ledger, epsilon=0.5, releases=2)


def test_delta_cap_is_enforced_with_its_own_message(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=100.0, cap_delta=1e-5)
    for _ in range(10):
        _charge(ledger, epsilon=0.1, delta=1e-6, mechanism="gaussian")

    with pytest.raises(BudgetExceeded, match="δ="):
        _charge(ledger, epsilon=0.1, delta=1e-6, mechanism="gaussian")


def test_a_gaussian_query_does_not_fit_a_pure_epsilon_budget(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=100.0)  # cap_delta = 0

    with pytest.raises(BudgetExceeded):
        _charge(ledger, delta=1e-6, mechanism="gaussian")


def test_tenants_and_students_have_separate_budgets(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=0.5)
    _charge(ledger)

    ledger.charge(tenant="tenant-b", student=S, cost=laplace(0.5))
    ledger.charge(tenant=T, student=StudentKey("student-2"), cost=laplace(0.5))

    with pytest.raises(BudgetExceeded):
        _charge(ledger)
    assert ledger.status("tenant-b", S)["spent_epsilon"] == 0.5
    assert ledger.status("tenant-c", S)["spent_epsilon"] == 0.0


def test_invalid_arguments_are_refused_before_spending(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=1.0)

    for bad in ({"epsilon": 0.0}, {"epsilon": float("nan")}, {"releases": 0}, {"student": ""}):
        with pytest.raises(ValueError):
            _charge(ledger, **bad)
    with pytest.raises(ValueError):
        PrivacyLedger(db, cap_epsilon=0.0)
    with pytest.raises(ValueError):
        PrivacyLedger(db, cap_epsilon=1.0, accountant="moments")
    assert ledger.status(T, S)["queries"] == 0


def test_only_a_student_key_and_a_release_cost_are_charged(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=1.0)

    with pytest.raises(TypeError, match="StudentKey"):  # a raw id is never charged by mistake
        ledger.charge(tenant=T, student="student-1", cost=laplace(0.5))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ReleaseCost"):
        ledger.charge(tenant=T, student=S, cost={"epsilon": 0.5, "delta": 0.0, "mechanism": "laplace"})  # type: ignore[arg-type]

    assert ledger.status(T, S)["queries"] == 0


# -- atomicity ------------------------------------------------------------------------------------
async def test_a_thousand_concurrent_charges_serve_exactly_the_five_the_cap_allows(db: Path | str) -> None:
    # Prepare: many worker threads, so that the calls really overlap.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=64))
    ledger = PrivacyLedger(db, cap_epsilon=5 * 0.1)
    threaded = AsyncLedger(ledger)

    async def attempt(i: int) -> bool:
        try:
            await threaded.charge(tenant=T, student=S, cost=laplace(0.1), request_fingerprint=f"q{i}")
            return True
        except BudgetExceeded:
            return False

    # Execute
    served = await asyncio.gather(*(attempt(i) for i in range(1000)))

    # Assert
    assert sum(served) == 5
    status = ledger.status(T, S)
    assert (status["queries"], status["spent_epsilon"]) == (5, pytest.approx(0.5))


async def test_concurrent_identical_requests_are_charged_once_and_share_one_answer(db: Path | str) -> None:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))
    ledger = AsyncLedger(PrivacyLedger(db, cap_epsilon=10.0))

    charges = await asyncio.gather(
        *(ledger.charge(tenant=T, student=S, cost=laplace(0.5), request_fingerprint="same")
          for _ in range(200))
    )

    first = [c for c in charges if not c.repeat]
    assert len(first) == 1 and all(c.id == first[0].id and c.pending for c in charges if c.repeat)
    waiting = asyncio.create_task(ledger.await_answer(first[0].id, timeout_s=5.0, poll_s=0.01))
    await ledger.store_answer(first[0].id, '{"mastery": 0.42}')
    assert await waiting == '{"mastery": 0.42}'
    assert (await ledger.status(T, S))["spent_epsilon"] == 0.5


@pytest.mark.parametrize("mode", ["attempts", "async-attempts"])  # the engine, and the async face (group commit)
def test_processes_sharing_the_file_serve_exactly_the_cap_in_total(db: Path | str, mode: str) -> None:
    # Prepare: 4 processes × 50 attempts, all released at once once every ledger is open.
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), mode, str(db), "0.5", "2.5", "50"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for _ in range(4)
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        # Execute
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [json.loads(proc.communicate(timeout=60)[0]) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()

    # Assert
    assert sum(r["served"] for r in results) == 5
    assert sum(r["refused"] for r in results) == 195
    assert PrivacyLedger(db, cap_epsilon=2.5).status(T, S)["queries"] == 5


# -- durability -----------------------------------------------------------------------------------
def _run_and_kill(db: Path | str, after: int, mode: str = "crash") -> list[str]:
    """Start the crash worker, SIGKILL it once it has reported ``after`` charges; all ids it reported."""
    reported: list[str] = []
    with subprocess.Popen(
        [sys.executable, str(WORKER), mode, str(db), "0.25"], stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            while len(reported) < after:
                line = proc.stdout.readline()
                assert line, "the worker exited early"
                reported.append(line.strip())
        finally:
            os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()  # whatever it printed before it died
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return reported + [x for x in rest.split() if len(x) == 32]


# The engine's calls (one in flight), and the async face's (8 in flight; on SQLite group-committed): every charge
# whose call returned is committed, and at most the charges in flight more.
@pytest.mark.parametrize(("mode", "in_flight"), [("crash", 1), ("async-crash", 8)])
def test_the_ledger_is_exact_after_kill_minus_nine(db: Path | str, mode: str, in_flight: int) -> None:
    rng = random.Random(7)
    reported: list[str] = []
    unreported = 0  # charges committed whose id the worker was killed before printing
    for _ in range(2):  # crash, restart on the same file, crash again
        reported += _run_and_kill(db, after=rng.randint(20, 60), mode=mode)

        ledger = PrivacyLedger(db, cap_epsilon=1e9)
        status = ledger.status(T, S)
        # At most the charges in flight committed per crash beyond those the worker reported.
        assert 0 <= status["queries"] - len(reported) - unreported <= in_flight
        assert status["spent_epsilon"] == 0.25 * status["queries"]
        assert all(ledger.get_charge(charge_id).status == "charged" for charge_id in reported)
        ledger.close()
        unreported = status["queries"] - len(reported)

    if isinstance(db, Path):
        assert _execute(db, "PRAGMA integrity_check") == [("ok",)]
    assert _execute(db, "SELECT COUNT(*) FROM privacy_charges") == [(len(reported) + unreported,)]


def test_saved_state_is_checked_against_the_charges(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=10.0)
    _charge(ledger)
    _charge(ledger)

    _execute(db, "DELETE FROM privacy_charges WHERE seq = (SELECT MIN(seq) FROM privacy_charges)")

    with pytest.raises(ChargeStateError, match="disagrees"):
        ledger.status(T, S)


def test_switching_accountant_replays_the_charges(db: Path | str) -> None:
    basic = PrivacyLedger(db, cap_epsilon=10.0)
    for _ in range(3):
        _charge(basic)

    rdp = PrivacyLedger(db, cap_epsilon=10.0, cap_delta=1e-5, accountant="rdp")

    assert rdp.status(T, S) | {"cap_delta": 0.0, "remaining_delta": 0.0} == basic.status(T, S) | {"accountant": "rdp"}
    assert _charge(rdp).spent_epsilon == 2.0


# -- repeats --------------------------------------------------------------------------------------
def test_a_repeat_inside_the_window_returns_the_stored_answer_and_spends_nothing(db: Path | str) -> None:
    clock = FakeClock()
    ledger = PrivacyLedger(db, cap_epsilon=1.0, repeat_window_s=3600, clock=clock)
    first = _charge(ledger, "fp-1")
    ledger.store_answer(first.id, '{"a": 0.31}')
    clock.now += 3599

    again = _charge(ledger, "fp-1")

    assert (again.repeat, again.id, again.answer_json, again.pending) == (True, first.id, '{"a": 0.31}', False)
    assert ledger.lookup_repeat(tenant=T, student=S, request_fingerprint="fp-1") == '{"a": 0.31}'
    assert ledger.status(T, S)["spent_epsilon"] == 0.5


def test_after_the_window_the_same_request_is_a_new_query(db: Path | str) -> None:
    clock = FakeClock()
    ledger = PrivacyLedger(db, cap_epsilon=1.0, repeat_window_s=3600, clock=clock)
    first = _charge(ledger, "fp-1")
    ledger.store_answer(first.id, '{"a": 0.31}')
    clock.now += 3601

    assert ledger.lookup_repeat(tenant=T, student=S, request_fingerprint="fp-1") is None
    again = _charge(ledger, "fp-1")

    assert not again.repeat and again.id != first.id
    assert ledger.status(T, S)["spent_epsilon"] == 1.0


def test_a_repeat_of_a_released_answer_is_served_even_when_the_budget_is_spent(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=0.5)
    first = _charge(ledger, "fp-1")
    ledger.store_answer(first.id, "[1]")

    assert _charge(ledger, "fp-1").answer_json == "[1]"
    with pytest.raises(BudgetExceeded):
        _charge(ledger, "fp-2")


def test_repeats_are_per_tenant_and_student(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=1.0)
    ledger.store_answer(_charge(ledger, "fp-1").id, "[1]")

    other = ledger.charge(tenant="tenant-b", student=S, cost=laplace(0.5), request_fingerprint="fp-1")

    assert not other.repeat


def test_a_reservation_whose_answer_never_came_expires(db: Path | str) -> None:
    clock = FakeClock()
    ledger = PrivacyLedger(db, cap_epsilon=2.0, pending_ttl_s=120, clock=clock)
    first = _charge(ledger, "fp-1")  # its process "dies" before storing the answer
    clock.now += 121

    again = _charge(ledger, "fp-1")

    assert not again.repeat and again.id != first.id
    assert ledger.status(T, S)["spent_epsilon"] == 1.0  # the lost charge stays spent


def test_zero_window_disables_repeats(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=2.0, repeat_window_s=0)
    ledger.store_answer(_charge(ledger, "fp-1").id, "[1]")

    assert not _charge(ledger, "fp-1").repeat


def test_release_keeps_the_answer_in_one_statement_and_only_once(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=2.0)
    charge = _charge(ledger, "fp-1")
    released = ledger.release(charge, "[1]")
    assert (released.status, released.answer_json, released.spent_epsilon) == ("released", "[1]", charge.spent_epsilon)
    again = _charge(ledger, "fp-1")  # the identical request now gets the stored answer
    assert again.repeat and again.answer_json == "[1]"
    with pytest.raises(ChargeStateError):
        ledger.release(charge, "[2]")  # released already
    refunded = _charge(ledger, "fp-2")
    ledger.refund(refunded.id)
    with pytest.raises(ChargeStateError):
        ledger.release(refunded, "[1]")  # nothing was released: the refund stands
    with pytest.raises(ChargeStateError, match="final"):
        ledger.refund(charge.id)
    assert ledger.status(T, S)["spent_epsilon"] == 0.5


# -- refunds --------------------------------------------------------------------------------------
def test_refund_returns_the_budget_when_nothing_was_released(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=0.5)
    charge = _charge(ledger, "fp-1")

    ledger.refund(charge.id)
    ledger.refund(charge.id)  # idempotent

    assert ledger.status(T, S)["spent_epsilon"] == 0.0 and ledger.status(T, S)["queries"] == 0
    assert not _charge(ledger, "fp-1").repeat  # a refunded request is not a repeat


def test_no_refund_after_release_and_no_answer_after_refund(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=2.0)
    released, refunded = _charge(ledger), _charge(ledger)
    ledger.store_answer(released.id, "[1]")
    ledger.store_answer(released.id, "[1]")  # the same answer again is a no-op
    ledger.refund(refunded.id)

    with pytest.raises(ChargeStateError, match="final"):
        ledger.refund(released.id)
    with pytest.raises(ChargeStateError):
        ledger.store_answer(released.id, "[2]")
    with pytest.raises(ChargeStateError):
        ledger.store_answer(refunded.id, "[1]")
    with pytest.raises(UnknownCharge):
        ledger.refund("no-such-charge")
    assert ledger.status(T, S)["spent_epsilon"] == 0.5


async def test_a_waiter_learns_that_the_first_request_was_refunded(db: Path | str) -> None:
    ledger = AsyncLedger(PrivacyLedger(db, cap_epsilon=2.0))
    first = await ledger.charge(tenant=T, student=S, cost=laplace(0.5), request_fingerprint="fp")
    second = await ledger.charge(tenant=T, student=S, cost=laplace(0.5), request_fingerprint="fp")
    assert second.pending

    await ledger.refund(first.id)

    assert await ledger.await_answer(second.id, timeout_s=1.0, poll_s=0.01) is None
    with pytest.raises(TimeoutError):
        await ledger.await_answer(
            (await ledger.charge(tenant=T, student=S, cost=laplace(0.5))).id, timeout_s=0.05
        )


# -- Rényi accounting -----------------------------------------------------------------------------
def _rdp_queries_within(cap: float, delta: float, query_epsilon: float, query_delta: float) -> int:
    """How many analytic-Gaussian queries fit the cap, by dp_accounting directly (or basic composition)."""
    multiplier = analytic_gaussian_sigma(epsilon=query_epsilon, delta=query_delta, sensitivity=1.0)
    k = 0
    while True:
        direct = RdpAccountant()
        direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(multiplier), k + 1))
        epsilon = direct.get_epsilon(delta)
        if (k + 1) * query_delta <= delta:
            epsilon = min(epsilon, (k + 1) * query_epsilon)
        if epsilon > cap:
            return k
        k += 1


@pytest.mark.parametrize("accountant", ["basic", "rdp"])
def test_rdp_accounting_serves_more_gaussian_queries_than_basic_composition(db: Path | str, accountant: str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=2.0, cap_delta=1e-5, accountant=accountant)
    served = 0
    while True:
        try:
            _charge(ledger, epsilon=0.5, delta=1e-6, mechanism="gaussian")
        except BudgetExceeded:
            break
        served += 1

    status = ledger.status(T, S)
    expected = 4 if accountant == "basic" else _rdp_queries_within(2.0, 1e-5, 0.5, 1e-6)
    assert served == status["queries"] == expected
    assert status["accountant"] == accountant and status["spent_epsilon"] <= 2.0
    if accountant == "rdp":
        assert expected > 10  # 14 with these numbers, against 4


def test_charge_all_is_all_or_nothing(db: Path | str) -> None:
    ledger = PrivacyLedger(db, cap_epsilon=1.0)
    ledger.charge(tenant=T, student=StudentKey("c"), cost=laplace(0.8))  # c has 0.2 left
    with pytest.raises(BudgetExceeded):
        ledger.charge_all(tenant=T, students=keys(["a", "b", "c", "d"]), cost=CENTRAL)
    assert [ledger.status(T, s)["spent_epsilon"] for s in ("a", "b", "d")] == [0.0, 0.0, 0.0]
    charges = ledger.charge_all(tenant=T, students=keys(["a", "b", "a"]), cost=CENTRAL)
    assert len(charges) == 2  # each student once
    ledger.settle_all(charges, released=None)  # nothing released: refunded
    assert ledger.status(T, "a")["spent_epsilon"] == 0.0
    ledger.close()


def test_pending_charges_of_dead_owners_are_refunded_and_live_ones_kept(tmp_path: Path) -> None:
    dead = PrivacyLedger(tmp_path, cap_epsilon=10.0, owner="dead-process")
    pending = dead.charge(tenant=T, student=S, cost=laplace(1.0), request_fingerprint="fp")
    answered = dead.charge(tenant=T, student=S, cost=laplace(1.0))
    dead.store_answer(answered.id, '{"a": 1}')
    live = PrivacyLedger(tmp_path, cap_epsilon=10.0, owner="live-process")
    mine = live.charge(tenant=T, student=S, cost=laplace(1.0))
    assert live.settle_orphans(live_owners={live.owner}) == 1
    assert live.get_charge(pending.id).status == "refunded"
    assert live.get_charge(answered.id).status == "released" and live.get_charge(mine.id).status == "charged"
    assert live.status(T, S)["spent_epsilon"] == 2.0
    # the identical request is a new query now, not a wait on a reservation nobody will fill
    again = live.charge(tenant=T, student=S, cost=laplace(1.0), request_fingerprint="fp")
    assert again.repeat is False
    assert live.settle_orphans(live_owners={live.owner}) == 0
