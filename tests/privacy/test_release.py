"""Charge → settle-or-refund as one context manager (privacy.ledger.release): settles once, refunds on an
exception, on a cancellation and when nothing was settled; repeats and groups."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import select

from privacy import ReleaseCost
from privacy.ledger import AnswerPending, AsyncLedger, BudgetExceeded, ChargeStateError, PrivacyLedger, StudentKey
from privacy.ledger.tables import charges

T, S = "tenant-a", StudentKey("student-1")
COST = ReleaseCost(epsilon=0.5, delta=0.0, mechanism="laplace")


def _ledger(db: Path | str, cap: float = 10.0) -> AsyncLedger:
    return AsyncLedger(PrivacyLedger(db, cap_epsilon=cap))


def _statuses(ledger: AsyncLedger, student: str = S) -> list[str]:
    with ledger.engine.engines.read() as conn:
        return list(conn.execute(select(charges.c.status).where(charges.c.student_id == student)
                                 .order_by(charges.c.seq)).scalars())


async def test_a_settled_release_is_spent_once_and_settles_only_once(db: Path | str) -> None:
    ledger = _ledger(db)

    async with ledger.releasing(tenant=T, student=S, cost=COST, releases=2, fingerprint="fp") as release:
        settled = await release.settle('{"answer": 1}')
        with pytest.raises(ChargeStateError, match="settled already"):
            await release.settle('{"answer": 2}')

    assert settled is not None and settled.status == "released" and settled.answer_json == '{"answer": 1}'
    assert _statuses(ledger) == ["released"]
    assert (await ledger.status(T, S))["spent_epsilon"] == pytest.approx(1.0)


async def test_a_release_settled_at_fewer_answers_gives_the_rest_back(db: Path | str) -> None:
    ledger = _ledger(db)

    async with ledger.releasing(tenant=T, student=S, cost=COST, releases=3) as release:
        settled = await release.settle("{}", released=1)

    assert settled is not None and settled.releases == 1 and settled.spent_epsilon == pytest.approx(0.5)
    assert (await ledger.status(T, S))["spent_epsilon"] == pytest.approx(0.5)


async def test_an_exception_in_the_body_refunds_the_charge(db: Path | str) -> None:
    ledger = _ledger(db)

    with pytest.raises(RuntimeError, match="entity exploded"):
        async with ledger.releasing(tenant=T, student=S, cost=COST, releases=2) as release:
            assert release.charges and (await ledger.status(T, S))["spent_epsilon"] == pytest.approx(1.0)
            raise RuntimeError("entity exploded")

    assert _statuses(ledger) == ["refunded"]
    assert (await ledger.status(T, S))["spent_epsilon"] == 0.0


async def test_a_cancelled_body_refunds_the_charge(db: Path | str) -> None:
    ledger = _ledger(db)
    charged = asyncio.Event()

    async def diagnose() -> None:
        async with ledger.releasing(tenant=T, student=S, cost=COST):
            charged.set()
            await asyncio.sleep(60)  # a slow entity; the client goes away

    task = asyncio.create_task(diagnose())
    await charged.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert _statuses(ledger) == ["refunded"]
    assert (await ledger.status(T, S))["spent_epsilon"] == 0.0


async def test_leaving_without_settling_refunds(db: Path | str) -> None:
    ledger = _ledger(db)

    async with ledger.releasing(tenant=T, student=S, cost=COST):
        pass  # nothing was released

    assert _statuses(ledger) == ["refunded"]


async def test_an_identical_request_gets_the_stored_answer_and_charges_nothing(db: Path | str) -> None:
    ledger = _ledger(db)
    async with ledger.releasing(tenant=T, student=S, cost=COST, fingerprint="fp") as first:
        await first.settle('{"answer": 1}')

    async with ledger.releasing(tenant=T, student=S, cost=COST, fingerprint="fp") as again:
        assert again.repeat and again.answer == '{"answer": 1}' and again.charges == []
        assert again.charge is not None and again.charge.repeat
        with pytest.raises(ChargeStateError, match="nothing to settle"):
            await again.settle('{"answer": 2}')

    assert _statuses(ledger) == ["released"]
    assert (await ledger.status(T, S))["spent_epsilon"] == pytest.approx(0.5)


async def test_an_identical_request_still_pending_is_waited_for(db: Path | str) -> None:
    ledger = _ledger(db)
    async with ledger.releasing(tenant=T, student=S, cost=COST, fingerprint="fp") as first:
        async def second() -> str | None:
            async with ledger.releasing(tenant=T, student=S, cost=COST, fingerprint="fp") as again:
                return again.answer

        waiting = asyncio.create_task(second())
        await asyncio.sleep(0.2)
        await first.settle('{"answer": 1}')

    assert await waiting == '{"answer": 1}'
    assert _statuses(ledger) == ["released"]


async def test_a_pending_identical_request_that_never_answers_is_answer_pending(
    db: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = _ledger(db)

    async def timed_out(charge_id: str, **_kw: object) -> str | None:
        raise TimeoutError(charge_id)

    monkeypatch.setattr(ledger, "await_answer", timed_out)
    async with ledger.releasing(tenant=T, student=S, cost=COST, fingerprint="fp"):
        with pytest.raises(AnswerPending):
            async with ledger.releasing(tenant=T, student=S, cost=COST, fingerprint="fp"):
                pytest.fail("the body of a pending repeat must not run")


async def test_a_spent_budget_refuses_before_the_body_runs(db: Path | str) -> None:
    ledger = _ledger(db, cap=0.4)

    with pytest.raises(BudgetExceeded):
        async with ledger.releasing(tenant=T, student=S, cost=COST):
            pytest.fail("nothing may be computed for a refused release")

    assert _statuses(ledger) == []


async def test_a_group_release_charges_everyone_and_refunds_everyone_on_failure(db: Path | str) -> None:
    ledger = _ledger(db)
    group = [StudentKey("s1"), StudentKey("s2"), StudentKey("s3")]

    with pytest.raises(RuntimeError):
        async with ledger.releasing(tenant=T, students=group, cost=COST, source="cohort") as release:
            assert len(release.charges) == 3
            raise RuntimeError("no student could be diagnosed")
    async with ledger.releasing(tenant=T, students=group, cost=COST, source="cohort") as release:
        assert await release.settle("cohort-report") is None

    assert [_statuses(ledger, s) for s in group] == [["refunded", "released"]] * 3
    assert (await ledger.status(T, "s2"))["spent_epsilon"] == pytest.approx(0.5)


async def test_a_failed_refund_is_logged_without_the_student_and_the_original_error_goes_on(
    db: Path | str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = _ledger(db)

    async def broken(charge_id: str) -> None:
        raise ConnectionError("database gone")

    monkeypatch.setattr(ledger, "refund", broken)
    with caplog.at_level(logging.ERROR, logger="fedcd.privacy"), pytest.raises(RuntimeError, match="original"):
        async with ledger.releasing(tenant=T, student=StudentKey("alice-SECRET"), cost=COST) as release:
            raise RuntimeError("original")

    assert f"refund of charge(s) {release.charges[0].id} failed" in caplog.text
    assert "alice-SECRET" not in caplog.text


def test_a_release_is_for_one_student_or_a_group(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "ledger.db")
    with pytest.raises(ValueError, match="exactly one"):
        ledger.releasing(tenant=T, cost=COST)
    with pytest.raises(ValueError, match="exactly one"):
        ledger.releasing(tenant=T, student=S, students=[S], cost=COST)
    with pytest.raises(ValueError, match="pure ε"):
        ledger.releasing(tenant=T, students=[S], cost=ReleaseCost(epsilon=1.0, delta=1e-5, mechanism="gaussian"))
