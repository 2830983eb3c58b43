"""Tick instants: the every grid, cron in a time zone through DST changes, and which tick a worker enqueues."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tether.domain.errors import ValidationError
from tether.domain.ticks import MAX_AHEAD, cadence, plan_tick


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def ticks_between(cad, start: datetime, end: datetime) -> list[datetime]:
    found, at = [], start
    while (at := cad.next_after(at)) is not None and at <= end:
        found.append(at)
    return found


def test_every_ticks_on_the_epoch_grid_whatever_the_start() -> None:
    cad = cadence(every=7)
    after = utc(2026, 1, 1, 0, 0, 3)
    first = cad.next_after(after)
    assert first is not None and first > after and first.timestamp() % 7 == 0
    assert cad.next_after(first) == first + timedelta(seconds=7)
    assert cad.latest_at_or_before(first) == first
    assert cad.latest_at_or_before(first - timedelta(microseconds=1)) == first - timedelta(seconds=7)


def test_paris_spring_forward_runs_a_skipped_time_at_the_first_minute_after_it() -> None:
    cad = cadence(cron="30 2 * * *", tz="Europe/Paris")
    runs = ticks_between(cad, utc(2026, 3, 27, 12), utc(2026, 3, 30, 12))
    # 28 March 02:30 CET, 29 March (02:30 does not exist) 03:00 CEST, 30 March 02:30 CEST
    assert runs == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]


def test_paris_fall_back_runs_a_repeated_time_once_at_its_first_occurrence() -> None:
    cad = cadence(cron="30 2 * * *", tz="Europe/Paris")
    runs = ticks_between(cad, utc(2026, 10, 24, 12), utc(2026, 10, 26, 12))
    assert runs == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    # asked from inside the second 02:xx (CET), it does not go back to the first one
    assert cad.next_after(utc(2026, 10, 25, 1, 15)) == utc(2026, 10, 26, 1, 30)


def test_an_interval_expression_follows_elapsed_time_through_the_repeated_hour() -> None:
    cad = cadence(cron="0 * * * *", tz="Europe/Paris")
    runs = ticks_between(cad, utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 2, 30))
    assert runs == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)]  # 02:00 CEST, 02:00 CET, 03:00 CET


def test_a_dst_day_in_paris_run_through_plan_tick_gives_the_documented_runs() -> None:
    cad = cadence(cron="30 2 * * *", tz="Europe/Paris")
    now, mark, enqueued = utc(2026, 3, 28, 0), None, []
    while now < utc(2026, 3, 31):
        tick = plan_tick(cad, last_tick=mark, now=now, catch_up=None)
        if tick is not None:
            enqueued.append(tick)
            mark = tick
        now += timedelta(seconds=45)
    assert enqueued == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]


def test_plan_tick_enqueues_one_tick_at_most_sixty_seconds_ahead() -> None:
    cad = cadence(cron="0 3 * * *")
    assert plan_tick(cad, last_tick=None, now=utc(2026, 1, 1, 2, 58), catch_up=None) is None
    assert plan_tick(cad, last_tick=None, now=utc(2026, 1, 1, 2, 59), catch_up=None) == utc(2026, 1, 1, 3)
    # that tick stored: nothing more until it passed
    assert plan_tick(cad, last_tick=utc(2026, 1, 1, 3), now=utc(2026, 1, 1, 2, 59, 30), catch_up=None) is None
    every = cadence(every=1)
    now = utc(2026, 1, 1, 0, 0, 0) + timedelta(milliseconds=300)
    tick = plan_tick(every, last_tick=utc(2026, 1, 1, 0, 0, 0), now=now, catch_up=None)
    assert tick == utc(2026, 1, 1, 0, 0, 1) and tick - now <= timedelta(seconds=1) <= MAX_AHEAD


def test_after_downtime_only_the_latest_missed_tick_runs_within_catch_up() -> None:
    cad = cadence(every=60)
    mark = utc(2026, 1, 1, 0, 0)
    now = utc(2026, 1, 1, 1, 0, 20)  # an hour down: 60 ticks missed
    assert plan_tick(cad, last_tick=mark, now=now, catch_up=None) == utc(2026, 1, 1, 1, 0)
    assert plan_tick(cad, last_tick=mark, now=now, catch_up=timedelta(seconds=30)) == utc(2026, 1, 1, 1, 0)
    # too late for a 10 s window: skipped, the next one (40 s ahead) comes instead
    assert plan_tick(cad, last_tick=mark, now=now, catch_up=timedelta(seconds=10)) == utc(2026, 1, 1, 1, 1)
    assert plan_tick(cad, last_tick=mark, now=utc(2026, 1, 1, 1, 0, 59), catch_up=timedelta(0)) == utc(2026, 1, 1, 1, 1)
    # the caught-up tick stored: the next one is planned as usual (within 60 s), never the missed ones
    assert plan_tick(cad, last_tick=utc(2026, 1, 1, 1, 0), now=now, catch_up=None) == utc(2026, 1, 1, 1, 1)
    assert plan_tick(cad, last_tick=utc(2026, 1, 1, 1, 1), now=now, catch_up=None) is None


def test_a_never_ticked_schedule_catches_nothing_up() -> None:
    cad = cadence(every=3600)
    assert plan_tick(cad, last_tick=None, now=utc(2026, 1, 1, 0, 30), catch_up=None) is None


def test_irregular_cron_catch_up_is_measured_to_the_following_tick() -> None:
    cad = cadence(cron="0 9 * * 1-5")  # weekdays at 09:00
    friday, monday_early = utc(2026, 1, 2, 9), utc(2026, 1, 5, 8)
    assert cad.latest_at_or_before(monday_early) == friday
    assert plan_tick(cad, last_tick=utc(2026, 1, 1, 9), now=monday_early, catch_up=None) == friday
    assert plan_tick(cad, last_tick=utc(2026, 1, 1, 9), now=monday_early, catch_up=timedelta(hours=1)) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "0 0 0 * * *"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "cron"),
        ({"cron": 5}, "cron"),
        ({}, "cron"),
        ({"cron": "* * * * *", "every": 5}, "cron"),
        ({"every": 0.5}, "every"),
        ({"every": 0}, "every"),
        ({"every": True}, "every"),
        ({"every": "5"}, "every"),
        ({"every": 5, "tz": "Mars/Olympus"}, "tz"),
        ({"every": 5, "tz": ""}, "tz"),
        ({"every": 5, "tz": "../../etc/passwd"}, "tz"),
    ],
)
def test_bad_cadences_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        cadence(**kwargs)
    assert caught.value.field == field


def test_a_tick_is_superseded_once_a_later_tick_is_due() -> None:
    from tether.domain.ticks import superseded

    hourly = cadence(cron="0 * * * *")
    one = datetime(2026, 1, 1, 1, tzinfo=UTC)
    assert not superseded(hourly, tick=one, now=one - timedelta(seconds=30))
    assert not superseded(hourly, tick=one, now=one + timedelta(minutes=59, seconds=59))
    assert superseded(hourly, tick=one, now=one + timedelta(hours=1))
    assert superseded(cadence(every=10), tick=one, now=one + timedelta(seconds=25))
    assert not superseded(cadence(every=10), tick=one, now=one + timedelta(seconds=9))
