"""Hostile inputs found by fuzzing and by hand (issue 20, item 6): each is a small 4xx naming the field, never a 500,
and oversized Q-matrices are refused while they are read, not after.

No wall-clock bounds (CI's machine may be busy): sizes of responses, lengths of error lists, and counts of the work
done (rows read, items built) stand for time and memory.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import qmatrix.io
from app.errors import MAX_ERRORS
from qmatrix import Item, QMatrix, QMatrixError
from qmatrix.io import qmatrix_from_csv_lines, qmatrix_from_json
from qmatrix.model import MAX_PROBLEMS, QMatrixTooLarge
from tests.conftest import make_client
from tests.factories import FakeEntity

SMALL_BODY = 20_000  # bytes: every refusal below fits in this, whatever the request's size


@pytest.fixture
def small_limits(tmp_path: Path) -> Iterator[TestClient]:
    """A server with small Q-matrix limits, so over-limit requests stay cheap to build in a test."""
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.4)}, max_qmatrix_items=50, max_qmatrix_concepts=20) as c:
        yield c


def _csv(n_items: int, n_concepts: int) -> str:
    header = "item_id,text," + ",".join(f"c{k}" for k in range(n_concepts))
    cells = (",".join("1" if k == i % n_concepts else "0" for k in range(n_concepts)) for i in range(n_items))
    rows = (f"i{i},,{row}" for i, row in enumerate(cells))
    return header + "\n" + "\n".join(rows) + "\n"


def _csv_post(client: TestClient, text: str, qid: str = "big"):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/qmatrices?id={qid}", content=text.encode(), headers={"content-type": "text/csv"})


def _messages(r) -> list[str]:  # type: ignore[no-untyped-def]
    return [d["msg"] for d in r.json()["detail"]]


# -- 1. integers that reach the database are bounded ----------------------------------------------------------------


@pytest.mark.parametrize("version", ["9223372036854775808", "9223372036854775807", str(2**31), "0", "-1", "1e3"])
def test_an_out_of_range_version_is_a_422_naming_it(client: TestClient, version: str) -> None:
    for qid in ("nosuch", "example-prealgebra"):
        r = client.get(f"/v1/qmatrices/{qid}?version={version}")
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["query", "version"]


def test_the_store_answers_none_for_a_version_outside_the_column(client: TestClient) -> None:
    store = client.app.state.gateway.qmatrices  # type: ignore[attr-defined]
    assert client.post("/v1/qmatrices?id=v", content=_csv(2, 2), headers={"content-type": "text/csv"}).status_code == 201
    tenant = "default"  # make_client's key
    assert store.get(tenant, "v", 1) is not None
    for version in (2**63, 2**31, 0, -(2**70)):
        assert store.get(tenant, "v", version) is None


def test_the_largest_version_is_looked_up(client: TestClient) -> None:
    assert client.get(f"/v1/qmatrices/nosuch?version={2**31 - 1}").status_code == 404
    assert client.get(f"/v1/qmatrices/example-prealgebra?version={2**31 - 1}").status_code == 404
    assert client.get("/v1/qmatrices/example-prealgebra?version=1").status_code == 200


# -- 2. dates at the calendar's edges ----------------------------------------------------------------------------------


def _policy(period: dict) -> dict:
    return {"period": period, "cap_epsilon": 100.0, "cap_delta": 1e-4, "default_mechanism": "laplace",
            "default_epsilon": 1.0, "sensitivity": "assessed", "allow_unnoised": False, "warning_fraction": 0.2}


@pytest.mark.parametrize("timezone", ["UTC", "America/New_York", "Asia/Tokyo", "Pacific/Kiritimati"])
def test_a_term_ending_on_the_calendars_last_day_is_accepted_and_reported(client: TestClient, timezone: str) -> None:
    terms = [{"start": "2020-01-01", "end": "2020-06-30"}, {"start": "9999-12-31", "end": "9999-12-31"}]
    r = client.put("/v1/admin/privacy-policy", json=_policy({"kind": "term", "timezone": timezone, "terms": terms}))
    assert r.status_code == 200, r.text
    assert client.get("/v1/admin/privacy-policy").json()["period"]["terms"] == terms
    budget = client.post("/v1/privacy/lookup", json={"student_id": "s1"})
    assert budget.status_code == 200, budget.text
    assert budget.json()["renews_at"].startswith(("9999-12-30", "9999-12-31"))  # the last term's start, in UTC


@pytest.mark.parametrize(("terms", "timezone", "named"), [
    ([{"start": "0001-01-01", "end": "0001-01-31"}], "Asia/Tokyo", "terms[0].start"),  # before year 1 in UTC
    ([{"start": "2026-01-01", "end": "2026-02-30"}], "UTC", "terms[0].end"),
    ([{"start": "2026-13-01", "end": "2026-12-31"}], "UTC", "terms[0].start"),
    ([{"start": "0000-01-01", "end": "0001-01-31"}], "UTC", "terms[0].start"),
    ([{"start": "2026-09-01", "end": "2026-12-18"}, {"start": "9999-12-31", "end": "9999-01-01"}], "UTC", "terms[1]"),
    ([{"start": "2026-09-01", "end": "2026-12-18"}], "zone.tab", "time zone"),  # a file of the tz database, not a zone
    ([{"start": "2026-09-01", "end": "2026-12-18"}], "../../etc/passwd", "time zone"),
    ([{"start": "2026-09-01", "end": "2026-12-18"}], "", "time zone"),
    ([{"start": "2026-09-01", "end": "2026-12-18"}], "America", "time zone"),
])
def test_impossible_terms_are_a_422_naming_the_field(
    client: TestClient, terms: list, timezone: str, named: str
) -> None:
    r = client.put("/v1/admin/privacy-policy", json=_policy({"kind": "term", "timezone": timezone, "terms": terms}))
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", "period"] and named in r.text


@pytest.mark.parametrize("kind", ["day", "week"])
@pytest.mark.parametrize("timezone", ["zone.tab", "Etc/../UTC", "x" * 64, "UTC\u0000"])
def test_a_calendar_period_in_an_unknown_zone_is_a_422(client: TestClient, kind: str, timezone: str) -> None:
    r = client.put("/v1/admin/privacy-policy", json=_policy({"kind": kind, "timezone": timezone}))
    assert r.status_code == 422, r.text


# -- 3. error lists are capped -----------------------------------------------------------------------------------------


def _assert_capped(r, total_problems: int) -> None:  # type: ignore[no-untyped-def]
    assert r.status_code == 422, r.text[:500]
    assert len(r.content) < SMALL_BODY, len(r.content)
    messages = _messages(r)
    assert len(messages) == MAX_PROBLEMS + 1
    assert messages[-1] == f"… and {total_problems - MAX_PROBLEMS} more problems"


def test_duplicate_concepts_in_an_inline_qmatrix_get_a_capped_422(client: TestClient) -> None:
    # The case at a smaller scale: 190,000 duplicate names in a 1 MiB body answered 17.5 MB.
    n = 400  # under the 500-concept limit: every name is checked, the list capped
    qm = {"id": "dup", "concepts": ["a"] * n, "items": [{"id": "i1", "concepts": ["a"]}]}
    r = client.post("/v1/diagnose", json={"student_id": "s1", "qmatrix": qm,
                                           "responses": [{"item_id": "i1", "correct": True}]})
    _assert_capped(r, n - 1)
    assert r.json()["detail"][0]["loc"] == ["body", "qmatrix"]
    # Past the limit the count alone refuses it: one message, whatever the names
    qm["concepts"] = ["a"] * 20_000
    r = client.post("/v1/diagnose", json={"student_id": "s1", "qmatrix": qm,
                                           "responses": [{"item_id": "i1", "correct": True}]})
    assert r.status_code == 422 and _messages(r) == ["concepts: 20000 concepts; at most 500 per Q-matrix"]


def test_duplicate_concepts_in_a_registration_get_a_capped_422(client: TestClient) -> None:
    n = 400  # under the 500-concept limit: every name is checked
    qm = {"id": "dup", "concepts": ["a"] * n, "items": [{"id": "i1", "concepts": ["a"]}]}
    _assert_capped(client.post("/v1/qmatrices", json=qm), n - 1)
    text = "item_id,text," + ",".join(["a"] * n) + "\ni1,," + ",".join(["1"] * n) + "\n"
    _assert_capped(_csv_post(client, text, "dup"), n)  # and item i1 lists 'a' twice


def test_bad_cells_in_a_csv_get_a_capped_422(client: TestClient) -> None:
    text = _csv(2000, 5).replace(",0", ",x")  # four bad cells per row
    _assert_capped(_csv_post(client, text), 4 * 2000)


def test_bad_rows_in_a_json_qmatrix_get_a_capped_422(client: TestClient) -> None:
    items = [{"id": f"i{k}", "concepts": []} for k in range(5000)]  # every item assesses no concept
    r = client.post("/v1/qmatrices", json={"id": "empty-rows", "concepts": ["a"], "items": items})
    _assert_capped(r, 5000 + 1)  # and concept 'a' is used by no item


def test_schema_errors_are_capped_too(client: TestClient) -> None:
    # Pydantic lists one error per bad value: 5,000 bad responses made a 10,000-entry 422. The response list
    # now stops at its first bad entry (FailFast), and the cap bounds what is left.
    body = {"student_id": "s1", "qmatrix_id": "example-prealgebra", "responses": [{"item_id": "", "correct": 2}] * 5000}
    r = client.post("/v1/diagnose", json=body)
    assert r.status_code == 422 and len(r.content) < SMALL_BODY
    detail = r.json()["detail"]
    assert 1 <= len(detail) <= MAX_ERRORS + 1
    assert {tuple(d["loc"][:3]) for d in detail} == {("body", "responses", 0)}
    # Errors spread over many fields (no list to stop early) are capped: the first MAX_ERRORS, then a count
    body = {"student_id": "", "qmatrix_id": "", "responses": [{"item_id": "q01", "correct": True}],
            **{f"extra{k}": k for k in range(200)}}
    detail = client.post("/v1/diagnose", json=body).json()["detail"]
    assert len(detail) == MAX_ERRORS + 1 and detail[-1]["type"] == "too_many_errors"


@pytest.mark.parametrize("path", ["/v1/qmatrices", "/v1/diagnose"])
def test_a_qmatrix_list_stops_at_its_first_bad_element(client: TestClient, path: str) -> None:
    # 4 million empty names in a 16 MiB body made 4 million errors (2 GB in pydantic, 6.7 GB to list them).
    qm = {"id": "empty", "concepts": ["a", *[""] * 400], "items": [{"id": "i1", "concepts": ["a", *[""] * 400]}] * 3}
    body = qm if path == "/v1/qmatrices" else {"student_id": "s1", "qmatrix": qm, "responses": []}
    r = client.post(path, json=body)
    assert r.status_code == 422 and len(r.content) < SMALL_BODY
    prefix = ["body"] if path == "/v1/qmatrices" else ["body", "qmatrix"]
    locs = [d["loc"] for d in r.json()["detail"] if d["loc"][:len(prefix)] == prefix]
    assert locs == [[*prefix, "concepts", 1], [*prefix, "items", 0, "concepts", 1]]  # one per list, not 1,601


def test_an_over_long_list_is_one_error_with_a_short_echo(client: TestClient) -> None:
    qm = {"id": "empty", "concepts": ["x" * 200] * 50_000, "items": [{"id": "i1", "concepts": ["a"]}]}
    r = client.post("/v1/qmatrices", json=qm)  # 10 MB of names, past the 500-concept limit
    assert r.status_code == 422 and len(r.content) < SMALL_BODY
    [error] = r.json()["detail"]
    assert error["loc"] == ["body", "concepts"] and error["type"] == "too_long" and len(error["input"]) <= 201


def test_long_names_are_shortened_in_messages(client: TestClient) -> None:
    name = "n" * 100_000  # under csv.field_size_limit(): a legal cell
    text = f"item_id,text,{name},{name}\ni1,,1,x\n"
    r = _csv_post(client, text, "long")
    assert r.status_code == 422 and len(r.content) < SMALL_BODY


def test_qmatrix_errors_list_the_first_problems_and_count_the_rest() -> None:
    with pytest.raises(QMatrixError) as err:
        QMatrix(id="q", concepts=("a",) * 100_000, items=(Item(id="i", concepts=("a",)),))
    assert len(err.value.problems) == MAX_PROBLEMS + 1 and err.value.more == 100_000 - 1 - MAX_PROBLEMS
    assert str(err.value).endswith(f"… and {100_000 - 1 - MAX_PROBLEMS} more problems")


# -- 4. limits are checked while parsing ----------------------------------------------------------------------------


class CountingLines:
    """CSV lines made on demand (a million rows are never in memory), counting how many the parser took."""

    def __init__(self, n_rows: int, n_concepts: int = 3) -> None:
        self.n_rows, self.n_concepts, self.taken = n_rows, n_concepts, 0

    def __iter__(self) -> Iterator[str]:
        self.taken = 1
        yield "item_id,text," + ",".join(f"c{k}" for k in range(self.n_concepts)) + "\n"
        for i in range(self.n_rows):
            self.taken += 1
            yield f"i{i},,1" + ",0" * (self.n_concepts - 1) + "\n"


def test_the_csv_parser_stops_at_the_first_row_past_the_item_limit() -> None:
    lines = CountingLines(1_000_000)
    with pytest.raises(QMatrixTooLarge, match=r"more than 100 items \(reading stopped at row 101\)"):
        qmatrix_from_csv_lines(lines, id="big", max_items=100)
    assert lines.taken == 1 + 101  # the header and one row past the limit, not a million


def test_the_csv_parser_refuses_a_wide_header_before_reading_rows() -> None:
    lines = CountingLines(1_000_000, n_concepts=10_000)
    with pytest.raises(QMatrixTooLarge, match="more than 500 concepts"):
        qmatrix_from_csv_lines(lines, id="wide", max_concepts=500)
    assert lines.taken == 1


@pytest.fixture
def items_built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many Q-matrix items the parser has built (one counter, read as ``items_built[0]``)."""
    built = [0]

    class CountedItem(Item):
        def __init__(self, *args: object, **kwargs: object) -> None:
            built[0] += 1
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(qmatrix.io, "Item", CountedItem)
    return built


