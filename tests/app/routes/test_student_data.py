"""Student data rights (issue 22): ids stored only as keyed hashes, export, erasure that never resets a budget.

One student goes through a diagnosis (and its repeat), a calibration on inline records and a training upload whose
validation part holds them, on SQLite and on PostgreSQL. Then: no table, file or cache entry holds a byte of their
id; the export lists the diagnosis and each charge; erasure removes the diagnosis, the job inputs and results and
the cached answers made from their responses, keeps the spend, and a new diagnosis of the same id counts it.
Waits are bounded polls; nothing asserts time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect, text

from app import Settings, create_app
from app.pseudonyms import Pseudonyms, cache_tag
from app.jobs.training import _split
from privacy import ReleaseCost
from qmatrix import StudentResponses, qmatrix_from_json, simulate_dina
from qmatrix.responses import write_responses_csv
from tests.conftest import auth_headers
from tests.app.waiting import finished_job

STUDENT = "kid-Zq7Xw-4411"  # distinctive: a byte scan cannot find it by accident
NEEDLE = STUDENT.encode()
BANK = {
    "id": "geometry", "concepts": ["area", "pythagoras", "angles"],
    "items": [{"id": f"g{k}", "concepts": c} for k, c in enumerate(
        [["area"], ["pythagoras"], ["angles"], ["area", "angles"], ["pythagoras", "angles"], ["area"], ["pythagoras"],
         ["angles"], ["area", "pythagoras"], ["angles"]])],
}
RESPONSES = [{"item_id": "g0", "correct": True}, {"item_id": "g1", "correct": False}, {"item_id": "g2", "correct": True}]
ENTITIES = [
    {"name": "sim:confident", "kind": "simulated", "simulated_style": "confident"},  # a cached kind
]


def student_app(tmp_path: Path, **extra: object) -> TestClient:
    settings = Settings(  # type: ignore[arg-type]
        state_dir=tmp_path / "state", preload_models=False, default_calibration=False, train_default_model=False,
        entities=[*ENTITIES, {"name": "local-fed", "kind": "local_fed", "model": "federated-cdm",
                              "model_path": str(tmp_path / "registry")}],
        privacy_period="lifetime", privacy_cap_epsilon=1e4, train_rounds=2, train_min_students=30,
        calibration_release_epsilon=1.0, calibration_min_answers=1, noise_seed=1, **extra,
    )
    return TestClient(create_app(settings))


@pytest.fixture
def platform(tmp_path: Path, both_engines: str) -> Iterator[tuple[TestClient, dict[str, str], dict[str, str], str]]:
    """The app, an admin of tenant 'platform' (with the geometry bank), one of tenant 'other', the database URL."""
    with student_app(tmp_path) as client:
        admin, other = auth_headers(client.app, tenant="platform"), auth_headers(client.app, tenant="other")
        assert client.post("/v1/qmatrices", json=BANK, headers=admin).status_code == 201
        yield client, admin, other, client.app.state.gateway.settings.db_url


def diagnose(client: TestClient, headers: dict[str, str], student: str = STUDENT) -> dict:
    r = client.post("/v1/diagnose", headers=headers, json={
        "student_id": student, "qmatrix_id": "geometry", "epsilon": 1.0, "responses": RESPONSES})
    assert r.status_code == 200, r.text
    return r.json()


def scan_database(url: str, needle: bytes) -> list[str]:
    """Every table's every text (or binary) column, on SQLite or PostgreSQL: where ``needle`` occurs."""
    engine = create_engine(url)
    hits = []
    try:
        with engine.connect() as conn:
            for table in inspect(conn).get_table_names():
                for row in conn.execute(text(f'SELECT * FROM "{table}"')).mappings():
                    for column, value in row.items():
                        data = value.encode() if isinstance(value, str) else bytes(value) if isinstance(
                            value, bytes | memoryview) else None
                        if data is not None and needle in data:
                            hits.append(f"{table}.{column}")
    finally:
        engine.dispose()
    return hits


def query(url: str, sql: str, **params: object) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql), params)]
    finally:
        engine.dispose()


