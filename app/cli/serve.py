"""`fedcd serve`: the HTTP gateway, in one process or several (``--workers``)."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Annotated

import typer

from app.cli.common import cli, console, err
from app.settings import Settings
from qmatrix import EXAMPLE_QMATRIX_ID

_CURL = """curl -s http://{host}:{port}/v1/diagnose -H "Authorization: Bearer {key}" -H 'content-type: application/json' -d '{{
  "student_id": "demo-student", "qmatrix_id": "{qid}", "include_entities": true,
  "responses": [{{"item_id": "q01", "correct": true}}, {{"item_id": "q03", "correct": false}}, {{"item_id": "q10", "correct": true}}]
}}'"""


def _exit_after_clean_shutdown(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(0)


def _exit_zero_after_shutdown() -> None:
    """uvicorn shuts down cleanly on SIGTERM/SIGINT, restores the handlers it found and raises the signal again
    (so the process would end *by* the signal: exit status -15). The handlers it finds are these: the shutdown
    was clean, so the process exits 0 — what a supervisor (systemd, Kubernetes, docker stop) expects."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_after_clean_shutdown)


@cli.command()
def serve(
    host: Annotated[str, typer.Option(help="interface to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="worker processes (uvicorn's); embedded LLMs load in each")] = 1,
) -> None:
    """Run the HTTP gateway (OpenAPI docs at /docs)."""
    import uvicorn

    from app.bootstrap import ensure_dev_key, read_dev_key
    from app.logs import configure_logging
    from app.main import create_app

    try:
        settings = Settings(host=host, port=port)
    except ValueError as exc:  # e.g. FEDCD_AUTH=disabled on a non-loopback bind
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    configure_logging(settings.log_level)

    def announce() -> None:
        console.print(f"[bold green]fedcd is ready[/] on http://{host}:{port} (docs: http://{host}:{port}/docs)")
        key = "$FEDCD_API_KEY" if settings.auth == "enabled" else "auth-disabled"
        if settings.auth == "enabled" and (dev_key := read_dev_key(settings.state_dir)) is not None:
            key = dev_key
            console.print(f"Admin key of tenant 'dev' (saved in {settings.state_dir / 'dev-api-key'}):")
        # Plain print: rich would re-wrap the command and break it for pasting.
        print("Try it:\n" + _CURL.format(host=host, port=port, qid=EXAMPLE_QMATRIX_ID, key=key), flush=True)

    names = [s.name for s in settings.entity_specs]
    console.print(f"Starting fedcd; loading entities: {', '.join(names)} ...")
    _exit_zero_after_shutdown()
    if workers == 1:
        # access_log off: the gateway writes its own access line, with route templates instead of raw paths
        # (no student id from a URL ever reaches a log).
        uvicorn.run(create_app(settings, on_ready=announce), host=host, port=port, log_level="info", access_log=False)
        return
    from app.ratelimit import warn_per_worker_buckets

    # Without Redis each worker keeps its own token buckets: say at start that tenants get `workers` times the rate.
    warn_per_worker_buckets(rate_limit=settings.rate_limit, tenant_rates=settings.rate_limit_tenants,
                            shared=settings.redis_url is not None, workers=workers)
    if any(s.kind == "llamacpp" for s in settings.entity_specs):
        err.print(f"[yellow]note:[/] the embedded models load in every worker (about 0.5 GB of memory each, x{workers})")
    # Workers build their app from the environment: pass the bind on, and do the one-time work (schema, dev
    # key) here so the curl below can show the key. Each worker's own start-up runs under the database lock.
    os.environ["FEDCD_HOST"], os.environ["FEDCD_PORT"] = host, str(port)
    from app.auth import KeyStore
    from app.db import Database

    database = Database(settings.db_url, upgrade=settings.db_upgrade_on_start)
    if settings.auth == "enabled":
        ensure_dev_key(KeyStore(database.sessions), settings.state_dir)
    database.close()
    # prometheus-client sums the workers' metrics through files in one folder, emptied of an earlier run's
    # (README "Metrics"); the workers read the variable when they import it.
    from app.metrics import reset_multiprocess_dir

    metrics_dir = reset_multiprocess_dir(settings.prometheus_multiproc_dir or settings.state_dir / "prometheus")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir.resolve())
    announce()
    sys.stdout.flush()
    uvicorn.run("app.main:app_from_environment", factory=True, workers=workers, host=host, port=port,
                log_level="info", access_log=False)
