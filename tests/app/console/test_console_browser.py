"""The operator console in a real browser: Debian's chromium (/usr/bin/chromium, never a downloaded one) driven by
Playwright against a live gateway on a loopback port. It signs in, opens every page, sees the diagnosis chart, watches
a calibration job's progress move, cancels a job, edits the privacy policy (valid and invalid) and gets a 4xx page for
a client key. Screenshots go to $FEDCD_SCREENSHOTS (default: the test's tmp folder); README "Console" shows one.

Nothing here waits for a duration: a job is held mid-way by a gate on its entities (opened by the test, a few calls at
a time), and every check waits for what the page shows (Playwright's expect, generous timeouts), so a loaded 2-core
machine is slower, never flaky. Without /usr/bin/chromium the tests skip — and fail under CI=true (.ci/run installs it).
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import Settings, create_app
from providers import EntityPrediction, EntitySpec, EntityUnavailable, PromptContext, TokenUsage
from providers.simulated import observed_proportions
from tests.app.gateway_processes import free_port
from tests.factories import FakeEntity

CHROMIUM = Path("/usr/bin/chromium")
WAIT_MS = 60_000  # the longest any check waits for the page (a loaded machine); a pass takes far less
Q_ID = "example-prealgebra"

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]


def _need_chromium() -> None:
    missing = [why for why, absent in (("playwright is not installed", sync_playwright is None),
                                       (f"{CHROMIUM} is missing (apt-get install chromium)", not CHROMIUM.exists()))
               if absent]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the console's browser tests need chromium under CI: {'; '.join(missing)}")
        pytest.skip("; ".join(missing))


class Gate:
    """Holds the entities' answers: open, or only ``permits`` more calls (a job stops mid-way until the test lets
    more through)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._permits: int | None = None  # None: open

    def close(self) -> None:
        with self._lock:
            self._permits = 0

    def allow(self, calls: int) -> None:
        with self._lock:
            self._permits = (self._permits or 0) + calls

    def open(self) -> None:
        with self._lock:
            self._permits = None

    def take(self) -> bool:
        with self._lock:
            if self._permits is None:
                return True
            if self._permits > 0:
                self._permits -= 1
                return True
            return False


class GatedEntity(FakeEntity):
    """A SIMULATED entity (observed proportion correct, shifted) that answers only when the gate lets it, reporting
    tokens as a provider would (an estimate: the console's cost and token counts have something to show)."""

    def __init__(self, name: str, offset: float, gate: Gate) -> None:
        def answer(context: PromptContext) -> dict[str, float]:
            return {c: min(1.0, max(0.0, p + offset)) for c, p in observed_proportions(context).items()}

        super().__init__(name, answer)
        self.gate = gate

    async def respond(self, context: PromptContext) -> EntityPrediction:
        while not self.gate.take():
            await asyncio.sleep(0.02)
        answer = await super().respond(context)
        return answer.model_copy(update={"usage": TokenUsage(prompt_tokens=300 + 45 * len(context.items),
                                                             completion_tokens=20 + 12 * len(context.concepts))})


