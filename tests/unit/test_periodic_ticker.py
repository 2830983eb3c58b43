"""Periodic schedules through one pool's ticker passes on the memory store with a fake clock:
catch-up after downtime, purge, a DST day, changed and removed schedules, drain and idleness."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import pytest
import tether
from tether.adapters.clock import FakeClock
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.schedules import is_tick_key, tick_key
from tether.entrypoints.service import Tether
from tether.entrypoints.worker.ticker import Ticker
from tether.testing import drain


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _on(repo: InMemoryJobRepository, clock: FakeClock) -> Tether:
    """An app on ``repo`` (several apps on one store stand for several processes)."""
    return Tether(repo, PollingDispatcher(repo, clock), clock)


def ticker(app: Tether, worker_id: str = "w1", heartbeat: float = 1.0) -> Ticker:
    """A pool's ticker for ``app`` (one pass at a time, no thread)."""
    return Ticker(
        store=app.schedule_store, repository=app.repository, dispatcher=app.dispatcher, clock=app.clock,
        schedules=app.periodic_schedules, prepare=app._prepare_tick, worker_id=worker_id,
        heartbeat_interval=heartbeat, ratelog=RateLimitedLog(logging.getLogger("test")),
    )


def tick_jobs(app: Tether) -> list:
    return [j for j in app.list(limit=10_000) if is_tick_key(j.idempotency_key)]


def run_due(app: Tether) -> None:
    drain(app, advance_clock=False)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(utc(2026, 1, 1, 0, 0, 0))


@pytest.fixture
def repo() -> InMemoryJobRepository:
    return InMemoryJobRepository()


def test_a_tick_is_enqueued_ahead_due_at_its_instant_and_run_once(repo, clock) -> None:
    app = _on(repo, clock)
    app.register("beat", lambda payload: None)
    app.periodic("beat", "beat", every=10, payload={"n": 1})
    t = ticker(app)
    t.declare_once()
    [job] = t.tick_once()
    assert job.scheduled_at == utc(2026, 1, 1, 0, 0, 10) and job.payload == {"n": 1}
    assert job.idempotency_key == tick_key("beat", job.scheduled_at)
    assert t.tick_once() == []  # one tick ahead at most
    [state] = app.schedules()
    assert state.last_job_id == job.id and state.next_tick_at == job.scheduled_at and state.spec == "every 10s"


def test_catch_up_after_downtime_runs_the_latest_missed_tick_once(repo, clock) -> None:
    app = _on(repo, clock)
    app.register("beat", lambda payload: None)
    app.periodic("beat", "beat", every=60)
    t = ticker(app)
    t.declare_once()
    assert [j.scheduled_at for j in t.tick_once()] == [utc(2026, 1, 1, 0, 1)]
    clock.advance(61)
    run_due(app)
    clock.advance(3600)  # an hour without a worker
    restarted = ticker(app, "w2")
    restarted.declare_once()
    [late] = restarted.tick_once()
    assert late.scheduled_at == utc(2026, 1, 1, 1, 1) and late.scheduled_at <= clock.now()
    run_due(app)
    [following] = restarted.tick_once()
    assert following.scheduled_at == utc(2026, 1, 1, 1, 2)
    assert len(tick_jobs(app)) == 3


def test_a_tick_enqueued_ahead_before_a_downtime_is_cancelled_when_a_later_tick_is_due(repo, clock) -> None:
    """The pool enqueued the 00:01 tick ahead and stopped before it ran; back at 02:30, that job is
    an older missed tick: it is cancelled and only the latest missed tick (02:00) runs, once."""
    app = _on(repo, clock)
    runs: list[datetime] = []
    app.register("beat", lambda payload, ctx: runs.append(ctx.job.scheduled_at))
    app.periodic("beat", "beat", cron="0 * * * *")
    t = ticker(app)
    t.declare_once()
    clock.set(utc(2026, 1, 1, 0, 59, 30))
    [ahead] = t.tick_once()
    assert ahead.scheduled_at == utc(2026, 1, 1, 1)
    clock.set(utc(2026, 1, 1, 2, 30))  # every pool was down from 00:59:30
    restarted = ticker(app, "w2")
    restarted.declare_once()
    [late] = restarted.tick_once()
    assert late.scheduled_at == utc(2026, 1, 1, 2)
    assert app.get(ahead.id).status is JobStatus.CANCELLED
    run_due(app)
    assert runs == [utc(2026, 1, 1, 2)]


