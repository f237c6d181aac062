"""A user's diagnosis is not queued behind a calibration job's calls (issue 20, "interactive first").

Measured before: the README's first curl waited 120 s, because the first-start calibration had queued its
calls on smollm2 and gemma3 (one slot each) and the diagnosis joined the end of that queue. Here a
calibration job keeps a one-slot SIMULATED entity busy (four students at once); a diagnosis sent meanwhile
must be the next call the entity starts — at most one job call may slip in between the snapshot and the
request's arrival — not the fourth or later. Counted in calls, not seconds.
"""

from __future__ import annotations

import time
from pathlib import Path

from providers.scheduling import call_priority
from providers.types import EntityPrediction, PromptContext
from providers.wrappers import ConcurrencyLimited, RetryPolicy, build_chain
from tests.app.conftest import make_client
from tests.factories import FakeEntity

Q_ID = "example-prealgebra"


class Recorded:
    """A SIMULATED entity that records the priority of every call it starts."""

    def __init__(self, inner: FakeEntity) -> None:
        self.inner, self.name = inner, inner.name
        self.started: list[str] = []

    async def respond(self, context: PromptContext) -> EntityPrediction:
        self.started.append(call_priority())
        return await self.inner.respond(context)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _records(n: int) -> list[dict]:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    return [{"student_id": f"v{s}", "responses": [{"item_id": i, "correct": bool((s >> k) & 1)} for k, i in enumerate(items)]}
            for s in range(n)]


def _until(predicate, limit_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + limit_s  # a bound on waiting, not an assertion on speed
    while not predicate():
        assert time.monotonic() < end, "condition never held"
        time.sleep(0.01)


def _one_slot_entity(preempt: bool) -> tuple[Recorded, object]:
    recorded = Recorded(FakeEntity("slow", 0.5, delay_s=0.3))
    chain = build_chain(recorded, policy=RetryPolicy(max_attempts=1), deadline_s=120.0, concurrency=1,  # type: ignore[arg-type]
                        preempt_background=preempt)
    return recorded, chain


def _diagnose_during_calibration(tmp_path: Path, preempt: bool) -> tuple[list[str], int, ConcurrencyLimited]:
    recorded, chain = _one_slot_entity(preempt)
    with make_client(tmp_path, {"slow": chain}, batch_concurrency=4) as client:  # type: ignore[dict-item]
        job = client.post("/v1/calibrate", json={"qmatrix_id": Q_ID, "records": _records(40), "epsilon": "none",
                                                 "method": "bias"})
        assert job.status_code == 202, job.text
        _until(lambda: len(recorded.started) >= 2)
        before = len(recorded.started)
        r = client.post("/v1/diagnose", json={"student_id": "user", "qmatrix_id": Q_ID, "epsilon": "none",
                                              "responses": [{"item_id": "q01", "correct": True}]})
        assert r.status_code == 200, r.text
        started = list(recorded.started)
    limited = chain.inner.inner  # type: ignore[attr-defined]  # Observed -> WithDeadline -> ConcurrencyLimited
    return started, before, limited


def test_a_diagnosis_is_the_next_call_an_entity_busy_with_a_job_starts(tmp_path: Path) -> None:
    started, before, limited = _diagnose_during_calibration(tmp_path, preempt=False)
    assert started[:before] == ["background"] * before
    user_at = started.index("interactive")
    # FIFO would start the three students queued before it first (user_at >= before + 3).
    assert user_at - before <= 1, started
    assert isinstance(limited, ConcurrencyLimited) and limited.slots.preemptions == 0


def test_on_an_embedded_model_a_diagnosis_takes_the_slot_from_the_job_at_once(tmp_path: Path) -> None:
    started, before, limited = _diagnose_during_calibration(tmp_path, preempt=True)
    user_at = started.index("interactive")
    assert user_at - before <= 1, started
    # The job's call in flight gave its slot up (it started over afterwards): the user waited for no job call.
    assert limited.slots.preemptions >= 1
