"""The dashboard's routes through Starlette's TestClient on the memory store: every page, every bad
parameter (400, never 500), the guards of every action (401, 403, nothing changed), confirmation,
audit lines, read-only, escaping, and no lease token anywhere."""

from __future__ import annotations

import logging
import re
import sys
from datetime import timedelta
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient
from tether.domain.errors import ConfigurationError, JobNotFound, ValidationError
from tether.domain.job import JobStatus, NewJob
from tether.domain.schedules import ScheduleState, tick_key
from tether.web import create_app

from tests.web_support import PASSWORD, USER, client, dead_job, new_app, post, running_job, token_of

PAGES = ["/", "/jobs", "/jobs?status=dead", "/jobs/1", "/queues", "/workers", "/schedules", "/purge"]


# -- who may look ---------------------------------------------------------------------------------
def test_create_app_refuses_to_build_an_open_dashboard() -> None:
    app = new_app()
    with pytest.raises(ConfigurationError, match="credentials"):
        create_app(app)
    with pytest.raises(ConfigurationError, match="credentials"):
        create_app(app, username="ops", password="")
    with pytest.raises(ConfigurationError, match="not both"):
        create_app(app, authorize=lambda r: "x", username="ops", password="pw")
    with pytest.raises(ValidationError, match="live_interval"):
        create_app(app, username="ops", password="pw", live_interval=0)


@pytest.mark.parametrize("path", PAGES + ["/events", "/static/dashboard.css", "/metrics"])
def test_every_page_answers_401_without_the_right_credentials(path: str) -> None:
    app = new_app()
    app.enqueue("mail.send", {"n": 1})
    c = client(app)
    c.auth = None
    answer = c.get(path)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Basic")
    assert "mail.send" not in answer.text
    c.auth = (USER, PASSWORD + "x")
    assert c.get(path).status_code == 401
    c.auth = ("other", PASSWORD)
    assert c.get(path).status_code == 401


def test_an_authorize_hook_decides_and_names_the_user(caplog: pytest.LogCaptureFixture) -> None:
    app = new_app()
    job = dead_job(app)

    async def authorize(request: Any) -> str | None:
        return "alice" if request.headers.get("x-user") == "alice" else None

    c = client(app, authorize=authorize)
    assert c.get("/").status_code == 401
    c.headers["x-user"] = "alice"
    token = token_of(c)
    with caplog.at_level(logging.INFO, logger="tether.web.audit"):
        assert post(c, f"/jobs/{job.id}/retry", {"confirm": "yes"}, token=token).status_code == 303
    assert f"alice retried job {job.id}" in caplog.text


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_with_security_headers(path: str) -> None:
    app = new_app()
    dead_job(app)
    answer = client(app).get(path)
    assert answer.status_code == 200, answer.text
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in answer.text  # only <script src=...>: no inline script
    assert ' style="' not in answer.text  # no inline style either


# -- what pages show -------------------------------------------------------------------------------
def test_payloads_and_errors_are_escaped_and_no_secret_is_rendered() -> None:
    app = new_app()
    evil = "<script>alert('x')</script>"
    job = dead_job(app, {"html": evil}, error=f"ValueError: {evil}")
    running, token = running_job(app)
    c = client(app)
    page = c.get(f"/jobs/{job.id}").text
    assert evil not in page and "&lt;script&gt;alert(" in page
    listing = c.get("/jobs").text
    assert evil not in listing and "&lt;script&gt;" in listing
    detail = c.get(f"/jobs/{running.id}").text
    assert "w-holder" in detail  # the lease holder is shown ...
    for path in (f"/jobs/{running.id}", "/jobs", "/jobs?status=running", "/"):
        assert token not in c.get(path).text  # ... never its token
    assert PASSWORD not in c.get("/").text and "memory://" not in c.get("/").text


