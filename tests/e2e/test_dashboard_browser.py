"""The dashboard in a real browser: Playwright driving Debian's Chromium against ``tether.web`` served by
uvicorn over a PostgreSQL store, with a worker pool running in the same process.

A person logs in, watches the counts change on their own while a worker runs, opens a job and
reads its attempt history, retries a dead job and pauses and resumes a queue by clicking through
their confirmations, and is refused without credentials (401) and on a forged POST without its
token (403), with nothing changed.  These tests never skip in CI: a missing
Chromium or Playwright fails them when ``TETHER_REQUIRE_SERVICES=1`` (``.ci/run`` installs Chromium).

Screenshots go to the test's temporary folder, or into ``docs/images/`` with
``TETHER_DOCS_SCREENSHOTS=1`` (how the documentation's pictures are made).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tether import Tether
from tether.domain.job import JobStatus

from tests.conftest import service_unavailable
from tests.postgres_fixtures import schema_name, temporary_app

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
USER, PASSWORD = "ops", "browser-test-pass"
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        service_unavailable("Playwright", str(error))
    if not os.path.exists(CHROMIUM):
        service_unavailable("Chromium", f"{CHROMIUM} is missing (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def app() -> Iterator[Tether]:
    with temporary_app(schema_name("dashboard_browser")) as tether_app:

        @tether_app.handler("reports.build")
        def build(payload: Any) -> None:
            time.sleep(0.05)

        @tether_app.handler("mail.send", max_attempts=1)
        def send(payload: Any) -> None:
            raise ValueError(f"mailbox {payload['to']} refused the message")

        yield tether_app


@pytest.fixture
def server(app: Tether) -> Iterator[str]:
    """The dashboard on a free port of 127.0.0.1; yields its base URL."""
    import uvicorn
    from tether.web import create_app

    web = create_app(app, username=USER, password=PASSWORD, live_interval=0.3)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    instance = uvicorn.Server(uvicorn.Config(web, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=instance.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not instance.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert instance.started, "the dashboard did not start"
    yield f"http://127.0.0.1:{port}"
    instance.should_exit = True
    thread.join(timeout=10)
    sock.close()


def shot(page: Any, name: str, tmp_path: Path) -> None:
    folder = DOCS_IMAGES if os.environ.get("TETHER_DOCS_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def logged_in(browser: Any, base: str) -> Any:
    context = browser.new_context(base_url=base, http_credentials={"username": USER, "password": PASSWORD},
                                  viewport={"width": 1280, "height": 860})
    return context, context.new_page()


def test_without_credentials_the_browser_gets_401_and_no_data(browser: Any, server: str, app: Tether) -> None:
    app.enqueue("reports.build", {"secret": "quarterly"})
    from playwright.sync_api import Error

    for credentials in (None, {"username": USER, "password": "wrong"}):
        context = browser.new_context(base_url=server, http_credentials=credentials)
        page = context.new_page()
        statuses: list[int] = []
        page.on("response", lambda response, seen=statuses: seen.append(response.status))
        try:
            shown = page.goto("/jobs")
            assert shown is not None and shown.status == 401
            assert "quarterly" not in page.content()
        except Error as error:  # headless Chromium may abort a navigation it has no credentials for
            assert "ERR_INVALID_AUTH_CREDENTIALS" in str(error)
        assert statuses and set(statuses) == {401}
        answer = context.request.get("/jobs")
        assert answer.status == 401 and "quarterly" not in answer.text()
        context.close()


def test_counts_change_on_their_own_while_a_worker_runs(browser: Any, server: str, app: Tether, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    for i in range(40):
        app.enqueue("reports.build", {"n": i}, queue="reports")
    context, page = logged_in(browser, server)
    page.goto("/")
    expect(page.locator('[data-live="status.queued"]')).to_have_text("40")
    expect(page.locator('[data-live="status.completed"]')).to_have_text("0")
    expect(page.locator("#live-state")).to_have_class("live-state on", timeout=10_000)  # the stream is open
    pool = app.worker(concurrency=4, max_wait=0.2)
    pool.start()
    try:
        # no reload: the figures arrive over server-sent events
        expect(page.locator('[data-live="status.completed"]')).to_have_text("40", timeout=30_000)
        expect(page.locator('[data-live="status.queued"]')).to_have_text("0")
        expect(page.locator('[data-live="queue.reports.queued"]')).to_have_text("0")
        expect(page.locator('[data-live="workers.alive"]')).to_have_text("1")
    finally:
        pool.stop()
    deadline = time.monotonic() + 30  # the chart of the last hour is read again every 10 s at most
    while page.locator("svg.chart rect.completed").count() == 0 and time.monotonic() < deadline:
        time.sleep(1)
        page.reload()
    assert page.locator("svg.chart rect.completed").count() >= 1
    shot(page, "dashboard-overview", tmp_path)
    context.close()


def dead_job(app: Tether, to: str) -> int:
    job = app.enqueue("mail.send", {"to": to}).job
    pool = app.worker(concurrency=1, max_wait=0.2)
    pool.start()
    try:
        deadline = time.monotonic() + 20
        while app.get(job.id).status is not JobStatus.DEAD and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        pool.stop()
    assert app.get(job.id).status is JobStatus.DEAD
    return job.id


def test_open_a_dead_job_and_retry_it_by_clicking(browser: Any, server: str, app: Tether, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    job_id = dead_job(app, "<script>alert('x')</script>@example.com")
    dead_job(app, "ops@example.com")
    context, page = logged_in(browser, server)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto("/")
    page.get_by_role("link", name="Dead letters").click()
    expect(page.locator("h1")).to_have_text("Dead letters")
    shot(page, "dashboard-dead-letters", tmp_path)
    page.get_by_role("link", name=str(job_id), exact=True).click()
    expect(page.locator("h1")).to_contain_text(f"Job {job_id}")
    expect(page.locator("pre.payload")).to_contain_text("<script>alert('x')</script>")  # shown as text
    expect(page.locator("pre.error").first).to_contain_text("refused the message")
    attempts = page.locator("ol.timeline li.attempt")  # the attempt history, oldest first
    expect(attempts).to_have_count(1)
    worker_id = app.get(job_id).history[0].worker_id
    assert worker_id
    expect(attempts.first).to_contain_text("attempt 1")
    expect(attempts.first.locator(".status")).to_have_text("dead")
    expect(attempts.first).to_contain_text(worker_id)
    expect(attempts.first.locator("pre.error")).to_contain_text("<script>alert('x')</script>@example.com refused")
    shot(page, "dashboard-job", tmp_path)
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("h1")).to_have_text(f"Retry job {job_id}?")
    assert app.get(job_id).status is JobStatus.DEAD  # asked, not done
    page.get_by_role("button", name="Confirm").click()
    expect(page.locator(".flash")).to_have_text("Job queued again.")
    expect(page.locator("h1 .status")).to_have_text("queued")
    assert app.get(job_id).status is JobStatus.QUEUED and app.get(job_id).attempts == 0
    assert dialogs == []  # the payload's script never ran
    context.close()


def test_a_forged_post_without_its_token_is_refused_and_changes_nothing(browser: Any, server: str, app: Tether) -> None:
    job_id = dead_job(app, "ops@example.com")
    context, page = logged_in(browser, server)
    page.goto(f"/jobs/{job_id}")  # the browser holds a CSRF cookie now
    forged = context.request.post(f"/jobs/{job_id}/retry", form={"confirm": "yes"})
    assert forged.status == 403 and "CSRF" in forged.text()
    other_site = context.request.post(
        f"/jobs/{job_id}/retry", form={"confirm": "yes"}, headers={"origin": "http://attacker.example"}
    )
    assert other_site.status == 403
    assert app.get(job_id).status is JobStatus.DEAD
    context.close()


def test_pause_and_resume_a_queue_by_clicking(browser: Any, server: str, app: Tether) -> None:
    from playwright.sync_api import expect

    app.enqueue("reports.build", {"month": "2026-11"}, queue="reports")
    context, page = logged_in(browser, server)
    page.goto("/queues")
    controls = page.locator('[data-controls="reports"]')
    deadline = time.monotonic() + 30
    while controls.count() == 0 and time.monotonic() < deadline:  # the next live snapshot shows it
        time.sleep(0.5)
        page.reload()
    expect(controls).to_have_text("active")
    page.locator("tr", has=controls).get_by_role("button", name="Pause").click()
    assert not {q.name: q for q in app.queues()}["reports"].paused  # asked, not done
    page.get_by_role("button", name="Confirm").click()
    assert {q.name: q for q in app.queues()}["reports"].paused
    page.goto("/queues")
    expect(controls).to_have_text("paused")
    page.locator("tr", has=controls).get_by_role("button", name="Resume").click()
    page.get_by_role("button", name="Confirm").click()
    assert not {q.name: q for q in app.queues()}["reports"].paused
    context.close()
