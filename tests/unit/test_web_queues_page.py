"""The dashboard's queues page: each queue with live jobs and its controls, then the queues
without live jobs that are paused or limited, and the default queue, each with its action."""

from __future__ import annotations

from tests.web_support import client, new_app, post, token_of


def test_the_queue_page_shows_each_queues_controls() -> None:
    app = new_app()
    app.enqueue("mail.send", {}, queue="mail")
    app.enqueue("mail.send", {}, queue="plain")
    app.limit_queue("mail", max_running=2)
    app.rate_limit_queue("mail", starts=10, per=1.0)
    app.pause_queue("reports")  # no job: listed below the live queues
    page = client(app).get("/queues").text
    assert "not available in this version" not in page
    mail = page[page.index('data-controls="mail"'):].split("</td>", 1)[0]
    assert "active" in mail and "at most 2 running" in mail and "10 starts per 1.0 s" in mail
    plain = page[page.index('data-controls="plain"'):].split("</td>", 1)[0]
    assert "active" in plain and "running" not in plain
    assert "Queues without live jobs" in page
    reports = page[page.index('data-controls="reports"'):].split("</td>", 1)[0]
    assert "paused" in reports and "/queues/reports/resume" in page and "/queues/reports/pause" not in page
    default = page[page.index('data-controls="default"'):].split("</tr>", 1)[0]  # no job, no control
    assert "active" in default and "/queues/default/pause" in default


def test_the_default_queue_is_listed_once_whether_or_not_it_holds_live_jobs() -> None:
    app = new_app()
    assert client(app).get("/queues").text.count('data-controls="default"') == 1
    app.enqueue("mail.send", {})
    page = client(app).get("/queues").text
    assert page.count('data-controls="default"') == 1 and "Queues without live jobs" not in page


def test_a_pause_is_confirmed_plainly_and_then_announced() -> None:
    app = new_app()
    c = client(app)
    token = token_of(c, "/queues")
    asked = post(c, "/queues/default/pause", {}, token=token)
    assert "Pause queue default?" in asked.text and 'class="danger"' not in asked.text  # nothing is lost
    done = post(c, "/queues/default/pause", {"confirm": "yes"}, token=token)
    assert done.status_code == 303 and done.headers["location"].endswith("/queues?done=pause")
    page = c.get(done.headers["location"]).text
    assert 'class="flash" role="status">Queue paused: no worker starts its jobs until it is resumed.' in page
    resumed = post(c, "/queues/default/resume", {"confirm": "yes"}, token=token)
    assert "Queue resumed." in c.get(resumed.headers["location"]).text


def test_a_cancel_and_a_purge_are_confirmed_with_the_danger_button() -> None:
    app = new_app()
    job = app.enqueue("mail.send", {}).job
    c = client(app)
    token = token_of(c)
    assert 'class="danger">Confirm' in post(c, f"/jobs/{job.id}/cancel", {}, token=token).text
    assert 'class="danger">Confirm' in post(c, "/purge", {"older_than": "2020-01-01"}, token=token).text