@dataclass
class Live:
    url: str
    app: Any
    gate: Gate
    admin_key: str
    client_key: str
    shots: Path
    browser: Browser


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    _need_chromium()
    import uvicorn

    state = tmp_path_factory.mktemp("console-state")
    shots = Path(os.environ.get("FEDCD_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    gate = Gate()
    # SIMULATED stand-ins for a federation, named so (the declarations give their tiers and prices; the fakes
    # answer): an embedded-like one, a priced hosted-like one, and a hosted-like one that is down. The screenshots
    # show these names: no real model answered.
    entities = {"sim:local": GatedEntity("sim:local", 0.0, gate), "sim:hosted": GatedEntity("sim:hosted", 0.15, gate),
                "sim:down": FakeEntity("sim:down", error=EntityUnavailable("HTTP 503: upstream overloaded"))}
    hosted = {"kind": "openai_compatible", "base_url": "http://127.0.0.1:9/v1"}
    specs = [EntitySpec(name="sim:local", kind="llamacpp", packaged_model="smollm2", model="simulated"),
             EntitySpec(name="sim:hosted", model="simulated", input_usd_per_mtok=0.15, output_usd_per_mtok=0.6,
                        **hosted),
             EntitySpec(name="sim:down", model="simulated", input_usd_per_mtok=1.0, output_usd_per_mtok=5.0,
                        **hosted)]
    settings = Settings(state_dir=state, entities=specs, preload_models=False, noise_seed=1, default_calibration=False,
                        local_fed=False, privacy_cap_epsilon=480.0, calibration_release_epsilon=None)
    app = create_app(settings, entities=entities)
    admin = app.state.gateway.keys.create(tenant="school-a", role="admin").api_key
    client = app.state.gateway.keys.create(tenant="school-a", role="client").api_key
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="console-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the gateway did not start"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    for n in range(6):  # six diagnoses to chart, two per student, none a repeat (one entity always fails)
        responses = [{"item_id": "q01", "correct": n % 2 == 0}, {"item_id": "q10", "correct": n >= 3}]
        r = httpx.post(f"{url}/v1/diagnose", headers={"Authorization": f"Bearer {admin}"}, timeout=60, json={
            "student_id": f"s-{n % 3}", "qmatrix_id": Q_ID, "include_entities": True, "responses": responses})
        assert r.status_code == 200 and not r.json()["budget"]["repeat"], r.text
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
            try:
                yield Live(url, app, gate, admin, client, shots, browser)
            finally:
                browser.close()
    finally:
        gate.open()
        server.should_exit = True
        thread.join(timeout=60)


@pytest.fixture
def page(live: Live) -> Iterator[Page]:
    """A fresh browser (no cookies) that records every request leaving the gateway and every console error."""
    context = live.browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)  # actions (click, fill, goto)
    expect.set_options(timeout=WAIT_MS)  # and every expect(...) below
    tab = context.new_page()
    outside: list[str] = []
    errors: list[str] = []
    tab.route("**/*", lambda route: (outside.append(route.request.url), route.abort())
              if not route.request.url.startswith(live.url) else route.continue_())
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(str(e)))
    yield tab
    context.close()
    expect.set_options(timeout=5_000)  # Playwright's default, for any other test
    assert outside == [], outside  # nothing is loaded from anywhere but the gateway (no CDN)
    # A Content-Security-Policy violation (an inline style or script) is a console error: none may happen.
    assert [e for e in errors if "status of 4" not in e] == [], errors


def sign_in(page: Page, live: Live, key: str | None = None) -> None:
    page.goto(f"{live.url}/console")
    expect(page).to_have_url(re.compile(r"/console/login$"))
    page.get_by_label("Admin API key of your tenant").fill(key or live.admin_key)
    page.get_by_role("button", name="Sign in").click()


def shot(page: Page, live: Live, name: str) -> None:
    page.screenshot(path=str(live.shots / f"console-{name}.png"), full_page=True)


def test_a_client_key_gets_a_403_page(page: Page, live: Live) -> None:
    sign_in(page, live, live.client_key)
    expect(page.locator("#error-code")).to_have_text("403")
    expect(page.get_by_role("heading", level=1)).to_have_text("The console needs an admin key")
    shot(page, live, "client-key-403")
    page.goto(f"{live.url}/console/keys")  # no session was opened
    expect(page).to_have_url(re.compile(r"/console/login$"))


def test_sign_in_and_open_every_page(page: Page, live: Live) -> None:
    response = page.goto(f"{live.url}/console/login")
    assert response is not None and response.status == 200
    shot(page, live, "login")
    sign_in(page, live)
    expect(page.locator("#tenant")).to_have_text("school-a")
    # The overview's diagnosis chart: bars drawn from the gateway's usage rows, and the same numbers as a table
    expect(page.locator("#diagnoses-today")).to_have_text("6")
    chart = page.locator("#diagnoses-chart svg[role=img]")
    expect(chart).to_be_visible()
    heights = [float(h or 0) for h in chart.locator("rect.bar").evaluate_all("bars => bars.map(b => b.getAttribute('height'))")]
    assert len(heights) == 24 and sum(1 for h in heights if h > 0) >= 1
    expect(page.locator("#failures")).to_contain_text("unavailable 6")
    shot(page, live, "overview")
    for link, heading, check in (
        ("Entities", "Entities", "#entities"), ("Q-matrices", "Q-matrices", "#qmatrices"), ("Jobs", "Jobs", "#jobs"),
        ("Students", "Students", "#lookup"), ("Keys", "API keys", "#keys"), ("Privacy policy", "Privacy policy", "#policy-history"),
    ):
        page.get_by_role("navigation").get_by_role("link", name=link).click()
        expect(page.get_by_role("heading", level=1)).to_have_text(heading)
        expect(page.locator(check)).to_be_visible()
        shot(page, live, heading.lower().replace(" ", "-").replace("api-", ""))
    page.get_by_role("navigation").get_by_role("link", name="Q-matrices").click()
    page.get_by_role("link", name=Q_ID).click()
    expect(page.locator("#concepts")).to_contain_text("Add and subtract fractions")
    shot(page, live, "qmatrix")
    page.goto(f"{live.url}/console/jobs/no-such-job")
    expect(page.locator("#error-code")).to_have_text("404")


