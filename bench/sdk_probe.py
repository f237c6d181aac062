"""What one entity call costs through fedcd's adapter and the official SDK, in this process's CPU time.

``python -m bench.sdk_probe --base-url URL --calls N`` builds the ``openai_compatible`` entity as the gateway does
(on a plain-HTTP URL: the thin path of ``providers.openai_local``; ``--official-sdk``: the official openai SDK, as
hosted providers are called), sends N sequential diagnosis prompts to the stub at URL, and prints one JSON line:
calls, seconds, latency percentiles and CPU milliseconds per call (``time.process_time``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from importlib.metadata import version

import openai

from providers import EntitySpec, PromptContext, PromptItem, build_entity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--official-sdk", action="store_true", help="the official openai SDK's path")
    args = parser.parse_args()
    spec = EntitySpec(name="probe", kind="openai_compatible", base_url=args.base_url, model="stub", api_key="bench",
                      max_attempts=1, structured_output="json_schema")
    context = PromptContext(concepts=("fractions", "equations"), items=(
        PromptItem(item_id="q1", text="1/2 + 1/3", concepts=("fractions",), score=1.0),
        PromptItem(item_id="q2", text="2x + 1 = 5", concepts=("equations",), score=0.0),
    ))

    async def run() -> dict[str, float | int | str]:
        # An injected HTTP client keeps the SDK path (providers.openai_local.uses_thin_path).
        entity = build_entity(spec, http_client=openai.DefaultAsyncHttpxClient() if args.official_sdk else None)
        adapter = entity
        while hasattr(adapter, "inner"):  # the chain's innermost entity: the adapter
            adapter = adapter.inner
        for _ in range(20):  # warm-up: client, connection pool, schema caches
            await entity.respond(context)
        latencies = []
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(args.calls):
            start = time.perf_counter()
            await entity.respond(context)
            latencies.append((time.perf_counter() - start) * 1000)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await entity.aclose()
        latencies.sort()
        return {"calls": args.calls, "seconds": wall, "cpu_ms_per_call": cpu * 1000 / args.calls,
                "p50_ms": latencies[len(latencies) // 2], "p90_ms": latencies[int(0.9 * (len(latencies) - 1))],
                "p99_ms": latencies[int(0.99 * (len(latencies) - 1))],
                "adapter": f"openai_compatible: {type(adapter).__name__} (build_entity: retries, deadline, "
                           "concurrency wrappers)",
                "sdk": f"openai {version('openai')}" if args.official_sdk else "no SDK (thin path)"}

    print(json.dumps(asyncio.run(run())), flush=True)


if __name__ == "__main__":
    main()
