"""fake_app: a real tether.Tether on the in-memory store, a FakeClock and the polling dispatcher."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tether.adapters.clock import FakeClock, SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.service import Tether
from tether.testing import fake_app


def test_it_is_the_production_class_wired_to_memory_and_the_given_clock() -> None:
    clock = FakeClock(datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC))
    app = fake_app(clock)
    assert type(app) is Tether
    assert isinstance(app.repository, InMemoryJobRepository)
    assert isinstance(app.dispatcher, PollingDispatcher)
    assert app.clock is clock
    job = app.enqueue("emails.send", {"to": "a@b.c"}, delay=30).job
    assert job.created_at == datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert job.scheduled_at == datetime(2030, 5, 6, 7, 8, 39, tzinfo=UTC)
    assert app.counts()[JobStatus.QUEUED] == 1


def test_each_call_gives_a_fresh_store_and_a_clock_at_2026() -> None:
    first, second = fake_app(), fake_app()
    first.enqueue("a.b", {})
    assert first.list() != [] and second.list() == []
    assert isinstance(second.clock, FakeClock)
    assert second.clock.now() == datetime(2026, 1, 1, tzinfo=UTC)


def test_tether_options_are_passed_through() -> None:
    policy = RetryPolicy(base_seconds=5, cap_seconds=60, jitter=0)
    app = fake_app(retry_policy=policy, default_queue="mail", default_max_attempts=7, max_payload_bytes=100)
    job = app.enqueue("emails.send", {}).job
    assert (job.queue, job.max_attempts) == ("mail", 7)
    assert app.retry_policy is policy
    with pytest.raises(ValidationError) as raised:
        app.enqueue("emails.send", {"body": "x" * 200})
    assert raised.value.field == "payload"
    assert app.list() == [job]


def test_handlers_are_copied_from_another_app_with_their_defaults() -> None:
    production = fake_app()
    seen: list[object] = []

    @production.handler("reports.build", queue="reports", max_attempts=9)
    def build(payload: dict) -> None:
        seen.append(payload)

    app = fake_app(handlers=production.handlers)
    assert app.handlers["reports.build"].func is build
    job = app.enqueue("reports.build", {"month": 2}).job
    assert (job.queue, job.max_attempts) == ("reports", 9)
    # the copy is independent: registering on one does not register on the other
    app.register("extra.one", lambda payload: None)
    assert "extra.one" not in production.handlers


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValidationError) as raised:
        fake_app(SystemClock())  # type: ignore[arg-type]
    assert raised.value.field == "clock"
    with pytest.raises(ValidationError) as raised:
        fake_app(handlers=[lambda payload: None])  # type: ignore[list-item]
    assert raised.value.field == "handlers[0]"
    with pytest.raises(ValidationError) as raised:
        fake_app(default_max_attempts=0)
    assert raised.value.field == "default_max_attempts"
    with pytest.raises(TypeError):
        fake_app(no_such_option=1)


def test_a_real_worker_pool_runs_on_the_fake_app() -> None:
    app = fake_app()
    done: list[int] = []

    @app.handler("count.up")
    def count_up(payload: dict) -> None:
        done.append(payload["n"])

    for n in range(3):
        app.enqueue("count.up", {"n": n})
    stats = app.worker(concurrency=2, worker_id="fake-pool").run(stop_when_idle=True, install_signal_handlers=False)
    assert sorted(done) == [0, 1, 2]
    assert stats.completed == 3
    assert app.counts()[JobStatus.COMPLETED] == 3
    assert all(job.finished_at == app.clock.now() for job in app.list())
    app.close()


def test_time_only_moves_when_told() -> None:
    app = fake_app()
    assert isinstance(app.clock, FakeClock)
    before = app.clock.now()
    app.enqueue("a.b", {}, delay=timedelta(hours=1))
    assert app.clock.now() == before
    app.clock.advance(hours=1)
    assert app.repository.due_jobs(now=app.clock.now(), queues=None, limit=10)[0].job_type == "a.b"