def test_a_tick_enqueued_ahead_still_runs_after_a_downtime_shorter_than_its_period(repo, clock) -> None:
    app = _on(repo, clock)
    runs: list[datetime] = []
    app.register("beat", lambda payload, ctx: runs.append(ctx.job.scheduled_at))
    app.periodic("beat", "beat", cron="0 * * * *")
    t = ticker(app)
    t.declare_once()
    clock.set(utc(2026, 1, 1, 0, 59, 30))
    [ahead] = t.tick_once()
    clock.set(utc(2026, 1, 1, 1, 20))  # back before the 02:00 tick: 01:00 is still the latest
    restarted = ticker(app, "w2")
    restarted.declare_once()
    assert restarted.tick_once() == []
    run_due(app)
    assert runs == [utc(2026, 1, 1, 1)] and app.get(ahead.id).status is JobStatus.COMPLETED


def test_a_catch_up_window_skips_ticks_older_than_it(repo, clock) -> None:
    app = _on(repo, clock)
    app.register("beat", lambda payload: None)
    app.periodic("beat", "beat", cron="0 * * * *", catch_up=600, overlap=True)
    t = ticker(app)
    t.declare_once()
    clock.set(utc(2026, 1, 1, 0, 59, 30))
    assert len(t.tick_once()) == 1
    clock.set(utc(2026, 1, 1, 5, 20))  # the 05:00 tick is 20 minutes late: skipped
    assert t.tick_once() == []
    clock.set(utc(2026, 1, 1, 5, 59, 30))
    assert [j.scheduled_at for j in t.tick_once()] == [utc(2026, 1, 1, 6)]


def test_purged_past_ticks_are_not_run_again_by_a_catch_up(repo, clock) -> None:
    app = _on(repo, clock)
    runs: list[datetime] = []
    app.register("beat", lambda payload, ctx: runs.append(ctx.job.scheduled_at))
    app.periodic("beat", "beat", every=5)
    t = ticker(app)
    t.declare_once()
    for _ in range(4):
        t.tick_once()
        clock.advance(5)
        run_due(app)
    assert len(runs) == 4
    clock.advance(1)
    assert app.purge(older_than=timedelta(0)) == 4
    restarted = ticker(app, "w2")
    restarted.declare_once()
    created = restarted.tick_once()
    assert [j.scheduled_at for j in created] == [utc(2026, 1, 1, 0, 0, 25)]  # the next one, not the purged 00:20
    run_due(app)
    assert len(runs) == 4


def test_a_dst_day_in_paris_through_the_ticker_gives_the_documented_runs(repo) -> None:
    clock = FakeClock(utc(2026, 3, 28, 0))
    app = _on(repo, clock)
    runs: list[datetime] = []
    app.register("nightly", lambda payload, ctx: runs.append(ctx.job.scheduled_at))
    app.periodic("nightly", "nightly", cron="30 2 * * *", tz="Europe/Paris")
    t = ticker(app)
    t.declare_once()
    while clock.now() < utc(2026, 3, 31):
        t.tick_once()
        run_due(app)
        clock.advance(50)
    # 02:30 CET, then 03:00 CEST on the spring-forward day (02:30 does not exist), then 02:30 CEST
    assert runs == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]


