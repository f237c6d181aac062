"""Work per diagnosis, counted rather than timed (a CI-cheap guard that a slow path cannot creep back):
SQL statements per request, and no whole-Q-matrix serialization on the request path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from qmatrix import qmatrix_fingerprint, qmatrix_from_json, qmatrix_to_json
from tests.conftest import make_client
from tests.factories import FakeEntity

ITEMS = ["q01", "q02", "q03", "q04", "q05", "q07", "q09", "q10"]


def _body(n: int) -> dict:
    return {"student_id": f"s{n}", "qmatrix_id": "example-prealgebra",
            "responses": [{"item_id": i, "correct": bool((n >> k) & 1)} for k, i in enumerate(ITEMS[:4])]}


@contextmanager
def _statements(engines: list[Engine]) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        seen.append(statement.split()[0].upper())

    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", count)


def _engines(client: TestClient) -> list[Engine]:
    state = client.app.state.gateway  # type: ignore[attr-defined]
    return [state.database.engine, state.ledger._db.writer, state.ledger._db.reader]


def test_statements_per_diagnosis_stay_bounded(tmp_path: Path) -> None:
    entities = {n: FakeEntity(n, 0.4) for n in ("a", "b", "c")}
    with make_client(tmp_path, entities, privacy_cap_epsilon=1e6) as client:
        client.post("/v1/diagnose", json=_body(0))  # warm: caches, first-time rows
        usage = client.app.state.gateway.usage  # type: ignore[attr-defined]
        usage.flush()  # the warm request's usage rows: written now, whatever the machine's speed
        with _statements(_engines(client)) as seen:
            assert client.post("/v1/diagnose", json=_body(1)).status_code == 200
        assert usage.flush() == 3  # the request's usage rows were buffered, not written on its path
        # Budget (see README "Gateway speed"): the API key (1), the tenant's configuration generation (1: the
        # Q-matrix, calibration and policy come from the worker's cache while it is unchanged), the ledger's charge
        # (1 transaction: BEGIN, repeat lookup, student, window, 2 writes), the stored answer (1 transaction:
        # BEGIN, 1 guarded write — every entity released, so nothing is recounted). Usage rows are buffered and
        # written in batches (README "Cost"), not per request.
        writes = [s for s in seen if s in ("INSERT", "UPDATE", "DELETE")]
        assert len(seen) <= 10, seen
        assert len(writes) <= 3, seen


@contextmanager
def _counting(functions: list[object]) -> Iterator[dict[str, int]]:
    """Replace each function, in every loaded module that imported it, by a counting wrapper."""
    calls: dict[str, int] = {}
    patched: list[tuple[object, str, object]] = []
    for function in functions:
        name = function.__name__  # type: ignore[attr-defined]
        calls[name] = 0

        def wrapper(*args, _f=function, _n=name, **kwargs):  # type: ignore[no-untyped-def]
            calls[_n] += 1
            return _f(*args, **kwargs)

        for module in list(sys.modules.values()):
            for attr, value in list(vars(module).items()) if module is not None else []:
                if value is function:
                    patched.append((module, attr, value))
                    setattr(module, attr, wrapper)
    try:
        yield calls
    finally:
        for module, attr, value in patched:
            setattr(module, attr, value)


def test_a_diagnosis_never_serializes_the_whole_qmatrix(tmp_path: Path) -> None:
    entities = {"a": FakeEntity("a", 0.4)}
    with make_client(tmp_path, entities) as client:
        csv = "item_id,text," + ",".join(f"k{c}" for c in range(10)) + "\n" + "\n".join(
            f"i{n},text {n}," + ",".join("1" if c == n % 10 else "0" for c in range(10)) for n in range(2000)
        ) + "\n"
        assert client.post("/v1/qmatrices?id=bank", content=csv, headers={"content-type": "text/csv"}).status_code == 201
        body = {"student_id": "s", "qmatrix_id": "bank",
                "responses": [{"item_id": f"i{n}", "correct": n % 2 == 0} for n in range(5)]}
        client.post("/v1/diagnose", json={**body, "student_id": "warm"})
        with _counting([qmatrix_to_json, qmatrix_from_json, qmatrix_fingerprint]) as calls:
            assert client.post("/v1/diagnose", json=body).status_code == 200
        assert client.get("/v1/qmatrices/bank").status_code == 200  # the wrappers are gone again
    assert calls == {"qmatrix_to_json": 0, "qmatrix_from_json": 0, "qmatrix_fingerprint": 0}, calls


def test_the_counter_does_see_the_request_path(tmp_path: Path) -> None:
    """The guard above is not vacuous: serializing on the request path would be counted."""
    with make_client(tmp_path, {"a": FakeEntity("a", 0.4)}) as client:
        with _counting([qmatrix_to_json]) as calls:
            assert client.get("/v1/qmatrices/example-prealgebra").status_code == 200
    assert calls["qmatrix_to_json"] >= 1
