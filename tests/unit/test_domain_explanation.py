"""The rules of ``jobs why`` as pure functions: every verdict, with its exact text, from given facts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest
from tether.domain import transitions
from tether.domain.explanation import RULES, JobFacts, explain, span
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job
from tether.domain.workers import WorkerEntry

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TOKEN = "secret-token-0123456789"


def job(**changes: object) -> Job:
    new = prepare_job("reports.build", {"n": 1}, now=NOW - timedelta(minutes=5), run_at=NOW - timedelta(minutes=5))
    return attrs.evolve(transitions.create(new, job_id=42, now=NOW - timedelta(minutes=5)), **changes)


def worker(worker_id: str = "w-1", *, seen_ago: float = 1.0, gone: bool = False, **changes: object) -> WorkerEntry:
    fields: dict[str, object] = {
        "worker_id": worker_id, "host": "h", "pid": 1, "queues": None, "job_types": ("reports.build",),
        "concurrency": 4, "version": "0.1.0", "dispatcher": "polling", "heartbeat_interval": 10.0,
        "started_at": NOW - timedelta(hours=1), "last_seen_at": NOW - timedelta(seconds=seen_ago), "gone": gone,
    }
    fields.update(changes)
    return WorkerEntry(**fields)  # type: ignore[arg-type]


def running(**changes: object) -> Job:
    fields: dict[str, object] = {
        "status": JobStatus.RUNNING, "attempts": 1, "lease_token": TOKEN, "leased_by": "w-1",
        "leased_at": NOW - timedelta(minutes=2), "lease_expires_at": NOW + timedelta(minutes=13),
    }
    fields.update(changes)
    return job(**fields)


def verdict(facts: JobFacts) -> tuple[str, str]:
    result = explain(facts)
    return result.reason, result.verdict


def test_the_rules_are_tried_in_this_order() -> None:
    assert [reason for reason, _ in RULES] == [
        "completed", "dead", "running", "scheduled", "retrying", "paused", "no_worker", "limited", "key_limited", "rate_limited",
        "waiting", "next", "status"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (45, "45 s"), (60, "1 min"), (725, "12 min 5 s"), (3600, "1 h"), (11_040, "3 h 4 min"),
     (183_600, "2 d 3 h"), (-5, "0 s"), (86_400, "1 d")],
)
def test_span_says_a_duration_in_words(seconds: float, text: str) -> None:
    assert span(timedelta(seconds=seconds)) == text


def test_completed() -> None:
    done = job(status=JobStatus.COMPLETED, attempts=2, finished_at=NOW - timedelta(seconds=30))
    assert verdict(JobFacts(done, NOW)) == ("completed", "completed at 2026-01-01 11:59:30 UTC after 2 attempts")


def test_dead_quotes_the_first_line_of_the_last_error() -> None:
    gone = job(status=JobStatus.DEAD, attempts=3, finished_at=NOW, last_error="ValueError: boom\n  at line 3")
    assert verdict(JobFacts(gone, NOW)) == ("dead", "dead after 3 attempts; last error: ValueError: boom")
    silent = job(status=JobStatus.DEAD, attempts=1, finished_at=NOW)
    assert verdict(JobFacts(silent, NOW)) == ("dead", "dead after 1 attempt")
    long = job(status=JobStatus.DEAD, attempts=1, finished_at=NOW, last_error="E: " + "x" * 500)
    text = explain(JobFacts(long, NOW)).verdict
    assert text.endswith("x…") and len(text.split("last error: ")[1]) == 200
    assert explain(JobFacts(long, NOW)).fact("last_error") == "E: " + "x" * 500  # the facts keep it whole


def test_running_says_where_until_when_and_whether_the_worker_is_alive() -> None:
    base = "running on worker w-1 since 2026-01-01 11:58:00 UTC, lease until 2026-01-01 12:13:00 UTC"
    assert verdict(JobFacts(running(), NOW)) == ("running", base)  # no registry: nothing said about the worker
    assert verdict(JobFacts(running(), NOW, (worker(seen_ago=4),))) == (
        "running", base + " (worker w-1 is alive, last seen 4 s ago)")
    assert verdict(JobFacts(running(), NOW, (worker(seen_ago=95, gone=True),))) == (
        "running", base + " (worker w-1 is gone, last seen 1 min 35 s ago)")
    assert verdict(JobFacts(running(), NOW, (worker("w-2"),))) == (
        "running", base + " (worker w-1 is not in the worker registry)")


def test_running_under_an_expired_lease_says_the_reaper_takes_it_back() -> None:
    expired = running(lease_expires_at=NOW - timedelta(seconds=1))
    assert verdict(JobFacts(expired, NOW, (worker(seen_ago=600, gone=True),))) == (
        "running",
        ("running on worker w-1 since 2026-01-01 11:58:00 UTC; its lease expired at 2026-01-01 11:59:59 UTC, so the reaper "
        "takes it back at its next pass (worker w-1 is gone, last seen 10 min ago)"),
    )


def test_scheduled_for_later() -> None:
    later = job(scheduled_at=NOW + timedelta(hours=2, minutes=30))
    assert verdict(JobFacts(later, NOW, ())) == ("scheduled", "scheduled for later: due at 2026-01-01 14:30:00 UTC, in 2 h 30 min")


def test_retrying_later_after_a_failed_attempt() -> None:
    retry = job(status=JobStatus.RETRYING, attempts=2, scheduled_at=NOW + timedelta(seconds=8), last_error="OSError: disk full")
    assert verdict(JobFacts(retry, NOW, ())) == (
        "retrying", "retrying at 2026-01-01 12:00:08 UTC (in 8 s) after attempt 2 failed with OSError: disk full")


def test_no_live_worker_handles_its_type_on_its_queue() -> None:
    due = job()
    expected = ("no_worker", "no live worker handles job type reports.build on queue default")
    assert verdict(JobFacts(due, NOW, (), 0)) == expected
    others = (
        worker("gone", gone=True),
        worker("other-queue", queues=("emails",)),
        worker("other-type", job_types=("emails.send",)),
    )
    assert verdict(JobFacts(due, NOW, others, 0)) == expected
    assert explain(JobFacts(due, NOW, others, 0)).fact("live_workers") == ()
    retry_due = job(status=JobStatus.RETRYING, attempts=1, last_error="E")
    assert verdict(JobFacts(retry_due, NOW, others, 0)) == expected


def test_waiting_behind_the_due_jobs_that_go_first() -> None:
    live = (worker(queues=("default",)),)
    assert verdict(JobFacts(job(), NOW, live, 1)) == ("waiting", "waiting behind 1 due job of queue default that goes first")
    assert verdict(JobFacts(job(), NOW, live, 1234)) == (
        "waiting", "waiting behind 1,234 due jobs of queue default that go first")
    assert verdict(JobFacts(job(), NOW, live, 10_000)) == (
        "waiting", "waiting behind 10,000+ due jobs of queue default that go first")
    assert verdict(JobFacts(job(), NOW, None, 3)) == ("waiting", "waiting behind 3 due jobs of queue default that go first")


def test_next_in_line() -> None:
    assert verdict(JobFacts(job(), NOW, (worker(),), 0)) == (
        "next", "due since 2026-01-01 11:55:00 UTC and first in line on queue default: the next lease there takes it")


def test_the_facts_follow_the_status_and_never_hold_the_lease_token() -> None:
    result = explain(JobFacts(running(), NOW, (worker(seen_ago=4),)))
    assert [f.name for f in result.facts] == [
        "status", "job_type", "queue", "priority", "attempts", "max_attempts", "created_at",
        "leased_by", "leased_at", "lease_expires_at", "worker_status", "worker_last_seen_at"]
    assert result.fact("worker_status") == "alive" and result.fact("lease_expires_at") == NOW + timedelta(minutes=13)
    assert TOKEN not in repr(result)
    waiting = explain(JobFacts(job(last_error="E: old"), NOW, (worker(),), 10_000))
    assert [(f.name, f.value) for f in waiting.facts][7:] == [
        ("due_at", NOW - timedelta(minutes=5)), ("due_ahead", 10_000), ("due_ahead_capped", True),
        ("live_workers", ("w-1",)), ("last_error", "E: old")]
    many = tuple(worker(f"w-{n}") for n in range(7))
    assert explain(JobFacts(job(), NOW, many, 0)).fact("live_workers") == ("w-0", "w-1", "w-2", "w-3", "w-4", "and 2 more")
    done = explain(JobFacts(job(status=JobStatus.COMPLETED, attempts=1, finished_at=NOW), NOW))
    assert [f.name for f in done.facts][7:] == ["finished_at"]
    assert (done.job_id, done.status) == (42, JobStatus.COMPLETED)


# -- queue controls --------------------------------------------------------------------------------
def test_a_paused_queue_is_the_reason_a_due_job_waits() -> None:
    from tether.domain.queues import QueueState

    state = QueueState("default", paused=True, updated_at=NOW - timedelta(minutes=3))
    result = explain(JobFacts(job(), NOW, (), due_ahead=4, queue_state=state))  # no live worker either: pause wins
    assert result.reason == "paused"
    assert result.verdict == "queue default is paused since 2026-01-01 11:57:00 UTC: no worker starts its jobs until it is resumed"
    assert (result.fact("queue_paused"), result.fact("queue_max_running")) == (True, None)
    later = job(scheduled_at=NOW + timedelta(minutes=1))
    assert explain(JobFacts(later, NOW, queue_state=state)).reason == "scheduled"


def test_a_queue_at_its_limit_is_the_reason_a_due_job_waits() -> None:
    from tether.domain.queues import QueueState

    state = QueueState("default", max_running=3)
    full = explain(JobFacts(job(), NOW, (worker(),), due_ahead=0, queue_state=state, queue_running=3))
    assert full.reason == "limited"
    assert full.verdict.startswith("queue default is at its running limit: 3 of at most 3 jobs running")
    assert full.fact("queue_running") == 3
    room = explain(JobFacts(job(), NOW, (worker(),), due_ahead=0, queue_state=state, queue_running=2))
    assert room.reason == "next"


def test_a_key_at_the_per_key_limit_is_the_reason_a_due_job_waits() -> None:
    from tether.domain.queues import QueueState

    state = QueueState("default", max_running_per_key=1)
    keyed = job(concurrency_key="customer-42")
    full = explain(JobFacts(keyed, NOW, (worker(),), due_ahead=0, queue_state=state, key_running=1))
    assert full.reason == "key_limited"
    assert full.verdict == (
        "waiting: 1 job of concurrency key customer-42 already running, the queue's per-key limit (at most 1 per key)"
    )
    assert (full.fact("concurrency_key"), full.fact("key_running"), full.fact("queue_max_running_per_key")) == (
        "customer-42", 1, 1)
    assert explain(JobFacts(keyed, NOW, (worker(),), due_ahead=0, queue_state=state, key_running=0)).reason == "next"
    # no key, or a queue at its running limit first: that limit is the reason
    assert explain(JobFacts(job(), NOW, (worker(),), due_ahead=0, queue_state=state, key_running=3)).reason == "next"
    both = attrs.evolve(state, max_running=2)
    assert explain(JobFacts(keyed, NOW, (worker(),), due_ahead=0, queue_state=both, queue_running=2,
                            key_running=1)).reason == "limited"
    two = explain(JobFacts(keyed, NOW, (worker(),), due_ahead=0, queue_state=attrs.evolve(state, max_running_per_key=2),
                           key_running=2))
    assert two.verdict.startswith("waiting: 2 jobs of concurrency key customer-42 already running")


def test_a_spent_rate_window_is_the_reason_a_due_job_waits() -> None:
    from tether.domain.queues import QueueState

    window = datetime(2026, 1, 1, 11, 59, tzinfo=UTC)  # NOW is 12:00:00, in the window 12:00-12:01
    spent = QueueState("default", rate_limit=5, rate_period=60.0, window_start=NOW, window_starts=5)
    result = explain(JobFacts(job(), NOW, (worker(),), due_ahead=0, queue_state=spent))
    assert result.reason == "rate_limited"
    assert result.verdict == (
        "queue default is at its rate limit: 5 jobs started in this window of 60 s; "
        "the next window begins at 2026-01-01 12:01:00 UTC"
    )
    assert (result.fact("queue_rate_limit"), result.fact("queue_started_in_window")) == (5, 5)
    old = QueueState("default", rate_limit=5, rate_period=60.0, window_start=window, window_starts=5)
    assert explain(JobFacts(job(), NOW, (worker(),), due_ahead=0, queue_state=old)).reason == "next"


def test_a_periodic_ticks_job_names_its_schedule_and_tick() -> None:
    from tether.domain.schedules import tick_key, tick_of

    at = datetime(2026, 1, 1, 3, 0, tzinfo=UTC)
    tick = job(idempotency_key=tick_key("nightly:report", at))
    facts = {f.name: f.value for f in explain(JobFacts(tick, NOW, ())).facts}
    assert facts["schedule"] == "nightly:report" and facts["tick"] == at  # a name may hold ':'
    plain = {f.name for f in explain(JobFacts(job(idempotency_key="order-7"), NOW, ())).facts}
    assert "schedule" not in plain and "tick" not in plain
    assert tick_of("order-7") is None and tick_of(None) is None
    assert tick_of(tick_key("x", at)[:-3] + "abc") is None  # a damaged key names nothing
