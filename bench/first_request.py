"""``fedcd bench first-request``: how long the README's first curl takes on a fresh start, against later requests.

The claim measured (issue 20, part 1): the first-start work — the default local-fed model and the default
calibration — never makes a user's first request slow; it runs at background priority, and the README's first curl
answers within the same time as later ones. That is a measurement of a machine, not a unit-test assertion, so it is
measured here and reported with the machine's load.

Real processes on loopback: the gateway (``fedcd serve``, its own process) in a FRESH temporary state folder with
the DEFAULT configuration — every ``FEDCD_*`` variable and hosted-provider key of this environment is left out, so
the federation is the embedded ``smollm2`` and ``gemma3`` plus ``local-fed``, the default model is trained and the
default calibration submitted at start, and auth is on (the dev admin key is read from ``<state>/dev-api-key``, as
the README says). Then this process

1. waits for ``/healthz`` (the gateway answers it once its start-up is done: the curl is printed then);
2. sends the README's first curl at once (``demo-student``, ``example-prealgebra``, three responses,
   ``include_entities``; a new connection, as ``curl`` opens) and times it;
3. sends ``later`` more diagnoses right after it, one at a time — while the first-start calibration usually still
   runs;
4. waits (bounded) for that calibration job to finish and sends ``after_calibration`` more: the steady state.

Every later request has its own student id (no repeat answer from the privacy ledger's repeat window, which is per
student) **and** its own three responses (the entity response cache is keyed on the prompt — items, concepts,
scores — never on the student, so the same responses would be answered from the cache). Each answer's entities are
recorded with their status, reason, latency and cache result, so a cache hit would show.

The calibration job is read from the gateway's own database (``<state>/fedcd.db``, table ``jobs``): it belongs to
the shared tenant, which no API key can read through ``GET /v1/calibrate/{job_id}``. Its status is read before and
after each request, and its ``job_events`` (claimed, finished) are read at the end, so each request is marked as
overlapping the job's run or not.

``revision`` runs the gateway of an earlier commit (``git archive``, same environment) with this bench: the
"before" of a change.

Bounded: ``max_seconds`` for everything from the gateway's start (start-up included; phases not reached are
reported as cut), ``request_timeout_s`` per request. The gateway is always stopped (SIGTERM, then kill).

``simulated=True`` (``--simulated``) replaces the federation with one SIMULATED entity, no local-fed and no default
model: a smoke run for tests, **not** the measured configuration (the report says so).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.processes import ROOT, Processes, free_port, wait_http
from bench.provenance import checkout, loadavg, revision
from bench.stats import percentile

__all__ = ["FIRST_CURL_BODY", "FirstRequestBenchConfig", "later_bodies", "run_first_request_bench", "seconds_summary",
           "write_first_request_report"]

# The README's first curl (app/cli/serve.py's _CURL; tests/bench/test_first_request_bench.py checks they agree).
FIRST_CURL_BODY: dict[str, Any] = {
    "student_id": "demo-student", "qmatrix_id": "example-prealgebra", "include_entities": True,
    "responses": [{"item_id": "q01", "correct": True}, {"item_id": "q03", "correct": False},
                  {"item_id": "q10", "correct": True}],
}
EXAMPLE_ITEMS = [f"q{i:02d}" for i in range(1, 13)]
HOSTED_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GROQ_API_KEY")
ACTIVE = ("queued", "running")
_LOG_LINES = re.compile(r"first start|calibration|fitted|trained|resumed|preempt|timed? ?out|deadline|WARNING|ERROR|"
                        r"Traceback|federation:|loaded", re.IGNORECASE)


@dataclass(frozen=True)
class FirstRequestBenchConfig:
    later: int = 5  # right after the first request (the first-start calibration usually still runs)
    after_calibration: int = 5  # once the calibration job has finished: the steady state
    max_seconds: float = 1200.0  # everything from the gateway's start
    request_timeout_s: float = 300.0  # per request (the embedded entities' own deadline is 120 s)
    simulated: bool = False  # tests only: one SIMULATED entity, no local-fed, no default model
    revision: str | None = None  # a git revision: its gateway (``git archive``) instead of this checkout's
    seed: int = 0


def seconds_summary(seconds: Sequence[float]) -> dict[str, Any]:
    """Count, p50 (nearest rank), min and max in seconds (``None`` when nothing was measured)."""
    def s(value: float) -> float | None:
        return None if math.isnan(value) else round(value, 3)

    return {"requests": len(seconds), "p50_s": s(percentile(seconds, 0.5)),
            "min_s": s(min(seconds) if seconds else float("nan")), "max_s": s(max(seconds) if seconds else float("nan"))}


def later_bodies(n: int, *, prefix: str, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` requests shaped like the first curl (three responses on example-prealgebra, include_entities), each with
    its own student and its own responses: distinct from each other and from the curl's, so neither the repeat
    window (per student) nor the response cache (per prompt) answers them."""
    first = tuple((r["item_id"], r["correct"]) for r in FIRST_CURL_BODY["responses"])
    choices = [tuple(zip(items, pattern, strict=True))
               for items in itertools.combinations(EXAMPLE_ITEMS, 3)
               for pattern in itertools.product((True, False), repeat=3)]
    choices = [c for c in choices if c != first]
    picked = random.Random(seed).sample(choices, min(n, len(choices)))
    return [{**FIRST_CURL_BODY, "student_id": f"{prefix}-{k + 1:03d}",
             "responses": [{"item_id": item, "correct": correct} for item, correct in chosen]}
            for k, chosen in enumerate(picked)]


