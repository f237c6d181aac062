"""Domain errors become HTTP responses in one place (``app.errors``, issue 35 part 1): the status by class, the field's
``loc`` under ``path`` when it is a path parameter of the route, else ``query`` on a request without a body, else
``body`` — the responses the API gave when the services built them themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from app.domain_errors import Conflict, DomainError, GroupBudgetSpent, InvalidInput, NotFound, Unavailable
from app.errors import http_error, http_status
from qmatrix import example_qmatrix
from tests.conftest import make_client


def _request(method: str, path_params: dict[str, str]) -> Request:
    return Request({"type": "http", "method": method, "path": "/", "headers": [], "query_string": b"",
                    "path_params": path_params})


@pytest.mark.parametrize(("error", "status"), [
    (InvalidInput(("x",), ["m"]), 422), (NotFound(("x",), ["m"]), 404), (Conflict(("x",), ["m"]), 409),
    (Unavailable(("x",), ["m"]), 503), (GroupBudgetSpent(("x",), ["m"], retry_after_s=7), 429),
])
def test_each_domain_error_has_its_status(error: DomainError, status: int) -> None:
    assert http_status(error) == status


@pytest.mark.parametrize(("method", "path_params", "field", "loc"), [
    ("DELETE", {"qmatrix_id": "q"}, ("qmatrix_id",), ["path", "qmatrix_id"]),
    ("POST", {"qmatrix_id": "q"}, ("responses",), ["body", "responses"]),
    ("POST", {}, ("students", 2, "responses"), ["body", "students", 2, "responses"]),
    ("POST", {}, (), ["body"]),
    ("GET", {}, ("cursor",), ["query", "cursor"]),
])
def test_the_field_is_located_where_the_route_received_it(
    method: str, path_params: dict[str, str], field: tuple[str | int, ...], loc: list[str | int]
) -> None:
    # Execute
    response = http_error(InvalidInput(field, ["bad"], details={"unknown_item_ids": ["i9"]}),
                          _request(method, path_params))
    # Assert
    assert response.detail() == [{"loc": loc, "msg": "bad", "type": "value_error", "unknown_item_ids": ["i9"]}]


def test_a_group_budget_refusal_says_so_and_when_to_retry() -> None:
    # Execute
    response = http_error(GroupBudgetSpent(("students",), ["spent"], retry_after_s=30), _request("POST", {}))
    # Assert
    assert response.status_code == 429 and response.retry_after_s == 30
    assert response.detail() == [{"loc": ["body", "students"], "msg": "spent", "type": "privacy_budget",
                                  "retry_after_s": 30}]


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    with make_client(tmp_path, {}) as c:
        yield c


def test_services_refusals_answer_as_before(client: TestClient) -> None:
    builtin = example_qmatrix().id
    # Execute
    unknown_job = client.get("/v1/jobs/nosuchjob")
    unknown_qmatrix = client.get("/v1/qmatrices/nosuchq")
    builtin_delete = client.delete(f"/v1/qmatrices/{builtin}")
    # Assert
    assert unknown_job.status_code == 404 and unknown_job.json() == {"detail": [
        {"loc": ["path", "job_id"], "msg": "unknown job id 'nosuchjob'", "type": "value_error"}]}
    assert unknown_qmatrix.status_code == 404 and unknown_qmatrix.json() == {"detail": [
        {"loc": ["path", "qmatrix_id"], "msg": "unknown Q-matrix id 'nosuchq'", "type": "value_error"}]}
    assert builtin_delete.status_code == 409 and builtin_delete.json() == {"detail": [
        {"loc": ["path", "qmatrix_id"], "msg": f"'{builtin}' is a built-in Q-matrix", "type": "value_error"}]}