def test_the_overview_counts_statuses_and_queues_and_draws_finished_jobs() -> None:
    app = new_app()
    for i in range(3):
        app.enqueue("mail.send", {"i": i}, queue="mail")
    dead_job(app)
    page = client(app).get("/").text
    assert 'data-live="status.queued">3<' in page and 'data-live="status.dead">1<' in page
    assert 'data-live="queue.mail.queued">3<' in page
    assert '<svg class="chart"' in page and '<rect class="dead"' in page


def test_job_pages_walk_every_job_once_newest_first_by_cursor() -> None:
    app = new_app()
    for i in range(23):
        app.enqueue("mail.send", {"i": i})
    c = client(app)
    seen: list[int] = []
    path = "/jobs?limit=10"
    while path:
        page = c.get(path).text
        seen += [int(x) for x in re.findall(r'<a href="/jobs/(\d+)">', page)]
        found = re.search(r'rel="next" href="([^"]+)"', page)
        path = found.group(1).replace("&amp;", "&") if found else ""
    assert seen == list(range(23, 0, -1))


def test_find_opens_a_job_by_id_or_key() -> None:
    app = new_app()
    job = app.enqueue("mail.send", {}, idempotency_key="order-42").job
    c = client(app)
    assert c.get(f"/jobs?find={job.id}", follow_redirects=False).headers["location"] == f"/jobs/{job.id}"
    assert c.get("/jobs?find=order-42", follow_redirects=False).headers["location"] == f"/jobs/{job.id}"
    missing = c.get("/jobs?find=<b>nope</b>")
    assert missing.status_code == 404 and "<b>nope" not in missing.text


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("/jobs?status=exploded", "status"),
        ("/jobs?limit=1000000", "limit"),
        ("/jobs?limit=-1", "limit"),
        ("/jobs?limit=0", "limit"),
        ("/jobs?limit=1e6", "limit"),
        ("/jobs?before=abc", "before"),
        ("/jobs?before=-5", "before"),
        ("/jobs?before=99999999999999999999999", "before"),
        ("/jobs?offset=-10", "offset"),
        ("/jobs?offset=100", "offset"),
        ("/jobs?queue=bad%20queue!", "queue"),
        ("/jobs?job_type=%00", "job_type"),
        ("/jobs?find=", "find"),
        ("/jobs/abc", "job_id"),
        ("/jobs/-1", "job_id"),
        ("/jobs/0", "job_id"),
    ],
)
def test_a_bad_page_parameter_is_a_400_naming_it(path: str, names: str) -> None:
    app = new_app()
    answer = client(app).get(path)
    assert answer.status_code == 400, answer.text
    assert f"{names}:" in answer.text


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/jobs?limit=0", "limit: must be an integer from 1 to 500, got"),
        ("/jobs?before=-5", "before: must be an integer from 1 to 9,223,372,036,854,775,807, got"),
    ],
)
def test_a_bad_number_on_a_page_is_worded_as_the_api_and_cli_word_it(path: str, problem: str) -> None:
    answer = client(new_app()).get(path)
    assert answer.status_code == 400 and problem in answer.text


def test_an_unknown_job_is_a_404() -> None:
    assert client(new_app()).get("/jobs/12345").status_code == 404


