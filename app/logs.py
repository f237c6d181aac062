"""Logging for the gateway process.

The SDKs' own DEBUG logs print whole request options (prompts hold item text), so their
loggers never go below WARNING, whatever the gateway's level; fedcd's loggers never log
student ids, item text, answers or keys (tests/app/test_logs.py).
"""

from __future__ import annotations

import logging

__all__ = ["QUIET_LIBRARIES", "configure_logging"]

QUIET_LIBRARIES = ("openai", "anthropic", "groq", "httpx", "httpcore", "httpx2", "httpcore2", "llama_cpp")


def configure_logging(level: str | int) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
