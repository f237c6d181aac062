"""A fixed-latency OpenAI-compatible chat-completions server, for benchmarking the gateway (not the model).

``python -m bench.stub --port P --latency-ms 50`` answers every ``POST /v1/chat/completions`` after the given
delay with a valid completion: a JSON object giving 0.5 to every concept the request's JSON schema asks for
(``response_format.json_schema.schema.properties``), so any gateway client parses it like a real answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["make_stub"]


def _concepts(body: dict) -> list[str]:
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    return list((schema.get("properties") or {}).keys())


def make_stub(latency_s: float) -> Starlette:
    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        await asyncio.sleep(latency_s)
        content = json.dumps({c: 0.5 for c in _concepts(body)})
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140},
        })

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                             Route("/healthz", health, methods=["GET"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args()
    uvicorn.run(make_stub(args.latency_ms / 1000), host="127.0.0.1", port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
