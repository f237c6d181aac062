"""The Python client against a real gateway: ``fedcd serve`` on a free loopback port, its admin key read where the
first start saves it (``.fedcd/dev-api-key``), as a new user would. One server for the module; a simulated entity
(labelled so in its name) answers, so no LLM runs.

Tenant ``slow`` has a rate of one request per hour: its second request is a rate-limit 429 whatever the machine's
speed, and the client's recorded waits are the server's ``Retry-After``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fedcd_client import (
    AsyncFedcdClient,
    AuthenticationError,
    ConflictError,
    DiagnoseRequest,
    FedcdClient,
    InvalidRequestError,
    JobFailedError,
    NotFoundError,
    PermissionDeniedError,
    PrivacyBudgetExceeded,
    RateLimitError,
    RetryPolicy,
)

from app.auth import KeyStore
from app.db import Database
from tests.app.gateway_processes import free_port, gateway_process

ROOT = Path(__file__).resolve().parents[2]
Q = "example-prealgebra"
SIM = [{"name": "sim:confident", "kind": "simulated", "simulated_style": "confident", "seed": 1}]
FRACTIONS = {"id": "fractions", "concepts": ["add", "subtract"],
             "items": [{"id": "i1", "text": "1/2 + 1/3", "concepts": ["add"]},
                       {"id": "i2", "text": "3/4 - 1/2", "concepts": ["subtract"]}]}


class Gateway:
    def __init__(self, base_url: str, state: Path) -> None:
        self.base_url, self.state = base_url, state
        self.key = (state / "dev-api-key").read_text().strip()  # written by the first start (app/bootstrap.py)
        keys = KeyStore(Database(f"sqlite:///{state / 'fedcd.db'}").sessions)
        self.client_key = keys.create(tenant="dev", role="client").api_key
        self.slow_key = keys.create(tenant="slow", role="admin").api_key

    def client(self, key: str | None = None, **kwargs: object) -> FedcdClient:
        return FedcdClient(self.base_url, api_key=key or self.key, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    home = tmp_path_factory.mktemp("gateway")
    port = free_port()
    env = {"FEDCD_STATE_DIR": str(home / ".fedcd"), "FEDCD_ENTITIES": json.dumps(SIM),
           "FEDCD_TRAIN_DEFAULT_MODEL": "false", "FEDCD_RATE_LIMIT_TENANTS": json.dumps({"slow": "1/hour burst 1"})}
    with gateway_process(port, env, log=home / "gateway.log"):
        yield Gateway(f"http://127.0.0.1:{port}", home / ".fedcd")


def _responses(*pattern: bool) -> list[dict[str, object]]:
    items = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]
    return [{"item_id": i, "correct": c} for i, c in zip(items, pattern, strict=False)]


def test_qmatrices_create_get_and_list(gateway: Gateway) -> None:
    with gateway.client() as fedcd:
        created = fedcd.qmatrices.create(FRACTIONS)
        read = fedcd.qmatrices.get("fractions")
        ids = list(fedcd.qmatrices.iter(page_size=1))  # one id a page: every cursor is followed
        with pytest.raises(ConflictError):
            fedcd.qmatrices.create(FRACTIONS)
        with pytest.raises(NotFoundError):
            fedcd.qmatrices.get("no-such-qmatrix")
    assert (created.id, created.version, created.n_items) == ("fractions", 1, 2)
    assert [i.id for i in read.items] == ["i1", "i2"] and read.concepts == ["add", "subtract"]
    assert Q in ids and "fractions" in ids and len(ids) == len(set(ids))


def test_diagnose_single_batch_and_forecasts(gateway: Gateway) -> None:
    with gateway.client() as fedcd:
        one = fedcd.diagnose(DiagnoseRequest(student_id="client-s1", qmatrix_id=Q, include_entities=True,
                                             responses=_responses(True, False, True), forecast_items=["q04"]))
        batch = fedcd.diagnose_batch({"qmatrix_id": Q, "students": [
            {"student_id": "client-b1", "responses": _responses(True, True)},
            {"student_id": "client-b2", "responses": _responses(False)}]})
        with pytest.raises(InvalidRequestError) as bad:
            fedcd.diagnose({"student_id": "client-s1", "qmatrix_id": Q, "responses": [{"item_id": "nope", "correct": True}]})
    assert one.mastery and all(0.0 <= p <= 1.0 for p in one.mastery.values())
    assert one.entities is not None and one.entities[0].name == "sim:confident"
    assert one.forecasts is not None and [f.item_id for f in one.forecasts] == ["q04"]
    assert one.budget is not None and one.budget.charged_epsilon > 0
    assert batch.count == 2 and {r.student_id for r in batch.results} == {"client-b1", "client-b2"}
    assert any("responses" in [str(p) for p in e["loc"]] for e in bad.value.errors)


def test_calibrate_job_wait_list_get_and_cancel(gateway: Gateway) -> None:
    progress: list[str] = []
    with gateway.client() as fedcd:
        accepted = fedcd.calibrate({"dataset": {"name": "synthetic", "max_students": 20}, "method": "bias"})
        job = fedcd.jobs.wait(accepted.job_id, poll_s=0.2, timeout_s=600,
                              on_progress=lambda j: progress.append(j.status))
        calibration = fedcd.calibration_job(accepted.job_id)
        record = fedcd.calibrations.get(job.calibration_id or "")
        listed = [j.job_id for j in fedcd.jobs.iter(page_size=1, kind=["calibrate"], status=["succeeded"])]
        with pytest.raises(ConflictError):  # a finished job cannot be cancelled
            fedcd.jobs.cancel(accepted.job_id)
        big = fedcd.calibrate({"dataset": {"name": "synthetic", "max_students": 5000}, "method": "bias"})
        cancelling = fedcd.jobs.cancel(big.job_id)
        with pytest.raises(JobFailedError) as stopped:
            fedcd.jobs.wait(big.job_id, poll_s=0.2, timeout_s=600)
    assert job.status == "succeeded" and progress[-1] == "succeeded" and job.progress.done == job.progress.total
    assert calibration.calibration_id == job.calibration_id and record.id == job.calibration_id
    assert accepted.job_id in listed
    assert cancelling.status in ("cancelling", "cancelled") and stopped.value.job.status == "cancelled"


def test_students_report_export_erase_and_budget(gateway: Gateway) -> None:
    with gateway.client() as fedcd:
        fedcd.diagnose({"student_id": "client-r1", "qmatrix_id": Q, "responses": _responses(True, False)})
        budget = fedcd.privacy.budget("client-r1")
        html = fedcd.students.report("client-r1", qmatrix_id=Q)
        svg = fedcd.students.report("client-r1", qmatrix_id=Q, format="svg")
        exported = fedcd.students.export("client-r1")
        erased = fedcd.students.erase("client-r1")
        with pytest.raises(NotFoundError):  # the stored diagnosis is gone
            fedcd.students.report("client-r1", qmatrix_id=Q)
        after = fedcd.privacy.budget("client-r1")
        policy = fedcd.privacy.policy()
        usage = fedcd.usage()
    assert budget.spent_epsilon > 0 and budget.remaining_epsilon < budget.cap_epsilon
    assert b"<html" in html.lower() and svg.lstrip().startswith((b"<svg", b"<?xml"))
    assert exported.student_id == "client-r1" and exported.charges and exported.diagnoses
    assert erased.removed and after.spent_epsilon == budget.spent_epsilon  # erasure never resets a budget
    assert policy.cap_epsilon == budget.cap_epsilon and usage.total.calls >= 1


def test_a_spent_budget_is_raised_and_not_retried(gateway: Gateway) -> None:
    sleeps: list[float] = []
    with gateway.client(sleep=sleeps.append, retry=RetryPolicy(max_wait_s=10**6)) as fedcd:
        fedcd.diagnose({"student_id": "client-spent", "qmatrix_id": Q, "epsilon": 400.0,
                        "responses": _responses(True)})
        with pytest.raises(PrivacyBudgetExceeded) as spent:
            fedcd.diagnose({"student_id": "client-spent", "qmatrix_id": Q, "epsilon": 400.0,
                            "responses": _responses(False)})
    assert sleeps == [] and spent.value.renews_at is not None and spent.value.retry_after_s


def test_a_rate_limit_is_waited_out_for_as_long_as_the_server_says(gateway: Gateway) -> None:
    # The slow tenant's bucket holds one request an hour. The recording sleep returns at once, so each retry is
    # refused again: the waits are exactly the server's Retry-After values, then the error is raised.
    sleeps: list[float] = []
    with gateway.client(gateway.slow_key, sleep=sleeps.append, retry=RetryPolicy(max_retries=2, max_wait_s=7200)) as fedcd:
        fedcd.usage()
        with pytest.raises(RateLimitError) as limited:
            fedcd.usage()
    with gateway.client(gateway.slow_key, sleep=sleeps.append) as impatient, pytest.raises(RateLimitError):
        impatient.usage()  # the default policy waits at most 30 s: raised at once
    assert len(sleeps) == 2 and all(3000 < s <= 3600 for s in sleeps)
    assert limited.value.retry_after_s is not None and limited.value.body["type"] == "rate_limit"


def test_keys_are_checked(gateway: Gateway) -> None:
    with gateway.client("fcd_not_a_key") as stranger, pytest.raises(AuthenticationError):
        stranger.usage()
    with gateway.client(gateway.client_key) as client_role, pytest.raises(PermissionDeniedError):
        client_role.jobs.list()


async def test_the_async_client_diagnoses_and_pages(gateway: Gateway) -> None:
    async with AsyncFedcdClient(gateway.base_url, api_key=gateway.key) as fedcd:
        diagnosis = await fedcd.diagnose({"student_id": "client-a1", "qmatrix_id": Q, "responses": _responses(True)})
        ids = [qid async for qid in fedcd.qmatrices.iter(page_size=1)]
        health = await fedcd.health()
    assert diagnosis.student_id == "client-a1" and Q in ids and health.status == "ok"


def test_the_readme_example_runs_from_a_fresh_checkout_layout(gateway: Gateway) -> None:
    # The client README's Python block, as written, from the folder holding .fedcd/ (where `make serve` runs)
    readme = (ROOT / "clients" / "python" / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    assert code is not None and len(code.group(1).strip().splitlines()) <= 10
    env = {"FEDCD_BASE_URL": gateway.base_url, "PYTHONPATH": str(ROOT / "clients" / "python" / "src"),
           "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", code.group(1)], cwd=gateway.state.parent, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert re.search(r"\w+: 0\.\d\d", run.stdout) and "left" in run.stdout
