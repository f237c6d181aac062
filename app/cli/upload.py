"""`fedcd upload-train` and `fedcd jobs`: a running gateway's upload-and-train and job list, from the shell.

The same requests as ``POST /v1/qmatrices/{id}/train`` and ``GET /v1/jobs`` (an admin key of the tenant), so what a
platform scripts with curl and what an operator types here cannot drift apart.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from app.cli.common import cli, console, err

__all__ = ["upload_and_train", "wait_for_job"]

_URL = typer.Option(help="the gateway", envvar="FEDCD_URL")
_KEY = typer.Option(help="an admin key of the tenant (default: $FEDCD_API_KEY)", envvar="FEDCD_API_KEY")


def _client(url: str, key: str | None) -> httpx.Client:
    if not key:
        err.print("[red]error:[/] an admin key is needed: --key or FEDCD_API_KEY")
        raise typer.Exit(2)
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def _refused(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text[:500]
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
    return str(detail)


def upload_and_train(client: httpx.Client, qmatrix_id: str, responses: Path) -> str:
    """Upload ``responses`` for ``qmatrix_id``; the job id (raises ``typer.Exit`` with the refusal printed)."""
    with responses.open("rb") as fh:
        r = client.post(f"/v1/qmatrices/{qmatrix_id}/train", files={"responses": (responses.name, fh, "text/csv")})
    if r.status_code != 202:
        err.print(f"[red]refused ({r.status_code}):[/] {_refused(r)}")
        raise typer.Exit(1)
    return str(r.json()["job_id"])


def wait_for_job(client: httpx.Client, job_id: str, *, poll_s: float = 1.0, limit_s: float = 3600.0) -> dict[str, Any]:
    """Poll ``GET /v1/jobs/{job_id}`` with a progress bar until it ends (or ``limit_s`` passes); the last state."""
    deadline = time.monotonic() + limit_s
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  console=err, transient=True) as bar:
        task = bar.add_task(f"job {job_id}", total=None)
        while True:
            job = client.get(f"/v1/jobs/{job_id}").json()
            last = job["history"][-1]["message"] if job.get("history") else job["status"]
            bar.update(task, total=job["progress"]["total"] or None, completed=job["progress"]["done"],
                       description=f"{job['kind']} {job_id[:8]}: {last}")
            if job["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
                return job
            time.sleep(poll_s)


@cli.command("upload-train")
def upload_train(
    qmatrix_id: Annotated[str, typer.Argument(help="the tenant's Q-matrix")],
    responses: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="student_id,item_id,correct CSV")],
    url: Annotated[str, _URL] = "http://127.0.0.1:8000",
    key: Annotated[str | None, _KEY] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="follow the job (and its calibration) to the end")] = True,
) -> None:
    """Upload a response history and train the tenant's own model of a Q-matrix (POST /v1/qmatrices/{id}/train)."""
    with _client(url, key) as client:
        job_id = upload_and_train(client, qmatrix_id, responses)
        console.print(f"train job {job_id} accepted")
        if not wait:
            return
        job = wait_for_job(client, job_id)
        _print_job(job)
        calibration = job.get("metrics", {}).get("calibration_job_id")
        if job["status"] == "succeeded" and calibration:
            _print_job(wait_for_job(client, calibration))
        if job["status"] != "succeeded":
            raise typer.Exit(1)


def _print_job(job: dict[str, Any]) -> None:
    console.print(f"{job['kind']} job {job['job_id']}: [bold]{job['status']}[/]" + (f" — {job['error']}" if job.get("error") else ""))
    for name, value in job.get("metrics", {}).items():
        console.print(f"  {name}: {value}")
    for note in job.get("notes", []):
        console.print(f"  note: {note}")


@cli.command("jobs")
def list_jobs(
    url: Annotated[str, _URL] = "http://127.0.0.1:8000",
    key: Annotated[str | None, _KEY] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
    cursor: Annotated[str | None, typer.Option(help="the next page: the cursor the previous page printed")] = None,
    kind: Annotated[list[str] | None, typer.Option(help="only jobs of this kind (repeat for several)")] = None,
    state: Annotated[list[str] | None, typer.Option(help="only jobs in this state (repeat for several)")] = None,
) -> None:
    """The tenant's jobs on a running gateway, newest first (GET /v1/jobs)."""
    params: dict[str, Any] = {"limit": limit, "kind": kind or [], "state": state or []}
    if cursor:
        params["cursor"] = cursor
    with _client(url, key) as client:
        r = client.get("/v1/jobs", params=params)
    if r.status_code != 200:
        err.print(f"[red]refused ({r.status_code}):[/] {_refused(r)}")
        raise typer.Exit(1)
    page = r.json()
    table = Table(title=f"jobs, newest first ({page['count']} on this page)")
    for column in ("job", "kind", "status", "progress", "created"):
        table.add_column(column)
    for job in page["data"]:
        table.add_row(job["job_id"], job["kind"], job["status"], f"{job['progress']['done']}/{job['progress']['total']}",
                      job["created_at"])
    console.print(table)
    if page.get("next_cursor"):
        console.print(f"older jobs: fedcd jobs --cursor {page['next_cursor']}")