def _env(state_dir: Path, simulated: bool, root: Path = ROOT) -> dict[str, str]:
    """This environment without any fedcd setting or hosted key: the gateway runs on its defaults."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FEDCD_") and k not in HOSTED_KEYS and k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update({"PYTHONPATH": str(root), "FEDCD_STATE_DIR": str(state_dir)})
    if simulated:
        entities = [{"name": "sim:confident", "kind": "simulated", "simulated_style": "confident", "seed": 1}]
        env.update({"FEDCD_ENTITIES": json.dumps(entities), "FEDCD_LOCAL_FED": "false",
                    "FEDCD_TRAIN_DEFAULT_MODEL": "false"})
    return env


class _Jobs:
    """The first-start calibration job, read from the gateway's SQLite database (read only)."""

    def __init__(self, db: Path) -> None:
        self.db, self.job_id = db, None  # type: ignore[var-annotated]

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if not self.db.is_file():
            return []
        try:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10) as conn:
                return conn.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error:
            return []

    def status(self) -> dict[str, Any] | None:
        """``{"job_id", "status", "done", "total"}`` of the first calibration job, or ``None`` if there is none."""
        rows = self._query("SELECT id, status, done, total FROM jobs WHERE kind = 'calibrate' "
                           "ORDER BY created_at LIMIT 1")
        if not rows:
            return None
        self.job_id = rows[0][0]
        return {"job_id": rows[0][0], "status": rows[0][1], "done": rows[0][2], "total": rows[0][3]}

    def events(self) -> list[dict[str, Any]]:
        if self.job_id is None and self.status() is None:
            return []
        rows = self._query("SELECT at, status, worker, message FROM job_events WHERE job_id = ? ORDER BY seq",
                           [self.job_id])
        return [{"at": at, "status": status, "worker": worker, "message": message} for at, status, worker, message in rows]


