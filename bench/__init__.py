"""Benchmarks of the running service (``fedcd bench gateway``, ``fedcd bench healthz``, ``fedcd bench
first-request``): real processes on loopback, bounded load.

Imports nothing of fedcd: it drives the gateway as a user would, over HTTP and the ``fedcd`` command.
"""

from bench.first_request import FirstRequestBenchConfig, run_first_request_bench, write_first_request_report
from bench.gateway import GatewayBenchConfig, run_gateway_bench
from bench.healthz import HealthzBenchConfig, run_healthz_bench, write_healthz_report
from bench.profiling import BenchSetupError
from bench.report import write_gateway_report

__all__ = ["BenchSetupError", "FirstRequestBenchConfig", "GatewayBenchConfig", "HealthzBenchConfig",
           "run_first_request_bench", "run_gateway_bench", "run_healthz_bench", "write_first_request_report",
           "write_gateway_report", "write_healthz_report"]
