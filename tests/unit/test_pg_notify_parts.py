"""The parts of PostgreSQL wake-ups that need no server: channel names, payloads, the due-time
timer and the dispatcher's handling of a notification (which queues, now or later)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from tether.adapters.clock import FakeClock
from tether.adapters.pg_notify import DueTimer, ListeningDispatcher
from tether.adapters.pg_notify.dispatcher import parse_payload
from tether.adapters.sqlalchemy.pg_wakeups import channel_name, notifying_insert, wakeup_payload

from tests.conftest import wait_for


def test_channel_names_fit_postgresql_identifiers_and_differ_by_schema() -> None:
    names = {channel_name(schema) for schema in (None, "public", "app_a", "app_b", "x" * 63)}
    assert len(names) == 5
    for name in names:
        assert len(name.encode()) <= 63 and name == name.lower() and name.isascii()
    assert channel_name("app_a") == channel_name("app_a")


def test_payloads_round_trip_with_any_queue_name() -> None:
    clock = FakeClock()
    due = clock.now() + timedelta(seconds=1, microseconds=250)
    for queue in ("default", "a b", "q:1"):
        assert parse_payload(wakeup_payload(queue, due)) == (due.timestamp(), queue)
    assert parse_payload("garbage") is None
    assert parse_payload("") is None


def test_the_notifying_insert_keeps_the_insert_and_returns_the_id_first() -> None:
    sql = notifying_insert("INSERT INTO t (a) VALUES (%s) RETURNING id")
    assert sql.startswith("WITH ins AS (INSERT INTO t (a) VALUES (%s) RETURNING id, queue, scheduled_at) SELECT id,")
    assert sql.count("%s") == 2  # the insert's parameter, then the channel


def test_the_timer_fires_once_each_due_time_comes_and_not_before() -> None:
    clock = FakeClock()
    fired = threading.Semaphore(0)
    timer = DueTimer(clock, fired.release)
    try:
        now = clock.now().timestamp()
        timer.add(now + 10)
        timer.add(now + 5)
        assert timer.pending() == 2
        assert not fired.acquire(timeout=0.2)
        clock.advance(5)
        timer.add(now + 1000)  # any add re-reads the clock
        assert fired.acquire(timeout=5)
        assert timer.pending() == 2
        clock.advance(5)
        timer.add(now + 1000)
        assert fired.acquire(timeout=5)
        assert timer.pending() == 2  # the two far ones remain
    finally:
        timer.stop()
    timer.add(now)  # ignored once stopped
    assert timer.pending() == 0


class FakePolling:
    """Counts wake-ups; acquires nothing."""

    def __init__(self) -> None:
        self.arrived = 0

    def work_arrived(self) -> None:
        self.arrived += 1

    def notify(self, jobs: Sequence[Any]) -> None: ...

    def acquire(self, **kwargs: Any) -> list[Any]:
        return []

    def wake(self) -> None: ...

    def close(self) -> None: ...


def test_the_dispatcher_wakes_for_due_jobs_of_its_queues_and_times_later_ones() -> None:
    clock = FakeClock()
    polling = FakePolling()
    dispatcher = ListeningDispatcher(polling, clock, lambda: None, "tether_x")  # type: ignore[arg-type]
    try:
        now = clock.now()
        dispatcher._on_payload(wakeup_payload("any", now))  # no acquirer yet: every queue counts
        assert polling.arrived == 1
        dispatcher._served["w"] = frozenset({"mine"})
        dispatcher._on_payload(wakeup_payload("theirs", now))
        dispatcher._on_payload("not a payload")
        assert polling.arrived == 1
        dispatcher._on_payload(wakeup_payload("mine", now - timedelta(seconds=1)))
        assert polling.arrived == 2
        dispatcher._on_payload(wakeup_payload("mine", now + timedelta(seconds=30)))
        assert polling.arrived == 2 and dispatcher.timer.pending() == 1
        clock.advance(30)
        dispatcher.timer.add(now.timestamp() + 3600)
        wait_for(lambda: polling.arrived == 3, timeout=5.0, what="the timer's wake-up")
    finally:
        dispatcher.timer.stop()