def test_a_jobs_progress_moves_while_it_runs(page: Page, live: Live) -> None:
    sign_in(page, live)
    page.goto(f"{live.url}/console/qmatrices/{Q_ID}")
    live.gate.close()  # the job's students wait for the gate
    try:
        page.get_by_label("Method").select_option("stacking")
        page.get_by_label(re.compile("^Simulated students")).fill("100")  # 20 validation students
        page.get_by_role("button", name="Start the calibration job").click()
        done = page.locator("#job-done")
        expect(done).to_have_text("0 / 20")
        expect(page.locator("#job-status")).to_have_text("running")
        live.gate.allow(12)  # a few students' answers (two gated entities each): the job moves, and stops again
        expect(done).to_have_text(re.compile(r"^([1-9]|1[0-9]) / 20$"))
        shot(page, live, "job-progress")
        moved = done.inner_text()
        live.gate.open()
        expect(page.locator("#job-status")).to_have_text("succeeded")  # the page reloads itself when it ends
        expect(page.locator("#job-done")).to_have_text("20 / 20")
        assert moved != "20 / 20"
    finally:
        live.gate.open()
    expect(page.locator("#history")).to_contain_text("finished")
    calibration = page.locator("dt:text-is('Calibration') + dd").inner_text()
    page.goto(f"{live.url}/console/qmatrices/{Q_ID}")
    expect(page.locator("#calibrations")).to_contain_text(calibration)
    expect(page.locator("#reliability svg[role=img]")).to_be_visible()  # drawn from the job's validation answers
    shot(page, live, "qmatrix-calibrated")
    page.get_by_role("navigation").get_by_role("link", name="Entities").click()
    expect(page.locator("#entities")).to_contain_text("left out")  # sim:down never answered the validation students


def test_a_running_job_is_cancelled_from_its_page(page: Page, live: Live) -> None:
    if not callable(getattr(live.app.state.gateway.jobs, "cancel", None)):
        pytest.skip("JobRunner.cancel is not in this version")
    sign_in(page, live)
    page.goto(f"{live.url}/console/qmatrices/{Q_ID}")
    live.gate.close()
    try:
        page.get_by_role("button", name="Start the calibration job").click()
        expect(page.locator("#job-status")).to_have_text("running")
        page.get_by_role("button", name="Cancel this job").click()
        expect(page.locator("#job-status")).to_have_text("cancelled")
        expect(page.get_by_role("button", name="Cancel this job")).to_have_count(0)
    finally:
        live.gate.open()
    expect(page.locator("#history")).to_contain_text("cancel requested")


def test_the_policy_is_edited_and_an_invalid_one_refused(page: Page, live: Live) -> None:
    sign_in(page, live)
    page.goto(f"{live.url}/console/policy")
    before = int(page.locator("#policy-version").inner_text())
    page.get_by_label("Window (seconds; rolling periods)").fill("30")
    page.get_by_label("ε cap").fill("lots")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.locator("#policy-errors")).to_be_visible()
    expect(page.locator("#err-cap_epsilon")).to_contain_text("not a number")
    page.get_by_label("ε cap").fill("240")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.locator("#err-period-window_s")).to_contain_text("greater than or equal to 60")
    expect(page.get_by_label("Window (seconds; rolling periods)")).to_have_attribute("aria-invalid", "true")
    shot(page, live, "policy-invalid")
    page.get_by_label("Window (seconds; rolling periods)").fill("43200")
    page.get_by_role("button", name="Save as a new version").click()
    expect(page.locator("#saved")).to_be_visible()
    expect(page.locator("#policy-version")).to_have_text(str(before + 1))
    expect(page.locator("#policy-history")).to_contain_text("240")
    policy = live.app.state.gateway.policies.current("school-a")
    assert (policy.cap_epsilon, policy.period.window_s) == (240.0, 43200.0)


def test_a_student_is_looked_up_with_the_charge_timeline_and_report(page: Page, live: Live) -> None:
    sign_in(page, live)
    page.get_by_role("navigation").get_by_role("link", name="Students").click()
    page.get_by_label("Student id").fill("s-1")
    page.get_by_role("button", name="Look up").click()
    expect(page.locator("#budget")).to_be_visible()
    expect(page.locator("#charges tbody tr")).to_have_count(2)  # s-1 was diagnosed twice
    expect(page.locator("#charges-chart svg[role=img]")).to_be_visible()
    if page.locator("#report-chart").count():
        expect(page.locator("#report-chart svg")).to_be_visible()
    assert "s-1" not in page.url  # the id travels in the form, never in a URL
    shot(page, live, "students")
    with page.expect_download() as download:
        page.get_by_role("button", name="Export everything (JSON)").click()
    assert download.value.suggested_filename.startswith("student-export-")