def test_the_json_form_checks_its_size_before_building_items(items_built: list[int]) -> None:
    data = {"id": "big", "concepts": ["a"], "items": [{"id": f"i{k}", "concepts": ["a"]} for k in range(10_000)]}
    with pytest.raises(QMatrixTooLarge, match="items: 10000 items; at most 100"):
        qmatrix_from_json(data, max_items=100)
    data = {"id": "wide", "concepts": [f"c{k}" for k in range(1000)], "items": [{"id": "i", "concepts": ["c0"]}]}
    with pytest.raises(QMatrixTooLarge, match="concepts: 1000 concepts; at most 500"):
        qmatrix_from_json(data, max_concepts=500)
    assert items_built[0] == 0
    small = {"id": "ok", "concepts": ["a"], "items": [{"id": "i", "concepts": ["a"]}]}
    assert len(qmatrix_from_json(small, max_items=1, max_concepts=1).items) == 1 and items_built[0] > 0  # within: built


@pytest.mark.parametrize("upload", ["text/csv", "multipart"])
def test_an_oversized_csv_upload_is_refused_at_the_first_row_past_the_limit(
    small_limits: TestClient, upload: str
) -> None:
    text = _csv(20_000, 3)  # 400 times the limit: a full parse would read every row
    if upload == "text/csv":
        r = _csv_post(small_limits, text)
        loc = ["body"]
    else:
        r = small_limits.post("/v1/qmatrices", files={"file": ("big.csv", text.encode(), "text/csv")})
        loc = ["body", "file"]
    assert r.status_code == 422 and len(r.content) < SMALL_BODY
    assert r.json()["detail"] == [{"loc": loc, "type": "value_error", "msg":
                                   "items: more than 50 items (reading stopped at row 51); at most 50 per Q-matrix"}]