def scan_files(folder: Path, needle: bytes) -> list[str]:
    """Every file under ``folder`` (the SQLite database and its WAL, uploads, models, secrets) holding ``needle``."""
    return [str(p) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def memory_cache(client: TestClient):  # type: ignore[no-untyped-def]
    return client.app.state.gateway.federation.cache.store


def upload_with_student(tmp_path: Path) -> bytes:
    """150 SIMULATED students, the one at a validation position of the train job's split named STUDENT."""
    students = list(simulate_dina(qmatrix_from_json(BANK), n_students=150, seed=5).students)
    validation, _ = _split(list(range(150)), 0.2, 50, seed=0)  # type: ignore[arg-type]  # positions, same draw
    students = [s.model_copy(update={"student_id": f"up-{n:03d}"}) for n, s in enumerate(students)]
    students[validation[0]] = StudentResponses(student_id=STUDENT, responses=students[validation[0]].responses)
    path = tmp_path / "input" / "history.csv"
    path.parent.mkdir()
    write_responses_csv(path, students)
    return path.read_bytes()


def test_erasure_leaves_no_trace_of_the_id_keeps_the_spend_and_export_lists_each_charge(platform, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    client, admin, other, url = platform
    key = Pseudonyms.from_settings(client.app.state.gateway.settings).key("platform", STUDENT)

    # A diagnosis (and its repeat: the stored answer, echoed with the caller's id), a calibration, a training upload
    first = diagnose(client, admin)
    repeat = diagnose(client, admin)
    assert first["student_id"] == repeat["student_id"] == STUDENT and repeat["budget"]["repeat"]
    records = [{"student_id": STUDENT, "responses": RESPONSES}] + [
        {"student_id": f"peer-{n}", "responses": RESPONSES[: 1 + n % 3]} for n in range(4)]
    r = client.post("/v1/calibrate", headers=admin, json={"qmatrix_id": "geometry", "records": records})
    assert r.status_code == 202, r.text
    calibration_job = r.json()["job_id"]
    assert finished_job(client, calibration_job, headers=admin)["status"] == "succeeded"
    r = client.post("/v1/qmatrices/geometry/train", headers=admin,
                    files={"responses": ("history.csv", upload_with_student(tmp_path), "text/csv")})
    assert r.status_code == 202, r.text
    train = finished_job(client, r.json()["job_id"], headers=admin)
    assert train["status"] == "succeeded", train
    assert finished_job(client, train["metrics"]["calibration_job_id"], headers=admin)["status"] == "succeeded"

    # Nothing stored names the student: not a table, not a file, not the cache
    assert scan_database(url, NEEDLE) == []
    assert scan_files(tmp_path / "state", NEEDLE) == [] and scan_files(tmp_path / "registry", NEEDLE) == []
    store = memory_cache(client)
    assert not any(NEEDLE in k.encode() or NEEDLE in v.encode() for k, (_, v) in store._entries.items())
    tagged = set(store._tags[cache_tag("platform", key)][1])
    assert tagged and tagged <= set(store._entries)

    # Export before erasure: the diagnosis as it was returned, each charge (when, source, ε), the jobs' inputs
    export = client.get(f"/v1/students/{STUDENT}/export", headers=admin).json()
    assert export["student_id"] == STUDENT and export["student_key"] == key
    assert [d["diagnosis"]["mastery"] for d in export["diagnoses"]] == [first["mastery"]]
    assert export["diagnoses"][0]["diagnosis"]["student_id"] == STUDENT
    sources = sorted(c["source"] for c in export["charges"])
    assert sources == ["calibration", "calibration", "diagnosis"], export["charges"]
    for charge in export["charges"]:
        assert charge["created_at"].endswith("Z") and charge["epsilon"] == 1.0 and charge["status"] == "released"
    spent = sum(c["epsilon_total"] for c in export["charges"])
    assert export["budget"]["lifetime_epsilon"] == pytest.approx(spent)
    jobs = {j["job_id"]: j for j in export["jobs"]}
    assert set(jobs) == {calibration_job, train["metrics"]["calibration_job_id"]}
    assert jobs[calibration_job]["records"][0]["responses"][0]["item_id"] == "g0" and jobs[calibration_job]["results"]
    assert export["cache_entries"] == len(tagged)

    # Another tenant's admin sees nothing of this student, and erases nothing of it
    theirs = client.get(f"/v1/students/{STUDENT}/export", headers=other).json()
    assert theirs["charges"] == theirs["diagnoses"] == theirs["jobs"] == [] and theirs["budget"]["queries"] == 0
    nothing = client.delete(f"/v1/students/{STUDENT}", headers=other).json()
    assert set(nothing["removed"].values()) == {0}
    assert len(client.get(f"/v1/students/{STUDENT}/export", headers=admin).json()["diagnoses"]) == 1

    # Erasure: what was removed, and what is kept and why
    erased = client.delete(f"/v1/students/{STUDENT}", headers=admin)
    assert erased.status_code == 200, erased.text
    report = erased.json()
    assert report["removed"]["diagnoses"] == 1 and report["removed"]["job_inputs"] == 2
    assert report["removed"]["job_results"] == 2 and report["removed"]["cache_entries"] == len(tagged)
    kept = {k["what"]: k for k in report["kept"]}
    assert kept["privacy_charges"]["count"] == 3 and "never resets" in kept["privacy_charges"]["why"]

    # After: still no byte of the id anywhere; the key remains only where the spend is kept
    assert scan_database(url, NEEDLE) == [] and scan_files(tmp_path / "state", NEEDLE) == []
    assert {t.split(".")[0] for t in scan_database(url, key.encode())} == {"privacy_charges", "privacy_students"}
    assert not set(store._entries) & tagged and cache_tag("platform", key) not in store._tags
    rows = query(url, "SELECT source, answer_json, fingerprint FROM privacy_charges WHERE student_id = :k ORDER BY seq",
                 k=key)
    # The diagnosis and every fingerprint gone; a calibration's name stays (it says which release spent the ε)
    assert [(s, a if a is None else a.split()[0], f) for s, a, f in rows] == [
        ("diagnosis", None, None), ("calibration", "calibration", None), ("calibration", "calibration", None)]
    after = client.get(f"/v1/students/{STUDENT}/export", headers=admin).json()
    assert after["diagnoses"] == after["jobs"] == [] and after["cache_entries"] == 0
    assert [c["id"] for c in after["charges"]] == [c["id"] for c in export["charges"]]
    assert not any(c["diagnosis_stored"] for c in after["charges"])
    assert [c["release"] for c in after["charges"]] == [c["release"] for c in export["charges"]]

    # The budget was not reset: the same request again is a new, paid query counted on top of the earlier spend
    again = diagnose(client, admin)
    assert not again["budget"]["repeat"] and again["student_id"] == STUDENT
    assert again["budget"]["lifetime_epsilon"] == pytest.approx(spent + again["budget"]["charged_epsilon"])
    lookup = client.post("/v1/privacy/lookup", headers=admin, json={"student_id": STUDENT}).json()
    assert lookup["student_id"] == STUDENT and lookup["queries"] == 4


def test_export_and_erasure_need_an_admin_key(tmp_path: Path) -> None:
    with student_app(tmp_path) as client:
        client_key = auth_headers(client.app, tenant="platform", role="client")
        assert client.get(f"/v1/students/{STUDENT}/export", headers=client_key).status_code == 403
        assert client.delete(f"/v1/students/{STUDENT}", headers=client_key).status_code == 403
        assert client.delete(f"/v1/students/{STUDENT}").status_code == 401


def test_erasure_waits_for_work_that_holds_the_student(tmp_path: Path) -> None:
    """409 while a diagnosis of the student is in flight or a running job holds them: erasing under it would let
    it store what was just erased. Once they end, erasure goes through."""
    from app.db import JobRow

    with student_app(tmp_path) as client:
        admin = auth_headers(client.app, tenant="platform")
        client.post("/v1/qmatrices", json=BANK, headers=admin)
        diagnose(client, admin)
        gateway = client.app.state.gateway
        key = gateway.pseudonyms.key("platform", STUDENT)
        cost = ReleaseCost(epsilon=1.0, delta=0.0, mechanism="laplace")
        pending = gateway.ledger.charge(tenant="platform", student=key, cost=cost)
        r = client.delete(f"/v1/students/{STUDENT}", headers=admin)
        assert r.status_code == 409 and "being answered" in r.text
        gateway.ledger.refund(pending.id)
        request = {"qmatrix_id": "geometry", "records": [{"student_id": key, "responses": RESPONSES}]}
        with gateway.database.sessions.begin() as session:  # running in this (live) worker, heartbeat fresh
            session.add(JobRow(id="busy", tenant="platform", kind="calibrate", status="running",
                               request_json=json.dumps(request), claimed_by=gateway.workers.id,
                               heartbeat_at=time.time()))
        r = client.delete(f"/v1/students/{STUDENT}", headers=admin)
        assert r.status_code == 409 and "job busy" in r.text
        assert len(client.get(f"/v1/students/{STUDENT}/export", headers=admin).json()["diagnoses"]) == 1  # untouched
        with gateway.database.sessions.begin() as session:
            session.get(JobRow, "busy").status = "succeeded"
        r = client.delete(f"/v1/students/{STUDENT}", headers=admin)
        assert r.status_code == 200 and r.json()["removed"]["diagnoses"] == 1 and r.json()["removed"]["job_inputs"] == 1


def test_the_cli_exports_and_erases_on_the_servers_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    with student_app(tmp_path) as client:
        admin = auth_headers(client.app, tenant="platform")
        client.post("/v1/qmatrices", json=BANK, headers=admin)
        first = diagnose(client, admin)
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path / "state"))
    runner = CliRunner()
    export = runner.invoke(cli, ["students", "export", STUDENT, "--tenant", "platform"])
    assert export.exit_code == 0, export.output
    body = json.loads(export.output)
    assert [d["diagnosis"]["mastery"] for d in body["diagnoses"]] == [first["mastery"]]
    assert [c["source"] for c in body["charges"]] == ["diagnosis"]
    erased = runner.invoke(cli, ["students", "erase", STUDENT, "--tenant", "platform", "--json"])
    assert erased.exit_code == 0, erased.output
    report = json.loads(erased.output)
    assert report["removed"]["diagnoses"] == 1 and any(k["what"] == "privacy_charges" for k in report["kept"])
    again = json.loads(runner.invoke(cli, ["students", "export", STUDENT, "--tenant", "platform"]).output)
    assert again["diagnoses"] == [] and len(again["charges"]) == 1
    assert "kept: privacy_charges" in runner.invoke(cli, ["students", "erase", STUDENT, "--tenant", "platform"]).output


