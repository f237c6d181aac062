"""Benchmarks of the running service (``fedcd bench gateway``): real processes on loopback, bounded load.

Imports nothing of fedcd: it drives the gateway as a user would, over HTTP and the ``fedcd`` command.
"""

from bench.gateway import GatewayBenchConfig, run_gateway_bench
from bench.profiling import BenchSetupError
from bench.report import write_gateway_report

__all__ = ["BenchSetupError", "GatewayBenchConfig", "run_gateway_bench", "write_gateway_report"]