def test_an_oversized_csv_header_is_refused_before_its_rows(small_limits: TestClient) -> None:
    r = _csv_post(small_limits, _csv(10, 1000))
    assert r.status_code == 422
    assert _messages(r) == ["concepts: more than 20 concepts (the header has 1000 concept columns); at most 20 per "
                            "Q-matrix"]


def test_an_oversized_json_registration_is_one_error_naming_the_list(small_limits: TestClient) -> None:
    items = [{"id": f"i{k}", "concepts": ["a"]} for k in range(20_000)]
    r = small_limits.post("/v1/qmatrices", json={"id": "big", "concepts": ["a"], "items": items})
    assert r.status_code == 422 and len(r.content) < SMALL_BODY
    detail = r.json()["detail"]
    assert len(detail) == 1 and detail[0]["loc"] == ["body", "items"] and detail[0]["type"] == "too_long"
    r = small_limits.put("/v1/qmatrices/big", json={"id": "big", "concepts": [f"c{k}" for k in range(5000)],
                                                    "items": [{"id": "i", "concepts": ["c0"]}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "concepts"]


def test_an_oversized_inline_qmatrix_is_refused(small_limits: TestClient) -> None:
    qm = {"id": "big", "concepts": ["a"], "items": [{"id": f"i{k}", "concepts": ["a"]} for k in range(500)]}
    r = small_limits.post("/v1/diagnose", json={"student_id": "s1", "qmatrix": qm,
                                                 "responses": [{"item_id": "i1", "correct": True}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "qmatrix"]
    assert "at most 50" in r.text


def test_limits_still_accept_a_qmatrix_at_the_limit(small_limits: TestClient) -> None:
    r = _csv_post(small_limits, _csv(50, 20), "at-limit")
    assert r.status_code == 201, r.text
    assert r.json()["n_items"] == 50 and r.json()["n_concepts"] == 20
    text = "\ufeff" + _csv(3, 2).replace("i1,", "i\u00e9,")  # BOM and non-ASCII: decoded while read
    r = _csv_post(small_limits, text, "bom")
    assert r.status_code == 201, r.text
    assert "i\u00e9" in [i["id"] for i in small_limits.get("/v1/qmatrices/bom").json()["items"]]


def test_csv_rows_are_read_as_before() -> None:
    text = _csv(5, 3)
    q = qmatrix_from_csv_lines(io.StringIO(text, newline=""), id="q", max_items=5, max_concepts=3)
    assert [list(r) for r in q.matrix] == [[int(x) for x in row[2:]] for row in list(csv.reader(io.StringIO(text)))[1:]]
    assert json.loads(json.dumps(qmatrix.io.qmatrix_to_json(q)))["id"] == "q"


def test_an_inline_qmatrix_is_size_checked_before_its_items_are_built(
    small_limits: TestClient, items_built: list[int]
) -> None:
    qm = {"id": "big", "concepts": ["a"], "items": [{"id": f"i{k}", "concepts": ["a"]} for k in range(500)]}
    r = small_limits.post("/v1/diagnose", json={"student_id": "s1", "qmatrix": qm,
                                                 "responses": [{"item_id": "i1", "correct": True}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "qmatrix"]
    assert items_built[0] == 0


@pytest.mark.parametrize("path,key", [("/v1/diagnose", "responses"), ("/v1/diagnose/batch", "students")])
def test_a_long_list_of_bad_entries_stops_at_the_first(client: TestClient, path: str, key: str) -> None:
    bad = [{"item_id": "", "correct": "yes"}] * 38_000
    body = {"qmatrix_id": "example-prealgebra", "responses": bad, "student_id": "s"} if key == "responses" else \
        {"qmatrix_id": "example-prealgebra", "students": [{"student_id": "s", "responses": bad[:10]}] * 3000}
    r = client.post(path, json=body)
    assert r.status_code in (413, 422) and len(r.content) < SMALL_BODY, (r.status_code, len(r.content))
    if r.status_code == 422:
        assert len(r.json()["detail"]) <= MAX_ERRORS + 1


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_dataset_seed_outside_numpys_range_is_a_422(client: TestClient, seed: int) -> None:
    r = client.post("/v1/calibrate", json={"qmatrix_id": "example-prealgebra",
                                           "dataset": {"name": "synthetic", "seed": seed}})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][-1] == "seed"


def test_a_csv_item_assessing_more_concepts_than_one_item_may_is_refused_not_stored(tmp_path: Path) -> None:
    # Prepare: a server allowing 600 concepts; one item tagged with 501 of them (a stored one could not be shown
    # again: the Q-matrix's JSON form allows 500 per item, so every GET of it was a 500)
    header = "item_id,text," + ",".join(f"c{k}" for k in range(501))
    text = header + "\ni0,," + ",".join(["1"] * 501) + "\ni1,," + ",".join(["1"] + ["0"] * 500) + "\n"
    with make_client(tmp_path, {"alpha": FakeEntity("alpha", 0.4)}, max_qmatrix_concepts=600) as client:
        # Execute
        r = _csv_post(client, text, qid="crowded")

        # Assert
        assert r.status_code == 422 and "more than 500 concepts: i0" in r.text, r.text
        assert client.get("/v1/qmatrices/crowded").status_code == 404
