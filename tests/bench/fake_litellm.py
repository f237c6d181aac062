"""A stand-in for LiteLLM's ``litellm`` command in the bench's tests: ``--port P`` (the other options are read and
ignored) serves ``/health/liveliness`` and answers ``POST /v1/chat/completions`` at once, like a proxy whose provider
answers instantly. It exercises the bench's turn-taking, not LiteLLM."""

from __future__ import annotations

import argparse

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


async def _completion(_: Request) -> Response:
    return JSONResponse({"object": "chat.completion", "model": "stub",
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}}]})


async def _health(_: Request) -> Response:
    return JSONResponse({"status": "ok"})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config")
    parser.add_argument("--host")
    parser.add_argument("--num_workers")
    args = parser.parse_args()
    app = Starlette(routes=[Route("/v1/chat/completions", _completion, methods=["POST"]),
                            Route("/health/liveliness", _health, methods=["GET"])])
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
