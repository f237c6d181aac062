"""Generate the sync client (``_sync_client.py``) from the async one (``_async_client.py``).

    python clients/python/scripts/unasync.py          # rewrite _sync_client.py
    python clients/python/scripts/unasync.py --check  # exit 1 if it differs (what the test runs)

One client is written by hand, so the two cannot drift apart in behaviour (retries, errors, pagination, waiting):
the sync one is the same text with ``async``/``await`` removed and ``AsyncX`` names renamed ``X`` — httpx's
``AsyncClient`` becomes ``Client``, ``AsyncIterator`` ``Iterator``, ``AsyncSleep`` (``_shared``) ``Sleep``,
``asyncio.sleep`` ``time.sleep``. The same approach as httpcore's ``unasync.py``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fedcd_client"
SOURCE, TARGET = PACKAGE / "_async_client.py", PACKAGE / "_sync_client.py"

# Applied in order, each to the whole text.
RULES: list[tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\basync (for|with)\b", r"\1"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"from asyncio import sleep as _default_sleep\n", ""),  # the sync default is time.sleep (time is imported)
    (r"\b_default_sleep\b", "time.sleep"),
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"\b_Async([A-Z]\w*)", r"_\1"),
]

DOCSTRING = '''"""The sync client, :class:`FedcdClient`: the async client (``_async_client.py``) without ``async``/``await``.

GENERATED from _async_client.py by clients/python/scripts/unasync.py: do not edit by hand.
tests/clients/test_client_drift.py fails when the two differ.
"""'''


def generate() -> str:
    text = SOURCE.read_text()
    end = text.index('"""', 3) + 3  # the async module's docstring, replaced by one that says what this file is
    text = DOCSTRING + text[end:]
    for pattern, replacement in RULES:
        text = re.sub(pattern, replacement, text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed file; write nothing")
    args = parser.parse_args()
    text = generate()
    if args.check:
        same = TARGET.exists() and TARGET.read_text() == text
        if not same:
            print(f"{TARGET.name} is out of date: run python clients/python/scripts/unasync.py", file=sys.stderr)
        return 0 if same else 1
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