def test_static_serves_the_stylesheet_the_script_and_the_icon_only() -> None:
    c = client(new_app())
    script = c.get("/static/live.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "EventSource" in script.text
    assert c.get("/static/dashboard.css").headers["content-type"].startswith("text/css")
    icon = c.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml") and "<svg" in icon.text
    assert '<link rel="icon" href="/static/favicon.svg"' in c.get("/").text  # so browsers ask no /favicon.ico
    for other in ("/static/__init__.py", "/static/../app.py", "/static/%2e%2e%2fapp.py", "/static/x.js"):
        assert c.get(other).status_code == 404, other


def test_the_job_page_shows_each_attempt_as_a_timeline_escaped() -> None:
    app = new_app()
    evil = "<script>alert('x')</script>"
    job = app.enqueue("mail.send", {}, max_attempts=2).job
    started = app.clock.now()
    first = app.repository.lease_job(job.id, worker_id="w-first", now=started, lease_timeout=60)
    assert first is not None and first.lease_token
    app.repository.fail(job.id, first.lease_token, now=started + timedelta(seconds=0.006_09), error=f"ValueError: {evil}",
                        retry_at=app.clock.now())
    second = app.repository.lease_job(job.id, worker_id="w-second", now=app.clock.now(), lease_timeout=60)
    assert second is not None and second.lease_token
    app.repository.fail(job.id, second.lease_token, now=app.clock.now(), error="KeyError: 'to'", retry_at=None)
    c = client(app)
    page = c.get(f"/jobs/{job.id}").text
    timeline = page[page.index('<ol class="timeline">'):page.index("</ol>")]
    items = timeline.split('<li class="attempt ')[1:]
    assert [item.split('"')[0] for item in items] == ["outcome-failed", "outcome-dead"]  # oldest first
    assert "attempt 1" in items[0] and "w-first" in items[0] and "ValueError: &lt;script&gt;" in items[0]
    assert "<dt>took</dt><dd>6 ms</dd>" in items[0]  # as `tether jobs show` says it
    assert "attempt 2" in items[1] and "w-second" in items[1] and "KeyError: &#39;to&#39;" in items[1]
    assert evil not in page and "UTC" in items[0]  # started and ended, in UTC
    assert 'class="retried"' not in timeline
    fresh = app.enqueue("mail.send", {}).job
    assert "No attempt has ended yet." in c.get(f"/jobs/{fresh.id}").text


def test_the_job_page_marks_where_a_manual_retry_counted_the_attempts_from_1_again() -> None:
    app = new_app()
    job = app.enqueue("mail.send", {}, max_attempts=1).job
    for outcome in ("dead", "completed"):
        leased = app.repository.lease_job(job.id, worker_id="w-1", now=app.clock.now(), lease_timeout=60)
        assert leased is not None and leased.lease_token
        if outcome == "dead":
            app.repository.fail(job.id, leased.lease_token, now=app.clock.now(), error="ValueError: no", retry_at=None)
            app.retry(job.id)
        else:
            app.repository.complete(job.id, leased.lease_token, now=app.clock.now())
    page = client(app).get(f"/jobs/{job.id}").text
    timeline = page[page.index('<ol class="timeline">'):page.index("</ol>")]
    parts = timeline.split("<li ")[1:]
    assert [p.split(">")[0] for p in parts] == [
        'class="attempt outcome-dead"', 'class="retried"', 'class="attempt outcome-completed"']
    assert "retried: the attempts count from 1 again" in parts[1]


def _declare(app: Any, name: str, **fields: Any) -> None:
    now = app.clock.now()
    state = ScheduleState(
        name=name, job_type="mail.send", queue=fields.pop("queue", None), spec=fields.pop("spec", "every 60s"),
        tz=fields.pop("tz", "UTC"), fingerprint="f" * 32, next_tick_at=now + timedelta(seconds=60),
        declared_by="w-ticker", declared_at=now, declared_until=now + fields.pop("lapse", timedelta(minutes=1)),
    )
    app.repository.record_schedule(state, now=now)


def test_the_schedules_page_lists_the_stored_schedules_with_their_last_job() -> None:
    app = new_app()
    c = client(app)
    assert "No schedules are defined" in c.get("/schedules").text
    _declare(app, "nightly.<b>report</b>", spec="cron 0 3 * * *", tz="Europe/Paris", queue="reports")
    _declare(app, "every.minute", lapse=timedelta(seconds=-1))
    tick = app.clock.now()
    new_job = NewJob("mail.send", "default", "{}", 0, 3, tick, idempotency_key=tick_key("every.minute", tick))
    result = app.repository.enqueue_tick("every.minute", new_job, now=tick, overlap=False)
    assert result is not None
    page = c.get("/schedules").text
    rows = page[page.index("<tbody>"):page.index("</tbody>")].split("<tr>")[1:]
    assert [row.split("</td>")[0] for row in rows] == ["<td>every.minute", "<td>nightly.&lt;b&gt;report&lt;/b&gt;"]
    minute, nightly = rows
    assert f'href="/jobs/{result.job.id}">{result.job.id}</a>' in minute and "status-queued" in minute
    assert "lapsed since" in minute and "every 60s" in minute
    assert "<code>cron 0 3 * * *</code>" in nightly and "Europe/Paris" in nightly and "reports" in nightly
    assert ">live<" in nightly and "—" in nightly  # no tick yet


def test_metrics_serves_the_store_wide_queue_gauges_behind_the_same_credentials() -> None:
    app = new_app()
    app.enqueue("mail.send", {}, queue="mail")
    app.enqueue("mail.send", {}, queue="mail", delay=3600)
    running_job(app)
    c = client(app)
    answer = c.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    assert 'tether_queue_depth{queue="mail",status="queued"} 2.0' in answer.text
    assert 'tether_queue_depth{queue="default",status="running"} 1.0' in answer.text
    assert 'tether_queue_latency_seconds{queue="default"} 0.0' in answer.text  # nothing due waits there
    assert "tether_queue_scrape_success 1.0" in answer.text
    assert "python_gc" not in answer.text and "tether_jobs_completed_total" not in answer.text  # its own registry
    c.auth = (USER, "wrong")
    refused = c.get("/metrics")
    assert refused.status_code == 401 and "tether_queue_depth" not in refused.text


def test_metrics_is_a_404_naming_the_extra_without_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import prometheus_client now fails
    answer = client(new_app()).get("/metrics")
    assert answer.status_code == 404
    assert "prometheus-client" in answer.text and "tether-jobs[prometheus]" in answer.text


# -- actions ---------------------------------------------------------------------------------------
def test_retry_asks_for_confirmation_then_retries_and_logs_who(caplog: pytest.LogCaptureFixture) -> None:
    app = new_app()
    job = dead_job(app)
    c = client(app)
    token = token_of(c, f"/jobs/{job.id}")
    asked = post(c, f"/jobs/{job.id}/retry", token=token)
    assert asked.status_code == 200 and f"Retry job {job.id}?" in asked.text and 'value="yes"' in asked.text
    assert app.get(job.id).status is JobStatus.DEAD  # nothing yet
    with caplog.at_level(logging.INFO, logger="tether.web.audit"):
        done = post(c, f"/jobs/{job.id}/retry", {"confirm": "yes"}, token=token)
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{job.id}?done=retry"
    assert app.get(job.id).status is JobStatus.QUEUED
    assert f"{USER} retried job {job.id}" in caplog.text
    assert "Job queued again." in c.get(done.headers["location"]).text


@pytest.mark.parametrize(
    ("token", "headers", "reason"),
    [
        (None, {}, "CSRF"),
        ("forged-token-forged-token-forged-token", {}, "CSRF"),
        ("GOOD", {"origin": "http://evil.example"}, "origin"),
        ("GOOD", {"sec-fetch-site": "cross-site"}, "cross-site"),
    ],
    ids=["no-token", "wrong-token", "other-origin", "cross-site"],
)
def test_a_forged_post_is_refused_403_and_changes_nothing(token: str | None, headers: dict[str, str], reason: str) -> None:
    app = new_app()
    job = dead_job(app)
    queued = app.enqueue("mail.send", {}).job
    c = client(app)
    good = token_of(c)
    given = good if token == "GOOD" else token
    for path, data in [(f"/jobs/{job.id}/retry", {"confirm": "yes"}), (f"/jobs/{queued.id}/cancel", {"confirm": "yes"}),
                       ("/jobs/retry", {"confirm": "yes", "job_id": str(job.id)}),
                       ("/purge", {"confirm": "yes", "older_than": "2999-01-01"}), ("/queues/default/pause", {"confirm": "yes"})]:
        answer = post(c, path, data, token=given, **headers)
        assert answer.status_code == 403, (path, answer.text)
        assert reason in answer.text
    assert app.get(job.id).status is JobStatus.DEAD and app.get(queued.id).status is JobStatus.QUEUED


def test_the_csrf_cookie_is_httponly_and_strict() -> None:
    c = client(new_app())
    cookie = c.get("/").headers["set-cookie"]
    assert cookie.startswith("tether_csrf=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie


def test_cancel_and_bulk_retry_and_purge() -> None:
    app = new_app()
    first, second = dead_job(app), dead_job(app)
    waiting = app.enqueue("mail.send", {}).job
    c = client(app)
    token = token_of(c, "/jobs?status=dead")
    assert post(c, f"/jobs/{waiting.id}/cancel", {"confirm": "yes"}, token=token).status_code == 303
    assert app.get(waiting.id).status is JobStatus.CANCELLED
    assert post(c, f"/jobs/{waiting.id}/cancel", {"confirm": "yes"}, token=token).status_code == 409  # finished already
    asked = post(c, "/jobs/retry", {"job_id": [str(first.id), str(second.id)]}, token=token)
    assert asked.status_code == 200 and "Retry 2 selected job(s)?" in asked.text
    done = post(c, "/jobs/retry", {"job_id": [str(first.id), str(second.id)], "confirm": "yes"}, token=token)
    assert done.status_code == 303
    assert {app.get(first.id).status, app.get(second.id).status} == {JobStatus.QUEUED}
    assert post(c, "/purge", {"older_than": "yesterday"}, token=token).status_code == 400
    assert post(c, "/purge", {"older_than": "2000-01-01T00:00:00"}, token=token).status_code == 400  # no offset
    assert post(c, "/purge", {"older_than": "2999-01-01", "confirm": "yes"}, token=token).status_code == 303
    with pytest.raises(JobNotFound):
        app.get(waiting.id)  # the cancelled job finished before 2999: purged


def test_bulk_retry_refuses_bad_selections() -> None:
    app = new_app()
    c = client(app)
    token = token_of(c)
    assert post(c, "/jobs/retry", {}, token=token).status_code == 400
    assert post(c, "/jobs/retry", {"job_id": "x"}, token=token).status_code == 400
    assert post(c, "/jobs/retry", {"job_id": [str(i) for i in range(1, 502)]}, token=token).status_code == 400


def test_pausing_and_resuming_a_queue_asks_then_acts_and_logs_who(caplog: pytest.LogCaptureFixture) -> None:
    app = new_app()
    app.enqueue("mail.send", {}, queue="mail")
    c = client(app)
    token = token_of(c, "/queues")
    page = c.get("/queues").text
    assert "/queues/mail/pause" in page and "/queues/mail/resume" not in page  # active: only Pause offered
    asked = post(c, "/queues/mail/pause", {}, token=token)
    assert asked.status_code == 200 and "Pause queue mail?" in asked.text
    assert not any(q.paused for q in app.queues())  # asking changes nothing
    with caplog.at_level(logging.INFO, logger="tether.web.audit"):
        assert post(c, "/queues/mail/pause", {"confirm": "yes"}, token=token).status_code == 303
    assert f"{USER} paused queue mail" in caplog.text
    assert [q.paused for q in app.queues() if q.name == "mail"] == [True]
    assert app.repository.lease(queues=["mail"], worker_id="w", now=app.clock.now(), lease_timeout=30) == []
    page = c.get("/queues").text
    assert "paused" in page and "/queues/mail/resume" in page and "/queues/mail/pause" not in page
    app.limit_queue("idle", max_running=3)  # controls of a queue with no job are listed too
    assert "at most 3 running" in c.get("/queues").text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tether.web.audit"):
        assert post(c, "/queues/mail/resume", {"confirm": "yes"}, token=token).status_code == 303
    assert f"{USER} resumed queue mail" in caplog.text
    assert [q.paused for q in app.queues() if q.name == "mail"] == [False]
    assert len(app.repository.lease(queues=["mail"], worker_id="w", now=app.clock.now(), lease_timeout=30)) == 1
    assert post(c, "/queues/bad%20name/resume", {"confirm": "yes"}, token=token).status_code == 400


def test_queue_actions_use_the_apps_pause_when_it_has_one() -> None:
    app = new_app()
    calls: list[tuple[str, str]] = []
    app.pause_queue = lambda name: calls.append(("pause", name))  # type: ignore[attr-defined]
    app.resume_queue = lambda name: calls.append(("resume", name))  # type: ignore[attr-defined]
    app.enqueue("mail.send", {}, queue="mail")
    c = client(app)
    token = token_of(c, "/queues")
    assert "/queues/mail/pause" in c.get("/queues").text
    assert post(c, "/queues/mail/pause", {"confirm": "yes"}, token=token).status_code == 303
    assert post(c, "/queues/mail/resume", {"confirm": "yes"}, token=token).status_code == 303
    assert calls == [("pause", "mail"), ("resume", "mail")]


def test_read_only_hides_and_refuses_every_action() -> None:
    app = new_app()
    job = dead_job(app)
    c = client(app, read_only=True)
    page = c.get(f"/jobs/{job.id}").text
    assert f"/jobs/{job.id}/retry" not in page and "read-only" in page
    assert 'action="/jobs/retry"' not in c.get("/jobs?status=dead").text
    token = token_of(c)
    answer = post(c, f"/jobs/{job.id}/retry", {"confirm": "yes"}, token=token)
    assert answer.status_code == 403 and "read-only" in answer.text
    assert app.get(job.id).status is JobStatus.DEAD


def test_mounted_under_a_path_its_links_and_cookie_follow() -> None:
    app = new_app()
    job = dead_job(app)
    outer = Starlette(routes=[Mount("/ops/tether", create_app(app, username=USER, password=PASSWORD))])
    c = TestClient(outer, base_url="http://testserver")
    c.auth = (USER, PASSWORD)
    page = c.get(f"/ops/tether/jobs/{job.id}")
    assert page.status_code == 200
    assert 'href="/ops/tether/static/dashboard.css"' in page.text and f'action="/ops/tether/jobs/{job.id}/retry"' in page.text
    assert "Path=/ops/tether" in page.headers["set-cookie"]
    token = token_of(c, f"/ops/tether/jobs/{job.id}")
    done = post(c, f"/ops/tether/jobs/{job.id}/retry", {"confirm": "yes"}, token=token)
    assert done.headers["location"] == f"/ops/tether/jobs/{job.id}?done=retry"


class JobPortOnly:
    """A repository with the job port and the registry but no overview reads (a third party's)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("browse_jobs", "status_totals", "queue_summaries", "finished_per_minute"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_without_the_overview_port_still_shows_counts_and_jobs_by_id() -> None:
    from tether import Tether
    from tether.adapters.clock import SystemClock
    from tether.adapters.memory import InMemoryJobRepository
    from tether.adapters.polling import PollingDispatcher

    inner = InMemoryJobRepository()
    clock = SystemClock()
    app = Tether(JobPortOnly(inner), PollingDispatcher(inner, clock), clock)  # type: ignore[arg-type]
    app.register("mail.send", lambda payload: None)
    job = app.enqueue("mail.send", {"n": 1}).job
    c = client(app)
    overview = c.get("/")
    assert overview.status_code == 200 and 'data-live="status.queued">1<' in overview.text
    assert "does not report finished jobs" in overview.text
    assert "cannot list jobs page by page" in c.get("/jobs").text
    assert c.get(f"/jobs/{job.id}").status_code == 200
