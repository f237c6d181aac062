"""The ``fedcd`` command (Typer): ``serve``, ``diagnose``, ``evaluate``, ``train``, ``federation``, ``models`` and ``bench``."""

from __future__ import annotations

from app.cli import bench_cost, bench_first_request, bench_gateway, bench_healthz, bench_next_items, db, diagnosis, evaluation, federation, keys, privacy, serve, students, training, upload  # noqa: F401  (each module registers its commands)
from app.cli.common import cli

__all__ = ["cli", "main"]


def main() -> None:
    cli()
