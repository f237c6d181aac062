"""What a failed job keeps of its exception (app.jobs.failures): the text the code wrote itself, a validation
error's field paths, else the exception's type — never text that may quote the job's input, neither in the stored
``error`` (shown by the API, the console and webhooks, and never erased) nor in the log."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.db import Database, JobRow
from app.domain_errors import InvalidInput
from app.jobs import JobContext, JobRunner, JobTiming
from app.jobs.failures import JobFailed, failure_trace, stored_error
from app.schemas import CalibrateRequest
from calibration import TooFewAnswers
from privacy import BudgetExceeded

RAW_ID = "a-raw-student-id-" + "x" * 300  # past an Identifier's 256 characters: the request refuses it


def _invalid_request() -> ValidationError:
    """The train job's old failure: a calibration request built from an upload's raw ids."""
    records = [{"student_id": RAW_ID, "responses": [{"item_id": "q01", "correct": True}]}]
    with pytest.raises(ValidationError) as caught:
        CalibrateRequest.model_validate({"qmatrix_id": "q", "records": records})
    assert RAW_ID[:20] in str(caught.value)  # what used to be stored: the id, quoted (pydantic shortens it)
    return caught.value


async def test_a_failed_job_stores_and_logs_no_text_that_quotes_its_input(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a job failing as the train job did, on a validation error quoting the raw ids
    database = Database(f"sqlite:///{tmp_path / 'jobs.db'}")
    runner = JobRunner(database.sessions, worker_id="w1", timing=JobTiming(poll_s=0.01),
                       control_sessions=database.control_sessions)
    seen: list[dict[str, Any]] = []
    runner.on_finish = seen.append

    async def handler(request: dict[str, Any], context: JobContext) -> dict[str, Any]:
        raise _invalid_request()

    runner.register("upload", handler)
    job_id = runner.submit("upload", {}, tenant="t")

    # Execute
    with caplog.at_level(logging.INFO, logger="fedcd.jobs"):
        runner.start()
        for _ in range(2000):  # bounded polls until the outcome is stored and told
            if seen:
                break
            await asyncio.sleep(0.005)
        await runner.aclose()

    # Assert: the fields and the error types, not the ids — stored, sent to on_finish (webhooks), logged
    with database.sessions() as session:
        job = session.get(JobRow, job_id)
        assert job is not None and job.status == "failed"
        error = job.error
    assert error == "ValidationError: invalid CalibrateRequest: records.0.student_id (string_too_long)"
    assert seen and seen[0]["error"] == error
    assert "job " + job_id + " failed: " + error in caplog.text and "test_job_failures.py" in caplog.text  # where
    assert "raw-student" not in caplog.text and "xxxx" not in caplog.text
    database.close()


def _budget_spent() -> BudgetExceeded:
    return BudgetExceeded("t", "the-student", 3.0, 3.0, 1.0)


@pytest.mark.parametrize("exc,kept", [
    (InvalidInput(("records", 3, "responses"), ["12 responses; at most 10 per student"]), True),
    (JobFailed("no validation student got an answer from any entity"), True),
    (TooFewAnswers("no entity answered at least 20 of the 30 validation students"), True),
    (_budget_spent(), True),
    (ValueError(f"unknown student '{RAW_ID}'"), False),
    (RuntimeError(f"cannot read {RAW_ID}"), False),
    (KeyError(RAW_ID), False),
])
def test_only_the_codes_own_text_is_kept(exc: Exception, kept: bool) -> None:
    error = stored_error(exc)
    assert error.startswith(type(exc).__name__)
    assert (str(exc) in error) is kept
    assert RAW_ID not in error and "the-student" not in error


def test_a_validation_error_keeps_field_names_and_indexes_not_dict_keys() -> None:
    # Prepare: a dict keyed by input (truth's concepts) in the path: a key is data, not a field name
    records = [{"student_id": "s", "responses": [{"item_id": "q01", "correct": True}], "truth": {RAW_ID: "high"}}]
    with pytest.raises(ValidationError) as caught:
        CalibrateRequest.model_validate({"qmatrix_id": "q", "records": records})

    # Execute / Assert
    assert stored_error(caught.value) == "ValidationError: invalid CalibrateRequest: records.0.truth.* (float_type)"


def test_the_logged_trace_names_where_and_what_never_the_message() -> None:
    message = "-".join(["quoted", RAW_ID])  # built at run time: no source line (which a trace shows) holds it
    try:
        try:
            raise ValueError(message)
        except ValueError as inner:
            raise RuntimeError(message) from inner
    except RuntimeError as exc:
        trace = failure_trace(exc)
    assert "builtins.ValueError" in trace and "builtins.RuntimeError" in trace and "which led to" in trace
    assert "test_the_logged_trace_names_where_and_what_never_the_message" in trace  # the frame
    assert "quoted-" not in trace and RAW_ID not in trace
