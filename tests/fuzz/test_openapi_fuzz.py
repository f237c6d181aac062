"""Schemathesis over every operation of the OpenAPI spec, every check, a fixed seed (tests/fuzz/schemathesis.toml).

The app runs in-process with SIMULATED entities and an admin key; the fuzzer sends schema-valid and
schema-violating requests and checks: no server error, every status code documented, every response
valid against its schema, valid data accepted, invalid data rejected, 405s with correct Allow headers…
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import schemathesis
from schemathesis.config import SchemathesisConfig

from app import Settings, create_app
from providers.simulated import SimulatedEntity
from tests.factories import FakeEntity

CONFIG = Path(__file__).with_name("schemathesis.toml")
# A longer run with another seed (docs/results/fuzz/README.md), without changing what `make test` runs:
#   FEDCD_FUZZ_SEED=<n> FEDCD_FUZZ_MAX_EXAMPLES=<n per operation> pytest tests/fuzz -p no:cacheprovider
_SEED, _MAX_EXAMPLES = os.environ.get("FEDCD_FUZZ_SEED"), os.environ.get("FEDCD_FUZZ_MAX_EXAMPLES")
_state = Path(tempfile.mkdtemp(prefix="fedcd-fuzz-"))
_settings = Settings(
    state_dir=_state, data_dir=_state / "no-datasets", entities=[], preload_models=False, default_calibration=False,
    noise_seed=1, privacy_cap_epsilon=1e6, allow_unnoised=True, calibration_release_epsilon=None,
    # Small limits (they are settings, and the spec states them): the fuzzer probes each bound and one past it
    # without building 50 MB bodies; the defaults are exercised by tests/app/routes/test_heavy_requests.py.
    max_responses_per_student=40, max_batch_size=8, max_calibration_records=20, max_qmatrix_items=60,
    max_qmatrix_concepts=20, max_body_bytes=64 * 1024, max_qmatrix_body_bytes=256 * 1024,
)
# Two test entities that answer every task, and a SIMULATED one that refuses to tag items (a partial failure).
app = create_app(_settings, entities={
    "sim:alpha": FakeEntity("sim:alpha", 0.3), "sim:beta": FakeEntity("sim:beta", 0.7),
    "sim:specialist": SimulatedEntity("specialist"),
})
_key = app.state.gateway.keys.create(tenant="fuzz", role="admin").api_key
SERVER_ERRORS: Counter[str] = Counter()  # every 5xx but 503 the app sent, shrinking and replays included


def _counting_server_errors(asgi: Any) -> Any:
    """The app, counting its 5xx answers as they are sent (a failed check stops counting in the test body)."""
    async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def send_counted(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 500 and message["status"] != 503:
                SERVER_ERRORS[f"{scope.get('method')} {scope.get('path')} {message['status']}"] += 1
            await send(message)
        await asgi(scope, receive, send_counted)
    return counted


def _config_text() -> str:
    text = CONFIG.read_text().replace("${FEDCD_FUZZ_KEY}", _key)
    if _SEED is not None:
        text = re.sub(r"(?m)^seed = .*$", f"seed = {int(_SEED)}", text)
    if _MAX_EXAMPLES is not None:
        text = re.sub(r"(?m)^max-examples = .*$", f"max-examples = {int(_MAX_EXAMPLES)}", text)
    return text


schema = schemathesis.openapi.from_asgi(
    "/openapi.json", _counting_server_errors(app), config=SchemathesisConfig.from_str(_config_text())
)


CASES: Counter[str] = Counter()  # cases sent, per operation
STATUSES: Counter[int] = Counter()


# Pydantic's error types for what a schema states: a request the schema allows never carries one of these.
_SCHEMA_STATED = re.compile(r"missing|extra_forbidden|.*_type|.*_parsing|string_.*|too_(short|long)|greater_.*|"
                            r"less_.*|multiple_of|literal_error|enum|union_tag_.*|finite_number|bool_.*|int_.*")
SCHEMA_REFUSALS: Counter[str] = Counter()  # schema-valid requests refused for what the schema states


def _refused_only_for_what_no_schema_states(case: schemathesis.Case, response: Any) -> None:
    """A 422 to schema-valid data (allowed in tests/fuzz/schemathesis.toml for a few operations) lists only problems
    found past the schema (a Q-matrix's consistency, ids the stored state lacks): none a bound, pattern or type."""
    if response.status_code != 422 or case.meta is None or not case.meta.generation.mode.is_positive:
        return
    detail = response.json().get("detail", [])
    stated = [d for d in detail if _SCHEMA_STATED.fullmatch(str(d.get("type", "")))]
    if stated:
        SCHEMA_REFUSALS[f"{case.operation.label}: {stated[0]}"] += 1
    assert not stated, f"{case.operation.label}: schema-valid data refused for what the schema states: {stated}"


@schema.parametrize()
def test_every_operation_against_every_check(case: schemathesis.Case) -> None:
    response = case.call_and_validate()
    _refused_only_for_what_no_schema_states(case, response)
    CASES[f"{case.operation.method.upper()} {case.operation.path}"] += 1
    STATUSES[response.status_code] += 1


def test_the_run_covered_every_operation_with_enough_cases() -> None:
    """Runs after the fuzzing above (same module, file order): the run was as large as claimed."""
    statuses = dict(sorted(STATUSES.items()))
    print(f"\nfuzz: seed {_SEED or 'committed'}, {sum(CASES.values())} cases, statuses {statuses}, "
          f"server errors {sum(SERVER_ERRORS.values())} {dict(SERVER_ERRORS)}")
    assert not SERVER_ERRORS, SERVER_ERRORS
    assert not SCHEMA_REFUSALS, SCHEMA_REFUSALS
    operations = {f"{op.ok().method.upper()} {op.ok().path}" for op in schema.get_all_operations()}
    assert set(CASES) == operations, operations - set(CASES)
    assert sum(CASES.values()) >= 1000, CASES
    assert STATUSES[200] + STATUSES[201] + STATUSES[202] + STATUSES[204] > 100, STATUSES  # real work, not only refusals
    assert not any(code >= 500 and code != 503 for code in STATUSES), STATUSES