def test_overlap_off_holds_the_next_tick_while_the_previous_job_waits(repo, clock) -> None:
    app = _on(repo, clock)
    app.register("beat", lambda payload: None)
    app.periodic("held", "beat", every=10, catch_up=0)
    app.periodic("free", "beat", every=10, overlap=True)
    t = ticker(app)
    t.declare_once()
    assert len(t.tick_once()) == 2
    clock.advance(10)  # both ticks due; nobody runs them
    created = t.tick_once()
    assert [j.idempotency_key.split(":")[2] for j in created] == ["free"]
    clock.advance(11)
    run_due(app)  # the held one's job finished; its tick at 00:20 is past, and catch_up is 0
    assert sorted(j.idempotency_key.split(":")[2] for j in t.tick_once()) == ["free", "held"]

    def ticks_of(name: str) -> list[int]:
        return [j.scheduled_at.second for j in tick_jobs(app) if j.idempotency_key.split(":")[2] == name]

    assert ticks_of("held") == [10, 30] and ticks_of("free") == [10, 20, 30]


def test_a_changed_definition_cancels_the_queued_tick_and_starts_afresh(repo, clock) -> None:
    app = _on(repo, clock)
    app.register("beat", lambda payload: None)
    app.periodic("beat", "beat", every=60)
    t = ticker(app)
    t.declare_once()
    [old] = t.tick_once()
    changed = _on(repo, clock)
    changed.register("beat", lambda payload: None)
    changed.periodic("beat", "beat", every=30)
    t2 = ticker(changed, "w2")
    assert t2.declare_once().cancelled == (old.id,)
    assert app.get(old.id).status is JobStatus.CANCELLED
    [new] = t2.tick_once()
    assert new.scheduled_at == utc(2026, 1, 1, 0, 0, 30)


def test_a_schedule_removed_from_the_code_stops(repo, clock) -> None:
    app = _on(repo, clock)
    app.register("beat", lambda payload: None)
    app.periodic("beat", "beat", every=60)
    t = ticker(app)
    t.declare_once()
    [queued] = t.tick_once()
    # the old pool is gone; a new version of the code has no schedule
    new_code = _on(repo, clock)
    new_code.register("beat", lambda payload: None)
    newcomer = ticker(new_code, "w2")
    assert newcomer.declare_once().cancelled == ()  # the old pool's declaration is still live
    clock.advance(6)  # past its lapse (5 s: three 1 s heartbeats, at least 5 s)
    assert newcomer.declare_once().cancelled == (queued.id,)
    clock.advance(120)
    assert newcomer.tick_once() == [] and app.get(queued.id).status is JobStatus.CANCELLED
    [state] = new_code.schedules()
    assert state.live is False and state.last_job_status is JobStatus.CANCELLED


def test_drain_does_not_wait_for_ticks_not_yet_due(repo, clock) -> None:
    app = _on(repo, clock)
    app.register("beat", lambda payload: None)
    app.periodic("beat", "beat", every=3600)
    t = ticker(app)
    t.declare_once()
    clock.set(utc(2026, 1, 1, 0, 59, 30))
    assert len(t.tick_once()) == 1
    report = drain(app)
    assert len(report) == 0 and clock.now() == utc(2026, 1, 1, 0, 59, 30)


@pytest.mark.timeout(60)
def test_run_stop_when_idle_does_not_wait_for_a_tick_not_yet_due(clock) -> None:
    app = tether.connect("memory://", clock=clock)  # the fake clock stands still: the tick never comes due
    app.register("beat", lambda payload: None)
    app.periodic("beat", "beat", every=60)
    with app.worker(concurrency=1, max_wait=0.05):  # a first pool enqueues the tick, 60 s ahead
        deadline = time.monotonic() + 10
        while not app.schedules() or app.schedules()[0].last_job_status is not JobStatus.QUEUED:
            assert time.monotonic() < deadline, app.schedules()
            time.sleep(0.02)
    app.enqueue("beat")
    pool = app.worker(concurrency=1, max_wait=0.05)
    started = time.monotonic()
    stats = pool.run(stop_when_idle=True, install_signal_handlers=False)
    assert stats.completed == 1 and time.monotonic() - started < 10
    [state] = app.schedules()
    assert state.last_job_status is JobStatus.QUEUED and state.last_tick_at == utc(2026, 1, 1, 0, 1)
    app.close()