def test_migration_0004_turns_stored_ids_into_keyed_hashes(
    tmp_path: Path, both_engines: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows stored by an earlier version, converted in place under the server's secret; without one, refused and
    unchanged."""
    from app.migrate import head_revision, schema_revision, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}" if both_engines == "sqlite" else both_engines
    engine = create_engine(url)
    upgrade(engine, "0003_usage")
    answer = json.dumps({"student_id": STUDENT, "mastery": {"area": 0.5}})
    request = json.dumps({"qmatrix_id": "geometry", "records": [{"student_id": STUDENT, "responses": RESPONSES}]})
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO privacy_students VALUES ('t', :s, '{}', 2, 0)"), {"s": STUDENT})
        for n, (stored, mechanism) in enumerate([(answer, "piecewise"), ("calibration cal-1", "laplace")]):
            conn.execute(text(
                "INSERT INTO privacy_charges (id, tenant, student_id, fingerprint, epsilon, delta, mechanism, releases, "
                "status, answer_json, created_at) VALUES (:id, 't', :s, 'f', 1, 0, :m, 1, 'released', :a, 0)"),
                {"id": f"c{n}", "s": STUDENT, "m": mechanism, "a": stored})
        conn.execute(text("INSERT INTO jobs (id, tenant, kind, status, request_json, total, done, failed_entities_json, "
                          "metrics_json, notes_json, resumed, created_at, updated_at) VALUES ('j', 't', 'calibrate', "
                          "'succeeded', :r, 1, 1, '{}', '{}', '[]', 0, '', '')"), {"r": request})
    monkeypatch.setenv("FEDCD_STATE_DIR", str(tmp_path / "no-secret-here"))
    with pytest.raises(RuntimeError, match="needs the server's secret"):
        upgrade(engine)
    assert schema_revision(engine) == "0003_usage" and scan_database(url, NEEDLE)  # refused, unchanged

    secret = b"s" * 32
    upgrade(engine, server_secret=secret)
    key = Pseudonyms(secret).key("t", STUDENT)
    assert schema_revision(engine) == head_revision() and scan_database(url, NEEDLE) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT student_id FROM privacy_students")).scalar() == key
        rows = conn.execute(text("SELECT student_id, source, answer_json FROM privacy_charges ORDER BY id")).all()
        stored = conn.execute(text("SELECT request_json FROM jobs")).scalar()
    engine.dispose()
    assert [(r[0], r[1]) for r in rows] == [(key, "diagnosis"), (key, "calibration")]
    assert json.loads(rows[0][2]) == {"student_id": key, "mastery": {"area": 0.5}} and rows[1][2] == "calibration cal-1"
    assert json.loads(stored)["records"][0]["student_id"] == key


async def test_memory_cache_tags_forget_their_entries_and_expire_with_them() -> None:
    from providers.cache import MemoryCacheStore

    now = [0.0]
    store = MemoryCacheStore(max_entries=10, ttl_s=60.0, clock=lambda: now[0])
    await store.put("a", "1")
    await store.put("b", "2")
    await store.tag("t:s1", "a")
    await store.tag("t:s2", "a")  # an entry two students' identical responses share: either erasure drops it
    await store.tag("t:s2", "b")
    assert await store.tagged("t:s2") == 2
    assert await store.forget("t:s1") == 1 and await store.get("a") is None and await store.get("b") == "2"
    now[0] = 61.0
    await store.tag("t:s3", "b")  # touching the store drops tags whose entries have all expired
    assert "t:s2" not in store._tags and await store.tagged("t:s3") == 1


async def test_redis_cache_tags_forget_their_entries(redis_prefix: str) -> None:
    from providers.cache_redis import RedisCacheStore
    from tests.shared_redis import REDIS_URL

    store = RedisCacheStore(REDIS_URL, prefix=redis_prefix, max_entries=10, ttl_s=60.0)
    try:
        await store.put("a", "1")
        await store.put("b", "2")
        await store.tag("t:s1", "a")
        assert await store.tagged("t:s1") == 1
        assert await store.forget("t:s1") == 1
        assert await store.get("a") is None and await store.get("b") == "2" and await store.size() == 1
        assert await store.tagged("t:s1") == 0 and await store.forget("t:s1") == 0
    finally:
        await store.aclose()


def test_the_key_comes_from_the_shared_secret_or_a_0600_file_and_differs_per_tenant(tmp_path: Path) -> None:
    from app.pseudonyms import existing_server_secret

    shared = [Settings(state_dir=tmp_path / f"host{n}", secret_key="k" * 32) for n in (1, 2)]  # type: ignore[arg-type]
    keys = [Pseudonyms.from_settings(s).key("platform", STUDENT) for s in shared]
    assert keys[0] == keys[1] and len(keys[0]) == 64 and STUDENT not in keys[0]  # every host finds the same rows
    own = Settings(state_dir=tmp_path / "alone")
    assert existing_server_secret(own) is None  # never invented by a migration
    pseudonyms = Pseudonyms.from_settings(own)
    assert (tmp_path / "alone" / "server-secret").stat().st_mode & 0o777 == 0o600
    assert existing_server_secret(own) == pseudonyms.secret and pseudonyms.key("platform", STUDENT) != keys[0]
    assert pseudonyms.key("other", STUDENT) != pseudonyms.key("platform", STUDENT)
