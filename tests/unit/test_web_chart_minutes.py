"""The chart's minutes read incrementally: each refresh reads the last minutes only, yet answers what
a read of the whole hour would (the reference :func:`count_finished`), rereads the hour on time, and
says when a read stopped at its row limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tether.adapters.clock import FakeClock
from tether.domain.overview import count_finished, throughput_since
from tether.entrypoints.service import Tether
from tether.entrypoints.web.chart_minutes import FULL_READ_EVERY, SETTLE, ChartMinutes
from tether.testing import fake_app

START = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


class Monotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def finish(app: Tether, *, dead: bool = False, at: datetime | None = None) -> None:
    """One job leased and finished (completed, or dead) at ``at`` (default: the app's clock)."""
    now = at or app.clock.now()
    job = app.enqueue("t.job", {}, max_attempts=1).job
    leased = app.repository.lease_job(job.id, worker_id="w", now=app.clock.now(), lease_timeout=60)
    assert leased is not None and leased.lease_token
    if dead:
        app.repository.dead_letter(job.id, leased.lease_token, now=now, error="boom")
    else:
        app.repository.complete(job.id, leased.lease_token, now=now)


def reference(app: Tether, max_rows: int = 10_000, now: datetime | None = None) -> tuple[tuple[object, int, int, int], ...]:
    now = now or app.clock.now()
    chart = count_finished(app.repository.list_jobs(limit=10_000), since=throughput_since(now), max_rows=max_rows)  # type: ignore[attr-defined]
    return tuple((m.minute, m.completed, m.dead, m.cancelled) for m in chart.minutes)


def shown(chart: object) -> tuple[tuple[object, int, int, int], ...]:
    return tuple((m.minute, m.completed, m.dead, m.cancelled) for m in chart.minutes)  # type: ignore[attr-defined]


def setup() -> tuple[Tether, FakeClock, Monotonic, ChartMinutes]:
    clock = FakeClock(START)
    app = fake_app(clock)
    monotonic = Monotonic()
    minutes = ChartMinutes(app.repository, max_rows=10_000, monotonic=monotonic)  # type: ignore[arg-type]
    return app, clock, monotonic, minutes


def test_a_refresh_reads_the_minutes_since_the_settled_ones_and_answers_as_the_whole_hour() -> None:
    app, clock, monotonic, minutes = setup()
    for i in range(30):
        finish(app, dead=i % 7 == 0)
        clock.advance(seconds=20)
    first = minutes.read(clock.now())
    assert minutes.reads[-1] == throughput_since(clock.now())  # the first read covers the hour
    assert shown(first) == reference(app) and len(first.minutes) == 10 and not first.capped
    for _ in range(3):
        clock.advance(seconds=40)
        monotonic.now += 40
        finish(app)
        finish(app, dead=True)
        chart = minutes.read(clock.now())
        since = minutes.reads[-1]
        assert since > throughput_since(clock.now()) + timedelta(minutes=30)  # only the last minutes read
        assert clock.now() - since <= SETTLE + timedelta(minutes=2)  # the settled minute at the last read
        assert shown(chart) == reference(app) and not chart.capped


def test_minutes_leave_the_chart_after_an_hour() -> None:
    app, clock, monotonic, minutes = setup()
    finish(app)
    clock.advance(minutes=10)
    finish(app)
    assert len(minutes.read(clock.now()).minutes) == 2
    clock.advance(minutes=55)
    monotonic.now += 10
    chart = minutes.read(clock.now())
    assert minutes.reads[-1] > throughput_since(clock.now())  # still incremental
    assert shown(chart) == reference(app) and len(chart.minutes) == 1


def test_a_row_written_late_into_a_kept_minute_shows_after_the_next_read_of_the_hour() -> None:
    app, clock, monotonic, minutes = setup()
    finish(app)
    clock.advance(minutes=10)
    minutes.read(clock.now())
    late = START + timedelta(minutes=1)  # a worker whose clock lags by nine minutes
    finish(app, at=late)
    monotonic.now += 10
    assert shown(minutes.read(clock.now())) != reference(app)  # the kept minute is not read again
    monotonic.now += FULL_READ_EVERY
    assert shown(minutes.read(clock.now())) == reference(app)
    assert minutes.reads[-1] == throughput_since(clock.now())


def test_a_clock_moved_back_reads_the_hour_again() -> None:
    app, clock, _, minutes = setup()
    finish(app)
    clock.advance(minutes=3)
    finish(app)
    clock.advance(minutes=30)
    minutes.read(clock.now())
    back = START + timedelta(minutes=5)  # a host's clock set back
    chart = minutes.read(back)
    assert minutes.reads[-1] == throughput_since(back)
    assert shown(chart) == reference(app, now=back) and len(chart.minutes) == 2


def test_a_read_stopped_at_its_row_limit_says_so_until_its_short_minutes_leave_the_hour() -> None:
    clock = FakeClock(START)
    app = fake_app(clock)
    monotonic = Monotonic()
    minutes = ChartMinutes(app.repository, max_rows=5, monotonic=monotonic)  # type: ignore[arg-type]
    for _ in range(4):
        for _ in range(3):
            finish(app)
        clock.advance(minutes=1)
    clock.advance(minutes=5)
    chart = minutes.read(clock.now())
    assert chart.capped and sum(m.completed for m in chart.minutes) == 5
    assert shown(chart) == reference(app, max_rows=5)
    clock.advance(minutes=1)
    monotonic.now += 10
    finish(app)
    chart = minutes.read(clock.now())
    assert chart.capped and minutes.reads[-1] > throughput_since(clock.now())
    assert shown(chart)[-1][1:] == (1, 0, 0)
    clock.advance(minutes=57)  # the short minutes (the first two) left the hour
    monotonic.now += 10
    chart = minutes.read(clock.now())
    assert not chart.capped and shown(chart) == reference(app)
