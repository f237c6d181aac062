"""Schemathesis over every operation of the OpenAPI spec, every check, a fixed seed (tests/fuzz/schemathesis.toml).

The app runs in-process with SIMULATED entities and an admin key; the fuzzer sends schema-valid and
schema-violating requests and checks: no server error, every status code documented, every response
valid against its schema, valid data accepted, invalid data rejected, 405s with correct Allow headers…
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import schemathesis
from schemathesis.config import SchemathesisConfig

from app import Settings, create_app
from tests.factories import FakeEntity

CONFIG = Path(__file__).with_name("schemathesis.toml")
_state = Path(tempfile.mkdtemp(prefix="fedcd-fuzz-"))
_settings = Settings(
    state_dir=_state, data_dir=_state / "no-datasets", entities=[], preload_models=False, default_calibration=False,
    noise_seed=1, privacy_cap_epsilon=1e6, allow_unnoised=True, calibration_release_epsilon=None,
)
app = create_app(_settings, entities={"sim:alpha": FakeEntity("sim:alpha", 0.3), "sim:beta": FakeEntity("sim:beta", 0.7)})
_key = app.state.keys.create(tenant="fuzz", role="admin").api_key
schema = schemathesis.openapi.from_asgi(
    "/openapi.json", app, config=SchemathesisConfig.from_str(CONFIG.read_text().replace("${FEDCD_FUZZ_KEY}", _key))
)


CASES: Counter[str] = Counter()  # cases sent, per operation
STATUSES: Counter[int] = Counter()


@schema.parametrize()
def test_every_operation_against_every_check(case: schemathesis.Case) -> None:
    response = case.call_and_validate()
    CASES[f"{case.operation.method.upper()} {case.operation.path}"] += 1
    STATUSES[response.status_code] += 1


def test_the_run_covered_every_operation_with_enough_cases() -> None:
    """Runs after the fuzzing above (same module, file order): the run was as large as claimed."""
    operations = {f"{op.ok().method.upper()} {op.ok().path}" for op in schema.get_all_operations()}
    assert set(CASES) == operations, operations - set(CASES)
    assert sum(CASES.values()) >= 1000, CASES
    assert STATUSES[200] + STATUSES[201] + STATUSES[202] + STATUSES[204] > 100, STATUSES  # real work, not only refusals
    assert not any(code >= 500 and code != 503 for code in STATUSES), STATUSES
