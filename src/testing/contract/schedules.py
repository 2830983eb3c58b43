"""The schedule store contract: one class any :class:`~tether.ports.schedule_store.ScheduleStore` runs.

Subclass :class:`ScheduleStoreContract` and supply a function-scoped ``store`` fixture that yields
a fresh, empty store that is also a :class:`~tether.ports.repository.JobRepository` (a tick's job
and its schedule's mark are written together, so the two live in one store)::

    class TestMySchedules(ScheduleStoreContract):
        @pytest.fixture
        def store(self):
            repo = MyJobRepository(...)
            yield repo
            repo.close()

Every time comes from the ``clock`` fixture (a FakeClock at 2026-01-01T00:00:00Z).
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import EnqueueResult, JobStatus, NewJob
from tether.domain.schedules import ScheduleState, tick_key
from tether.domain.validation import prepare_job


def declared(clock: FakeClock, name: str = "nightly", **changes: Any) -> ScheduleState:
    """A declaration of schedule ``name`` at ``clock.now()``, valid 30 s; ``changes`` override fields."""
    now = clock.now()
    fields: dict[str, Any] = {
        "name": name,
        "job_type": "reports.build",
        "queue": None,
        "spec": "every 60s",
        "tz": "UTC",
        "fingerprint": "f1",
        "next_tick_at": now + timedelta(seconds=60),
        "declared_by": "host-1-abc",
        "declared_at": now,
        "declared_until": now + timedelta(seconds=30),
    }
    fields.update(changes)
    return ScheduleState(**fields)


def tick_job(name: str, tick: datetime, now: datetime) -> NewJob:
    """The job of ``name``'s tick at ``tick``: due then, keyed in Tether's namespace."""
    return attrs.evolve(prepare_job("reports.build", {}, now=now, run_at=tick), idempotency_key=tick_key(name, tick))


class ScheduleStoreContract:
    """record (the mark kept, reset on a changed definition), list (last job status, liveness),
    and the tick's compare-and-set enqueue.  No ``Test`` prefix: pytest collects only your subclass."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        """A fake clock at 2026-01-01T00:00:00Z; the store fixture may use it too."""
        return FakeClock()

    def _tick(self, store: Any, clock: FakeClock, tick: datetime, *, name: str = "nightly", overlap: bool = True) -> EnqueueResult | None:
        result: EnqueueResult | None = store.enqueue_tick(name, tick_job(name, tick, clock.now()), now=clock.now(), overlap=overlap)
        return result

    def test_an_empty_store_lists_nothing_and_ticks_nothing(self, store: Any, clock: FakeClock) -> None:
        assert store.list_schedules(now=clock.now()) == []
        assert self._tick(store, clock, clock.now() + timedelta(seconds=5)) is None
        assert store.count_by_status()[JobStatus.QUEUED] == 0

    def test_a_declaration_comes_back_field_for_field(self, store: Any, clock: FakeClock) -> None:
        state = declared(clock, queue="reports", tz="Europe/Paris", spec="cron 30 2 * * *")
        assert store.record_schedule(state, now=clock.now()) is None
        [back] = store.list_schedules(now=clock.now())
        assert back == state
        assert back.declared_at.utcoffset() == timedelta(0) and back.live is True

    def test_a_lapsed_declaration_lists_as_not_live(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        clock.advance(31)
        [back] = store.list_schedules(now=clock.now())
        assert back.live is False

    def test_a_tick_enqueues_one_job_due_at_the_tick_and_moves_the_mark(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        tick = clock.now() + timedelta(seconds=60)
        result = self._tick(store, clock, tick)
        assert result is not None and result.created
        assert result.job.scheduled_at == tick and result.job.status is JobStatus.QUEUED
        assert result.job.idempotency_key == tick_key("nightly", tick)
        [state] = store.list_schedules(now=clock.now())
        assert state.last_tick_at == tick and state.last_job_id == result.job.id
        assert state.last_job_status is JobStatus.QUEUED

    def test_the_same_tick_or_an_earlier_one_enqueues_nothing(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        tick = clock.now() + timedelta(seconds=60)
        assert self._tick(store, clock, tick) is not None
        assert self._tick(store, clock, tick) is None
        assert self._tick(store, clock, tick - timedelta(seconds=60)) is None
        assert store.count_by_status()[JobStatus.QUEUED] == 1

    def test_a_redeclaration_keeps_the_mark(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        tick = clock.now() + timedelta(seconds=60)
        job = self._tick(store, clock, tick)
        assert job is not None
        clock.advance(10)
        before = store.record_schedule(declared(clock, declared_by="host-2-def"), now=clock.now())
        assert before is not None and before.last_tick_at == tick and before.declared_by == "host-1-abc"
        [state] = store.list_schedules(now=clock.now())
        assert (state.last_tick_at, state.last_job_id, state.declared_by) == (tick, job.job.id, "host-2-def")

    def test_a_changed_definition_moves_the_mark_to_now_and_keeps_the_last_job(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        job = self._tick(store, clock, clock.now() + timedelta(seconds=60))
        assert job is not None
        clock.advance(5)
        before = store.record_schedule(declared(clock, fingerprint="f2", spec="every 10s"), now=clock.now())
        assert before is not None and before.fingerprint == "f1"
        [state] = store.list_schedules(now=clock.now())
        assert state.last_tick_at == clock.now() and state.last_job_id == job.job.id and state.spec == "every 10s"
        assert self._tick(store, clock, clock.now() + timedelta(seconds=10)) is not None

    def test_a_refresh_with_another_definition_keeps_the_stored_one_and_the_mark(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        tick = clock.now() + timedelta(seconds=60)
        job = self._tick(store, clock, tick)
        assert job is not None
        clock.advance(5)
        older = declared(clock, fingerprint="f0", spec="every 120s", declared_by="old-pool", declared_until=clock.now() + timedelta(seconds=30))
        before = store.record_schedule(older, now=clock.now(), redefine=False)
        assert before is not None and before.fingerprint == "f1"
        [state] = store.list_schedules(now=clock.now())
        assert (state.fingerprint, state.spec, state.last_tick_at, state.last_job_id) == ("f1", "every 60s", tick, job.job.id)
        assert (state.declared_by, state.declared_at, state.declared_until) == ("old-pool", clock.now(), older.declared_until)
        # the same definition refreshed is written whole, as ever
        store.record_schedule(declared(clock, next_tick_at=tick), now=clock.now(), redefine=False)
        [state] = store.list_schedules(now=clock.now())
        assert (state.declared_by, state.next_tick_at, state.last_tick_at) == ("host-1-abc", tick, tick)

    def test_without_overlap_an_unfinished_last_job_holds_the_next_tick(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        first = self._tick(store, clock, clock.now() + timedelta(seconds=1), overlap=False)
        assert first is not None
        clock.advance(1)
        [running] = store.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=30)
        assert self._tick(store, clock, clock.now() + timedelta(seconds=1), overlap=False) is None
        assert self._tick(store, clock, clock.now() + timedelta(seconds=1), overlap=True) is not None
        [state] = store.list_schedules(now=clock.now())
        assert state.last_tick_at == clock.now() + timedelta(seconds=1)
        store.complete(running.id, running.lease_token, now=clock.now())

    def test_without_overlap_a_finished_or_purged_last_job_lets_the_next_tick_in(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        assert self._tick(store, clock, clock.now() + timedelta(seconds=1), overlap=False) is not None
        clock.advance(1)
        [job] = store.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=30)
        store.complete(job.id, job.lease_token, now=clock.now())
        [state] = store.list_schedules(now=clock.now())
        assert state.last_job_status is JobStatus.COMPLETED
        second = self._tick(store, clock, clock.now() + timedelta(seconds=1), overlap=False)
        assert second is not None
        clock.advance(1)
        [job] = store.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=30)
        store.complete(job.id, job.lease_token, now=clock.now())
        clock.advance(1)
        assert store.purge(older_than=clock.now()) == 2
        [state] = store.list_schedules(now=clock.now())
        assert state.last_job_status is None and state.last_tick_at == second.job.scheduled_at
        assert self._tick(store, clock, clock.now() + timedelta(seconds=1), overlap=False) is not None

    def test_purge_leaves_the_mark_so_a_purged_tick_never_runs_again(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        tick = clock.now() + timedelta(seconds=1)
        assert self._tick(store, clock, tick) is not None
        clock.advance(1)
        [job] = store.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=30)
        store.complete(job.id, job.lease_token, now=clock.now())
        clock.advance(1)
        assert store.purge(older_than=clock.now()) == 1
        assert self._tick(store, clock, tick) is None  # its key is free again; the mark alone refuses it
        assert store.find_by_key(tick_key("nightly", tick)) is None

    def test_a_naive_time_is_refused_and_nothing_is_written(self, store: Any, clock: FakeClock) -> None:
        naive = clock.now().replace(tzinfo=None)
        with pytest.raises(ValidationError) as caught:
            store.record_schedule(declared(clock), now=naive)
        assert caught.value.field == "now"
        assert store.list_schedules(now=clock.now()) == []

    def test_concurrent_first_declarations_store_one_row(self, store: Any, clock: FakeClock) -> None:
        errors: list[BaseException] = []
        befores: list[ScheduleState | None] = []
        barrier = threading.Barrier(4)

        def declare(worker: int) -> None:
            try:
                barrier.wait(10)
                befores.append(store.record_schedule(declared(clock, declared_by=f"w{worker}"), now=clock.now()))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=declare, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        assert sum(1 for b in befores if b is None) == 1  # exactly one declaration found it new
        [state] = store.list_schedules(now=clock.now())
        assert state.last_tick_at is None and state.fingerprint == "f1"

    def test_concurrent_tickers_enqueue_each_tick_once(self, store: Any, clock: FakeClock) -> None:
        store.record_schedule(declared(clock), now=clock.now())
        ticks = [clock.now() + timedelta(seconds=s) for s in range(1, 9)]
        created: list[int] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def ticker() -> None:
            try:
                for tick in ticks:
                    result = self._tick(store, clock, tick)
                    if result is not None:
                        with lock:
                            created.append(result.job.id)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=ticker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        assert len(created) == len(set(created)) == store.count_by_status()[JobStatus.QUEUED]
        assert max(store.get(i).scheduled_at for i in created) == ticks[-1]
        assert len(created) <= len(ticks)


__all__ = ["ScheduleStoreContract", "declared", "tick_job"]