def test_a_process_that_only_registers_schedules_writes_nothing(repo, clock) -> None:
    app = _on(repo, clock)
    app.periodic("beat", "beat", every=1)
    app.enqueue("beat")
    assert app.schedules() == [] and len(app.list()) == 1


def test_the_decorator_takes_the_handler_it_sits_on(repo, clock) -> None:
    app = _on(repo, clock)

    @app.periodic(cron="0 3 * * *", tz="Europe/Paris")
    @app.handler("reports.build")
    def build(payload: object) -> None:
        return None

    @app.periodic("weekly", every=604800)
    @app.handler
    def cleanup(payload: object) -> None:
        return None

    assert build.__name__ == "build"
    assert {n: s.job_type for n, s in app.periodic_schedules.items()} == {"reports.build": "reports.build", "weekly": "cleanup"}
    assert app.periodic_schedules["reports.build"].cadence.tz == "Europe/Paris"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "0 3 * * *", "tz": "Europe/Atlantis"}, "tz"),
        ({"every": 0.5}, "every"),
        ({}, "cron"),
        ({"cron": "0 3 * * *", "every": 60}, "cron"),
        ({"every": 60, "catch_up": -1}, "catch_up"),
        ({"every": 60, "catch_up": "soon"}, "catch_up"),
        ({"every": 60, "overlap": "no"}, "overlap"),
        ({"every": 60, "queue": "bad queue"}, "queue"),
        ({"every": 60, "priority": 2**40}, "priority"),
        ({"every": 60, "payload": {"x": float("nan")}}, "payload"),
    ],
)
def test_bad_input_names_the_field_and_registers_nothing(repo, clock, kwargs, field) -> None:
    app = _on(repo, clock)
    with pytest.raises(ValidationError) as caught:
        app.periodic("beat", "beat", **kwargs)
    assert caught.value.field == field or caught.value.field.startswith(field)
    assert dict(app.periodic_schedules) == {}


def test_a_bad_name_or_a_taken_name_is_refused(repo, clock) -> None:
    app = _on(repo, clock)
    with pytest.raises(ValidationError) as caught:
        app.periodic("no spaces", "beat", every=1)
    assert caught.value.field == "name"
    app.periodic("beat", "beat", every=1)
    with pytest.raises(ValidationError) as caught:
        app.periodic("beat", "other", every=5)
    assert caught.value.field == "name" and app.periodic_schedules["beat"].job_type == "beat"


def test_a_user_key_in_the_reserved_namespace_is_refused_and_nothing_is_written(repo, clock) -> None:
    app = _on(repo, clock)
    with pytest.raises(ValidationError) as caught:
        app.enqueue("beat", idempotency_key="tether:tick:beat:1")
    assert caught.value.field == "idempotency_key"
    with pytest.raises(ValidationError) as caught:
        app.enqueue_many([tether.EnqueueRequest("beat", idempotency_key="tether:mine")])
    assert caught.value.field == "requests[0].idempotency_key"
    assert app.list() == []
    assert app.find_by_key("tether:tick:beat:1") is None  # reading by such a key is allowed


def test_during_a_rolling_deploy_the_old_pools_refresh_cancels_nothing(repo, clock) -> None:
    old_code = _on(repo, clock)
    old_code.register("beat", lambda payload: None)
    old_code.periodic("beat", "beat", every=60)
    old_pool = ticker(old_code, "old")
    old_pool.declare_once()
    [old_tick] = old_pool.tick_once()
    new_code = _on(repo, clock)
    new_code.register("beat", lambda payload: None)
    new_code.periodic("beat", "beat", every=30)
    new_pool = ticker(new_code, "new")
    assert new_pool.declare_once().cancelled == (old_tick.id,)  # a starting pool takes the schedule over
    [new_tick] = new_pool.tick_once()
    clock.advance(1)
    assert old_pool.declare_once().cancelled == ()  # the old pool's refresh keeps it alive only
    assert new_code.get(new_tick.id).status is JobStatus.QUEUED
    [state] = new_code.schedules()
    assert state.spec == "every 30s" and state.declared_by == "old" and state.last_job_id == new_tick.id