def _epoch(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def job_window(events: Sequence[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(first time the job ran, time it finished) in epoch seconds, from its events; ``None`` for what did not
    happen (never claimed; still running)."""
    started = next((_epoch(e["at"]) for e in events if e["status"] == "running"), None)
    finished = next((_epoch(e["at"]) for e in reversed(events) if e["status"] in ("succeeded", "failed")), None)
    return started, finished


def _overlaps(request: dict[str, Any], window: tuple[float | None, float | None]) -> bool:
    started, finished = window
    if started is None:
        return False
    return request["sent_at"] < (finished if finished is not None else math.inf) and request["answered_at"] > started


def _entities(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {e["name"]: {"status": e["status"], "reason": e.get("reason"), "latency_ms": round(e["latency_ms"], 1),
                       "cache": e.get("cache")} for e in answer.get("entities") or []}
    for skipped in answer.get("skipped_entities") or []:
        name = skipped.get("name") or skipped.get("entity")
        if name and name not in out:
            out[name] = {"status": "skipped", "reason": skipped.get("reason"), "latency_ms": 0.0, "cache": None}
    return out


def _send(base: str, key: str, body: dict[str, Any], *, timeout: float, jobs: _Jobs, phase: str) -> dict[str, Any]:
    """One diagnosis on a new connection (as ``curl`` opens one), timed, with the calibration job's status around it."""
    before = jobs.status()
    sent_at, start = time.time(), time.perf_counter()
    status: int | str
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as client:
            response = client.post("/v1/diagnose", json=body, timeout=timeout)
        status, answer = response.status_code, (response.json() if response.status_code == 200 else {})
        error = None if response.status_code == 200 else response.text[:300]
    except (httpx.HTTPError, ValueError) as exc:
        status, answer, error = type(exc).__name__, {}, str(exc)[:300]
    seconds, answered_at = time.perf_counter() - start, time.time()
    after = jobs.status()
    return {"phase": phase, "student_id": body["student_id"],
            "responses": [f"{r['item_id']}:{int(r['correct'])}" for r in body["responses"]],
            "status": status, "seconds": round(seconds, 3), "sent_at": sent_at, "answered_at": answered_at,
            "calibration_before": before["status"] if before else None,
            "calibration_after": after["status"] if after else None,
            "calibration_id": answer.get("calibration_id"), "entities": _entities(answer), "error": error,
            "loadavg_1m": (loadavg() or [None])[0]}


def _log_excerpt(log: Path, limit: int = 40) -> list[str]:
    if not log.is_file():
        return []
    lines = [line.rstrip()[:300] for line in log.read_text(errors="replace").splitlines() if _LOG_LINES.search(line)]
    return lines if len(lines) <= limit else [*lines[:limit // 2], f"… {len(lines) - limit} lines left out …",
                                              *lines[-limit // 2:]]


def run_first_request_bench(config: FirstRequestBenchConfig, *,
                            progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Start a fresh gateway, send the first curl and the later requests; returns the results as plain data
    (:func:`write_first_request_report` writes them)."""
    work = Path(tempfile.mkdtemp(prefix="fedcd-bench-first-request-"))
    state = work / "state"
    procs = Processes(work)
    root = checkout(config.revision, work / "checkout") if config.revision else ROOT
    env = _env(state, config.simulated, root)
    jobs = _Jobs(state / "fedcd.db")
    requests: list[dict[str, Any]] = []
    notes: list[str] = []
    load_before = loadavg()
    started = time.monotonic()
    bound = started + config.max_seconds

    def left() -> float:
        return bound - time.monotonic()

    gateway = None
    start_up_s = calibration_wait_s = None
    calibration_at_ready = None
    try:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        progress(f"starting fedcd serve{f' at {config.revision}' if config.revision else ''} on 127.0.0.1:{port}, "
                 f"fresh state {state}" + (" (SIMULATED entity)" if config.simulated else " (default configuration)"))
        gateway = procs.start("gateway", [sys.executable, "-m", "app.cli", "serve", "--port", str(port)], env, cwd=root)
        wait_http(f"{base}/healthz", gateway, seconds=max(1.0, left()))
        start_up_s = round(time.monotonic() - started, 3)
        key = (state / "dev-api-key").read_text().strip()
        calibration_at_ready = jobs.status()
        progress(f"ready after {start_up_s:.1f} s; calibration job: {calibration_at_ready}; sending the first curl")

        requests.append(_send(base, key, FIRST_CURL_BODY, timeout=max(1.0, min(config.request_timeout_s, left())),
                              jobs=jobs, phase="first"))
        progress(f"first request: {requests[-1]['status']} in {requests[-1]['seconds']:.2f} s")
        bodies = later_bodies(config.later + config.after_calibration, prefix="bench", seed=config.seed)
        for k, body in enumerate(bodies):  # distinct responses across both phases; ids name the phase
            body["student_id"] = (f"bench-later-{k + 1:03d}" if k < config.later
                                  else f"bench-after-{k - config.later + 1:03d}")
        for body in bodies[:config.later]:
            if left() <= 1:
                notes.append(f"max_seconds reached: {config.later - sum(r['phase'] == 'later' for r in requests)} "
                             "later request(s) not sent")
                break
            requests.append(_send(base, key, body, timeout=min(config.request_timeout_s, left()), jobs=jobs,
                                  phase="later"))
            progress(f"later request: {requests[-1]['status']} in {requests[-1]['seconds']:.2f} s "
                     f"(calibration {requests[-1]['calibration_after']})")

        if config.after_calibration:
            wait_start = time.monotonic()
            progress("waiting for the first-start calibration job to finish")
            while left() > 1 and (job := jobs.status()) is not None and job["status"] in ACTIVE:
                time.sleep(min(2.0, left()))
            job = jobs.status()
            calibration_wait_s = round(time.monotonic() - wait_start, 3)
            if job is not None and job["status"] in ACTIVE:
                notes.append(f"max_seconds reached while the calibration job was {job['status']} "
                             f"({job['done']}/{job['total']}): no request after it")
            else:
                for body in bodies[config.later:]:
                    if left() <= 1:
                        notes.append("max_seconds reached: "
                                     f"{config.after_calibration - sum(r['phase'] == 'after' for r in requests)} "
                                     "request(s) after the calibration not sent")
                        break
                    requests.append(_send(base, key, body, timeout=min(config.request_timeout_s, left()), jobs=jobs,
                                          phase="after"))
                    progress(f"after calibration: {requests[-1]['status']} in {requests[-1]['seconds']:.2f} s")
        events = jobs.events()
        load_after = loadavg()
    finally:
        procs.stop_all()
    window = job_window(events)
    for r in requests:
        r["overlapped_calibration"] = _overlaps(r, window)
    exit_code = gateway.returncode if gateway is not None else None
    return {
        "config": asdict(config),
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_before": load_before,
                    "loadavg_after": load_after},
        "revision": revision() if config.revision is None else config.revision,
        "start_up_s": start_up_s,
        "calibration": {"at_ready": calibration_at_ready, "events": events,
                        "ran_s": (round(window[1] - window[0], 1) if None not in window else None),  # type: ignore[operator]
                        "waited_for_s": calibration_wait_s},
        "requests": requests,
        "summary": _summary(requests),
        "notes": notes,
        "gateway_exit_code": exit_code,
        "log_excerpt": _log_excerpt(work / "gateway.log"),
        "logs": str(work),
    }


def _summary(requests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Seconds per phase (answered requests only), the first against the later ones, entity outcomes counted."""
    def ok(phase: str, overlapped: bool | None = None) -> list[float]:
        return [r["seconds"] for r in requests if r["phase"] == phase and r["status"] == 200
                and (overlapped is None or r.get("overlapped_calibration") == overlapped)]

    first = next((r for r in requests if r["phase"] == "first"), None)
    later = [r["seconds"] for r in requests if r["phase"] in ("later", "after") and r["status"] == 200]
    outcomes: dict[str, dict[str, int]] = {}
    for r in requests:
        for name, e in r["entities"].items():
            label = e["status"] if not e.get("reason") or e["status"] == "ok" else f"{e['status']} ({e['reason']})"
            outcomes.setdefault(name, {})
            outcomes[name][label] = outcomes[name].get(label, 0) + 1
    p50 = percentile(later, 0.5) if later else None
    return {
        "first_s": first["seconds"] if first else None,
        "first_status": first["status"] if first else None,
        "first_overlapped_calibration": first.get("overlapped_calibration") if first else None,
        "later": seconds_summary(ok("later")),
        "later_during_calibration": seconds_summary(ok("later", True)),
        "after_calibration": seconds_summary(ok("after")),
        "all_later": seconds_summary(later),
        "first_over_later_p50": (round(first["seconds"] / p50, 2) if first and first["status"] == 200 and p50 else None),
        "errors": sum(r["status"] != 200 for r in requests),
        "entity_outcomes": outcomes,
    }


def _cell(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _entity_cell(entities: dict[str, dict[str, Any]]) -> str:
    if not entities:
        return "–"
    parts = []
    for name, e in entities.items():
        text = e["status"] if e["status"] == "ok" or not e.get("reason") else f"{e['status']} ({e['reason']})"
        seconds = f" {e['latency_ms'] / 1000:.1f} s" if e["status"] != "skipped" else ""
        parts.append(f"{name} {text}{seconds}" + (" cache hit" if e.get("cache") == "hit" else ""))
    return ", ".join(parts)


def write_first_request_report(data: dict[str, Any], out: Path, *, command: str) -> list[Path]:
    """``results.json`` and ``README.md`` (the verdict, the table of requests, the command, the machine) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    config, machine, summary, calibration = data["config"], data["machine"], data["summary"], data["calibration"]
    setup = ("one SIMULATED entity (`--simulated`: a smoke run, NOT the measured configuration), no local-fed, no "
             "default model" if config["simulated"] else
             "the DEFAULT configuration (embedded smollm2 and gemma3, local-fed, default model trained and default "
             "calibration submitted at first start, auth on; no `FEDCD_*` variable, no hosted key)")
    at_ready = calibration.get("at_ready")
    job_line = ("no calibration job was found" if at_ready is None else
                f"the first-start calibration job was `{at_ready['status']}` ({at_ready['done']}/{at_ready['total']}) "
                f"when `/healthz` first answered; it ran {_cell(calibration.get('ran_s'), 1)} s in all")
    first_s, ratio = summary["first_s"], summary["first_over_later_p50"]
    rows = [
        ("first request (the README's curl)", {"requests": 1 if first_s is not None else 0, "p50_s": first_s,
                                                "min_s": first_s, "max_s": first_s}),
        ("later, right after it", summary["later"]),
        ("… of which overlapped the calibration job", summary["later_during_calibration"]),
        ("after the calibration finished", summary["after_calibration"]),
        ("all later requests", summary["all_later"]),
    ]
    lines = [
        "# The README's first curl on a fresh start",
        "",
        f"Command: `{command}`, " + (f"the gateway at revision {config['revision']} (`git archive`), the bench "
                                     "of this checkout" if config.get("revision") else
                                     f"code at {data.get('revision') or 'an unknown revision (not a git checkout)'}")
        + ".",
        "",
        (f"Machine: {machine['cpus']} CPUs, Python {machine['python']}; load average (1, 5, 15 min) "
         f"{machine['loadavg_before']} before, {machine['loadavg_after']} after. The gateway: `fedcd serve` in a fresh "
         f"state folder, {setup}, on 127.0.0.1; the requests come from one client process on the same machine, one "
         "at a time, each on a new connection (as `curl` opens one)."),
        "",
        (f"Start-up (process start to the first `/healthz` answer, the moment the curl is printed): "
         f"{_cell(data['start_up_s'], 1)} s; {job_line}."),
        "",
        f"**First request: {_cell(first_s)} s** (status {summary['first_status']}, "
        f"{'overlapping' if summary['first_overlapped_calibration'] else 'not overlapping'} the calibration job); "
        f"later requests p50 {_cell(summary['all_later']['p50_s'])} s, max {_cell(summary['all_later']['max_s'])} s"
        + (f"; first / later p50 = {ratio:.2f}" if ratio is not None else "") + ".",
        "",
        "| requests | n | p50 s | min s | max s |",
        "|---|---|---|---|---|",
        *[f"| {name} | {s['requests']} | {_cell(s['p50_s'])} | {_cell(s['min_s'])} | {_cell(s['max_s'])} |"
          for name, s in rows],
        "",
        ("Each request (calibration job status read just before it was sent and just after it was answered; "
         "\"overlap\": its time intersects the job's run, from the job's events; entity: status, its own latency):"),
        "",
        "| # | phase | student | status | seconds | calibration before → after | overlap | load 1 min | entities |",
        "|---|---|---|---|---|---|---|---|---|",
        *[f"| {k} | {r['phase']} | {r['student_id']} | {r['status']} | {r['seconds']:.2f} | "
          f"{r['calibration_before']} → {r['calibration_after']} | {'yes' if r.get('overlapped_calibration') else 'no'} | "
          f"{_cell(r['loadavg_1m'])} | {_entity_cell(r['entities'])} |" for k, r in enumerate(data["requests"], 1)],
        "",
        "Entity outcomes over all requests: "
        + ("; ".join(f"{name}: " + ", ".join(f"{label} × {n}" for label, n in counts.items())
                     for name, counts in summary["entity_outcomes"].items()) or "none") + ".",
        "",
        ("Every later request has its own student id (no repeat answer from the privacy ledger, whose repeat window is "
         "per student) and its own three responses (the entity response cache is keyed on the prompt, never on the "
         "student); a cache hit would be marked in the table."),
        "",
        *([f"Notes: {'; '.join(data['notes'])}.", ""] if data["notes"] else []),
        f"The gateway exited with status {data['gateway_exit_code']} on SIGTERM.",
        "",
    ]
    if data.get("log_excerpt"):
        lines += ["The gateway's log (lines on start-up, the calibration, timeouts, warnings):", "", "```",
                  *data["log_excerpt"], "```", ""]
    lines += [
        ("These are one machine's numbers at one moment: rerun the command to compare (same machine, similar load "
         "average). The test suite asserts no latency (tests/bench/test_first_request_bench.py checks that the bench "
         "runs and reports)."),
        "",
    ]
    report, results = out / "README.md", out / "results.json"
    report.write_text("\n".join(lines))
    results.write_text(json.dumps({k: v for k, v in data.items() if k != "logs"}, indent=2) + "\n")
    return [results, report]
