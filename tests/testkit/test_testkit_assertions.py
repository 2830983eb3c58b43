"""assert_enqueued / assert_not_enqueued / enqueued_jobs, and what their failure messages show."""

from __future__ import annotations

from unittest import mock

import pytest
from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether
from tether.testing import ANY, assert_enqueued, assert_not_enqueued, drain, enqueued_jobs, fake_app


@pytest.fixture
def app() -> Tether:
    app = fake_app()
    app.enqueue("emails.send", {"to": "ada@example.com", "template": "welcome"})
    app.enqueue("emails.send", {"to": "bob@example.com", "template": "welcome"}, queue="mail")
    app.enqueue("reports.build", {"month": "2026-02"})
    return app


def test_assert_enqueued_returns_the_matching_jobs(app: Tether) -> None:
    jobs = assert_enqueued(app, "emails.send")
    assert [j.payload["to"] for j in jobs] == ["ada@example.com", "bob@example.com"]
    assert assert_enqueued(app, "emails.send", count=2) == jobs
    [job] = assert_enqueued(app, "emails.send", {"template": "welcome", "to": "bob@example.com"}, count=1)
    assert job.queue == "mail"
    assert assert_enqueued(app, "emails.send", queue="mail") == [job]
    assert assert_enqueued(app, "emails.send", {"to": mock.ANY, "template": "welcome"}, count=2) == jobs
    assert assert_enqueued(app, "emails.send", {"to": "ada@example.com", "template": ANY}, count=1) == jobs[:1]
    assert assert_enqueued(app, "nothing.like.this", count=0) == []


def test_a_wrong_payload_shows_every_job_and_the_keys_that_differ(app: Tether) -> None:
    with pytest.raises(AssertionError) as raised:
        assert_enqueued(app, "emails.send", {"to": "ada@example.com", "template": "goodbye"}, count=1)
    assert str(raised.value) == (
        "expected exactly 1 job(s) 'emails.send' payload={'to': 'ada@example.com', 'template': 'goodbye'}, found 0; "
        "enqueued were:\n"
        '  #1 emails.send queue=default status=queued payload={"template":"welcome","to":"ada@example.com"}\n'
        "      differs: 'template': expected 'goodbye', got 'welcome'\n"
        '  #2 emails.send queue=mail status=queued payload={"template":"welcome","to":"bob@example.com"}\n'
        "      differs: 'to': expected 'ada@example.com', got 'bob@example.com'; 'template': expected 'goodbye', got 'welcome'\n"
        '  #3 reports.build queue=default status=queued payload={"month":"2026-02"}'
    )


def test_missing_and_unexpected_keys_are_named(app: Tether) -> None:
    with pytest.raises(AssertionError) as raised:
        assert_enqueued(app, "reports.build", {"year": 2026})
    message = str(raised.value)
    assert message.startswith("expected at least 1 job(s) 'reports.build' payload={'year': 2026}, found 0; enqueued were:\n")
    assert "      differs: missing ['year']; unexpected ['month']" in message


def test_a_wrong_count_says_how_many_were_found(app: Tether) -> None:
    with pytest.raises(AssertionError) as raised:
        assert_enqueued(app, "emails.send", count=1)
    first = str(raised.value).splitlines()[0]
    assert first == "expected exactly 1 job(s) 'emails.send', found 2; enqueued were:"
    with pytest.raises(AssertionError) as raised:
        assert_enqueued(app, "emails.send", queue="default", count=2)
    assert str(raised.value).splitlines()[0] == "expected exactly 2 job(s) 'emails.send' queue='default', found 1; enqueued were:"


def test_nothing_enqueued_says_so() -> None:
    with pytest.raises(AssertionError) as raised:
        assert_enqueued(fake_app(), "emails.send")
    assert str(raised.value) == "expected at least 1 job(s) 'emails.send', found 0; enqueued were:\n  (no jobs at all)"


def test_long_lists_and_payloads_are_cut() -> None:
    app = fake_app()
    for n in range(55):
        app.enqueue("bulk", {"n": n, "blob": "x" * 400})
    with pytest.raises(AssertionError) as raised:
        assert_enqueued(app, "other")
    lines = str(raised.value).splitlines()
    assert lines[-1] == "  ... and 5 more"
    assert len(lines) == 1 + 50 + 1
    assert lines[1].endswith("... (417 chars)")  # {"blob":"x...x","n":0}: 8 + 402 + 7


def test_assert_not_enqueued(app: Tether) -> None:
    assert_not_enqueued(app, "reports.send")
    assert_not_enqueued(app, "emails.send", {"to": "carol@example.com", "template": "welcome"})
    assert_not_enqueued(app, "reports.build", queue="mail")
    with pytest.raises(AssertionError) as raised:
        assert_not_enqueued(app, "emails.send", queue="mail")
    assert str(raised.value) == (
        "expected no job 'emails.send' queue='mail', found 1:\n"
        '  #2 emails.send queue=mail status=queued payload={"template":"welcome","to":"bob@example.com"}'
    )


def test_enqueued_jobs_filters_and_finished_jobs_still_count(app: Tether) -> None:
    app.register("emails.send", lambda payload: None)
    drain(app)  # emails complete; reports.build has no handler here and is left queued (pending)
    assert [j.id for j in enqueued_jobs(app)] == [1, 2, 3]
    assert [j.id for j in enqueued_jobs(app, "emails.send")] == [1, 2]
    assert [j.id for j in enqueued_jobs(app, "emails.send", {"to": "bob@example.com", "template": "welcome"})] == [2]
    assert [j.id for j in enqueued_jobs(app, status=JobStatus.QUEUED)] == [3]
    assert enqueued_jobs(app, status=JobStatus.DEAD) == []
    assert [j.id for j in enqueued_jobs(app, status="completed", queue="default")] == [1]
    assert len(assert_enqueued(app, "emails.send", count=2)) == 2


def test_arguments_in_the_wrong_order_fail_clearly(app: Tether) -> None:
    with pytest.raises(TypeError, match="assert_enqueued: the first argument must be the tether.Tether app under test, got str"):
        assert_enqueued("emails.send", app)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="enqueued_jobs"):
        enqueued_jobs(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count: must be an integer >= 0"):
        assert_enqueued(app, "emails.send", count=-1)
    with pytest.raises(ValueError, match="count"):
        assert_enqueued(app, "emails.send", count=True)
