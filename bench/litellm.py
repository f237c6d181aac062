"""LiteLLM's proxy as the other side of ``fedcd bench gateway --compare-litellm``: started against the same stub
provider, authenticated like fedcd's requests, and asked one pass-through chat completion per request.

It is installed in its own virtual environment (``make litellm``), never as a fedcd dependency; the version that
ran is read from that environment and recorded with the results.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import RequestMaker, Target
from bench.processes import Processes, free_port, wait_http
from bench.profiling import BenchSetupError

__all__ = ["LiteLLMProxy", "litellm_command", "litellm_version", "start_litellm"]

LABEL = "litellm"


def litellm_command(configured: str | None) -> str:
    """The ``litellm`` executable, or a :class:`BenchSetupError` saying how to install it."""
    command = shutil.which(configured or "litellm")
    if command is None:
        raise BenchSetupError(f"--compare-litellm: no `{configured or 'litellm'}` command found "
                              "(install LiteLLM's proxy: `make litellm`)")
    return command


def litellm_version(command: str) -> str | None:
    """The installed LiteLLM's version, read by the Python beside its command (its own venv); None if unknown."""
    python = Path(command).resolve().with_name("python")
    if not python.exists():
        return None
    try:
        out = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
                             capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@dataclass
class LiteLLMProxy:
    """The started proxy: its target (pid, master key), its URL and the one request body every call sends."""

    target: Target
    url: str
    process: subprocess.Popen[bytes]
    version: str | None

    def requests(self) -> RequestMaker:
        """One pass-through chat completion per request, with a structured-output schema like fedcd's entities."""
        schema = {"type": "object", "properties": {c: {"type": "number"} for c in ("fractions", "equations")}}
        body: dict[str, Any] = {
            "model": "stub", "messages": [{"role": "user", "content": "mastery?"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "mastery", "schema": schema}},
        }
        return lambda _k: (self.url, body)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def start_litellm(command: str, *, stub_url: str, workers: int, procs: Processes, work: Path) -> LiteLLMProxy:
    """Start the proxy (one model routed to ``stub_url``) and wait until it answers; warm it up with a few calls
    (imports, connection pools), which are not measured."""
    cfg = work / "litellm.yaml"
    master_key = f"sk-bench-{secrets.token_hex(16)}"  # authenticated like fedcd's requests are
    cfg.write_text(json.dumps({"model_list": [{"model_name": "stub", "litellm_params": {
        "model": "openai/stub", "api_base": f"{stub_url}/v1", "api_key": "bench"}}],
        "litellm_settings": {"telemetry": False}, "general_settings": {"master_key": master_key}}))
    port = free_port()
    env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"}
    proc = procs.start(LABEL, [command, "--config", str(cfg), "--port", str(port), "--host", "127.0.0.1",
                               "--num_workers", str(workers)], env)
    wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, 180)
    return LiteLLMProxy(Target(LABEL, proc.pid, master_key),
                        f"http://127.0.0.1:{port}/v1/chat/completions", proc, litellm_version(command))
