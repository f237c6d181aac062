"""The client cannot drift from the server unnoticed: its models are what the generator makes of the server's
OpenAPI schema today, the sync client is what unasync makes of the async one, every path it calls is one the
server serves, its webhook check accepts what the server's sender signs — and it imports nothing of the server."""

from __future__ import annotations

import ast
import copy
import importlib.util
import re
import tempfile
import time
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import fedcd_client
import httpx
import pytest
from fedcd_client import WebhookVerificationError, sign_webhook, verify_webhook
from fedcd_client._async_client import JobKind, JobStatus

from app import Settings, create_app
from app.webhooks import WebhookSender, WebhookTarget, sign

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
SERVER_PACKAGES = {"app", "bench", "calibration", "diagnosis", "evaluation", "federated", "privacy", "providers",
                   "qmatrix"}


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_client_{name}", CLIENT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as state:
        settings = Settings(state_dir=state, entities=[], preload_models=False, default_calibration=False,
                            local_fed=False)
        return create_app(settings).openapi()


def test_models_are_generated_from_the_servers_schema(openapi: dict[str, Any]) -> None:
    generator = _script("generate_models")
    committed = (CLIENT / "src" / "fedcd_client" / "models.py").read_text()
    assert generator.generate(openapi) == committed, (
        "fedcd_client/models.py no longer matches the server's OpenAPI schema: run "
        "`python clients/python/scripts/generate_models.py` and review the diff")


def test_a_changed_field_is_drift(openapi: dict[str, Any]) -> None:
    # The check above can fail: a renamed field, a changed type, a new required field each change the output
    generator = _script("generate_models")
    baseline = generator.generate(openapi)
    for change in ("rename", "retype", "require"):
        spec = copy.deepcopy(openapi)
        job = spec["components"]["schemas"]["JobPublic"]
        if change == "rename":
            job["properties"]["state"] = job["properties"].pop("status")
        elif change == "retype":
            job["properties"]["resumed"] = {"type": "string"}
        else:
            job["required"].append("error")
        assert generator.generate(spec) != baseline, change


def test_a_reworded_description_or_a_new_bound_is_not_drift(openapi: dict[str, Any]) -> None:
    # Prose and bounds stay on the server (it enforces them, answering 422 naming the field)
    generator = _script("generate_models")
    spec = copy.deepcopy(openapi)
    field = spec["components"]["schemas"]["DiagnoseRequest"]["properties"]["student_id"]
    field.update(description="reworded", maxLength=64, pattern="^[a-z]+$")
    assert generator.generate(spec) == generator.generate(openapi)


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    unasync = _script("unasync")
    committed = (CLIENT / "src" / "fedcd_client" / "_sync_client.py").read_text()
    assert unasync.generate() == committed, "run `python clients/python/scripts/unasync.py`"


def _template(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_every_path_the_client_calls_is_served(openapi: dict[str, Any]) -> None:
    source = (CLIENT / "src" / "fedcd_client" / "_async_client.py").read_text()
    called = {(m.lower(), _template(p)) for m, p in re.findall(r'_(?:call|send)\(\s*"(\w+)", f?"([^"]+)"', source)}
    served = {(method, _template(path)) for path, item in openapi["paths"].items() for method in item}
    generator = _script("generate_models")
    assert called and called <= served, called - served
    assert called == {(m, _template(p)) for m, p in generator.OPERATIONS}  # the models cover exactly these


def test_job_filters_match_the_servers_enums(openapi: dict[str, Any]) -> None:
    params = {p["name"]: p["schema"] for p in openapi["paths"]["/v1/jobs"]["get"]["parameters"]}

    def enum(schema: dict[str, Any]) -> set[str]:
        array = next(s for s in schema.get("anyOf", [schema]) if s.get("type") == "array")
        return set(array["items"]["enum"])

    assert enum(params["kind"]) == set(typing.get_args(JobKind))
    assert enum(params["state"]) == set(typing.get_args(JobStatus))


def test_the_client_imports_nothing_of_the_server() -> None:
    offenders = []
    for path in (CLIENT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in SERVER_PACKAGES]
    assert not offenders


def test_all_names_exist_once() -> None:
    assert len(set(fedcd_client.__all__)) == len(fedcd_client.__all__)
    assert [n for n in fedcd_client.__all__ if not hasattr(fedcd_client, n)] == []


async def test_verify_webhook_accepts_the_servers_deliveries_and_nothing_else() -> None:
    # Prepare: the server's own sender, delivering into a MockTransport
    secret = "s" * 32
    received: list[httpx.Request] = []

    def receiver(request: httpx.Request) -> httpx.Response:
        received.append(request)
        return httpx.Response(204)

    sender = WebhookSender({"*": WebhookTarget(url="https://receiver.test/hook", secret=secret)},
                           transport=httpx.MockTransport(receiver))

    # Execute
    sender.job_finished({"tenant": "school", "job_id": "j1", "kind": "calibrate", "status": "succeeded"})
    await sender.drain()
    await sender.aclose()
    request = received[0]
    event = verify_webhook(secret, request.headers, request.content)

    # Assert: accepted as sent; refused when anything is off
    assert (event.type, event.tenant, event.job["job_id"]) == ("job.finished", "school", "j1")
    assert event.delivery_id == request.headers["x-fedcd-delivery"]
    with pytest.raises(WebhookVerificationError, match="signature"):
        verify_webhook(secret, request.headers, request.content.replace(b"succeeded", b"failed"))
    with pytest.raises(WebhookVerificationError, match="signature"):
        verify_webhook("t" * 32, request.headers, request.content)
    with pytest.raises(WebhookVerificationError, match="away"):
        verify_webhook(secret, request.headers, request.content, now=time.time() + 3600)
    with pytest.raises(WebhookVerificationError, match="missing"):
        verify_webhook(secret, {}, request.content)


def test_signatures_match_the_servers() -> None:
    assert sign_webhook("k" * 16, "1700000000", b'{"a":1}') == sign("k" * 16, "1700000000", b'{"a":1}')
