"""The worker registry contract: one class any :class:`~tether.ports.worker_registry.WorkerRegistry` runs.

Subclass :class:`WorkerRegistryContract` and supply a function-scoped ``registry`` fixture that
yields a fresh, empty registry (Tether's repositories are registries too, so their test modules
yield the repository)::

    class TestMyRegistry(WorkerRegistryContract):
        @pytest.fixture
        def registry(self, clock):
            repo = MyJobRepository(...)
            yield repo
            repo.close()

Every time comes from the ``clock`` fixture (a FakeClock at 2026-01-01T00:00:00Z).
"""

from __future__ import annotations

from datetime import timedelta, timezone
from typing import Any

import attrs
import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.workers import GONE_FLOOR_SECONDS, WorkerEntry, gone_after
from tether.ports.worker_registry import WorkerRegistry


def entry(clock: FakeClock, worker_id: str = "host-1-abc", **changes: Any) -> WorkerEntry:
    """A worker entry started and last seen at ``clock.now()``; ``changes`` override fields."""
    fields: dict[str, Any] = {
        "worker_id": worker_id,
        "host": "host",
        "pid": 1234,
        "queues": ("default", "emails"),
        "job_types": ("emails.send", "reports.build"),
        "concurrency": 8,
        "version": "0.1.0",
        "dispatcher": "polling",
        "heartbeat_interval": 10.0,
        "started_at": clock.now(),
        "last_seen_at": clock.now(),
    }
    fields.update(changes)
    return WorkerEntry(**fields)


class WorkerRegistryContract:
    """record, list (with the gone flag), remove and prune.  No ``Test`` prefix: pytest collects
    only your subclass."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        """A fake clock at 2026-01-01T00:00:00Z; the registry fixture may use it too."""
        return FakeClock()

    def test_an_empty_registry_lists_nothing(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        assert registry.list_workers(now=clock.now()) == []
        assert registry.remove_worker("nobody") is False
        assert registry.prune_workers(older_than=clock.now()) == 0

    def test_a_recorded_entry_comes_back_field_for_field(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        recorded = entry(clock, heartbeat_interval=0.25, started_at=clock.now() - timedelta(microseconds=1))
        registry.record_worker(recorded)
        assert registry.list_workers(now=clock.now()) == [recorded]
        [back] = registry.list_workers(now=clock.now())
        assert back.started_at.utcoffset() == timedelta(0) and back.last_seen_at.tzinfo is not None
        assert back.gone is False and back.status == "alive"

    def test_all_queues_and_no_job_types_are_kept_apart_from_empty_names(
        self, registry: WorkerRegistry, clock: FakeClock
    ) -> None:
        every_queue = entry(clock, "w-all", queues=None, job_types=())
        odd_names = entry(clock, "w-odd", queues=("a:b", "ü-q"), job_types=("x.y", "Ω"), dispatcher="redis")
        registry.record_worker(every_queue)
        registry.record_worker(odd_names)
        assert registry.list_workers(now=clock.now()) == [every_queue, odd_names]

    def test_recording_again_replaces_the_entry_of_that_worker(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        first = entry(clock)
        registry.record_worker(first)
        other = entry(clock, "host-2-def")
        registry.record_worker(other)
        refreshed = attrs.evolve(first, last_seen_at=clock.advance(5), job_types=("emails.send",), concurrency=2)
        registry.record_worker(refreshed)
        assert registry.list_workers(now=clock.now()) == [refreshed, other]

    def test_entries_are_listed_by_start_time_then_worker_id(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        start = clock.now()
        late = entry(clock, "a-late", started_at=start + timedelta(seconds=2), last_seen_at=start + timedelta(seconds=2))
        early_b = entry(clock, "b-early")
        early_a = entry(clock, "c-early")
        for item in (late, early_a, early_b):
            registry.record_worker(item)
        assert [e.worker_id for e in registry.list_workers(now=start + timedelta(seconds=2))] == [
            "b-early", "c-early", "a-late"]

    def test_an_entry_is_gone_once_it_missed_a_few_refreshes(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        seen = clock.now()
        registry.record_worker(entry(clock, "slow", heartbeat_interval=10.0))  # gone after 30 s
        registry.record_worker(entry(clock, "fast", heartbeat_interval=0.1))  # gone after the floor
        assert gone_after(entry(clock, heartbeat_interval=10.0)) == timedelta(seconds=30)
        assert gone_after(entry(clock, heartbeat_interval=0.1)) == timedelta(seconds=GONE_FLOOR_SECONDS)

        def gone_at(seconds: float) -> dict[str, bool]:
            return {e.worker_id: e.gone for e in registry.list_workers(now=seen + timedelta(seconds=seconds))}

        assert gone_at(0) == {"slow": False, "fast": False}
        assert gone_at(GONE_FLOOR_SECONDS) == {"slow": False, "fast": False}  # exactly at the limit: not yet
        assert gone_at(GONE_FLOOR_SECONDS + 0.001) == {"slow": False, "fast": True}
        assert gone_at(30) == {"slow": False, "fast": True}
        assert gone_at(30.001) == {"slow": True, "fast": True}
        registry.record_worker(entry(clock, "fast", heartbeat_interval=0.1, last_seen_at=seen + timedelta(seconds=30)))
        assert gone_at(30.001) == {"slow": True, "fast": False}  # a refresh brings it back
        assert [(e.worker_id, e.status) for e in registry.list_workers(now=seen + timedelta(seconds=31))] == [
            ("fast", "alive"), ("slow", "gone")]

    def test_the_gone_flag_of_a_recorded_entry_is_not_stored(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        registry.record_worker(entry(clock, gone=True))
        assert [e.gone for e in registry.list_workers(now=clock.now())] == [False]

    def test_remove_deletes_one_entry(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        registry.record_worker(entry(clock, "w-1"))
        registry.record_worker(entry(clock, "w-2"))
        assert registry.remove_worker("w-1") is True
        assert registry.remove_worker("w-1") is False
        assert [e.worker_id for e in registry.list_workers(now=clock.now())] == ["w-2"]
        registry.record_worker(entry(clock, "w-1"))  # a refresh after a removal records it again
        assert [e.worker_id for e in registry.list_workers(now=clock.now())] == ["w-1", "w-2"]

    def test_prune_deletes_entries_last_seen_before_the_cutoff(self, registry: WorkerRegistry, clock: FakeClock) -> None:
        start = clock.now()
        registry.record_worker(entry(clock, "old", last_seen_at=start))
        registry.record_worker(entry(clock, "edge", last_seen_at=start + timedelta(hours=1)))
        registry.record_worker(entry(clock, "new", last_seen_at=start + timedelta(hours=2)))
        assert registry.prune_workers(older_than=start + timedelta(hours=1)) == 1  # "edge" is not before it
        assert [e.worker_id for e in registry.list_workers(now=start)] == ["edge", "new"]
        assert registry.prune_workers(older_than=start + timedelta(hours=1)) == 0

    def test_naive_datetimes_are_refused_and_other_zones_mean_the_same_instant(
        self, registry: WorkerRegistry, clock: FakeClock
    ) -> None:
        naive = clock.now().replace(tzinfo=None)
        for field in ("started_at", "last_seen_at"):
            with pytest.raises(ValidationError) as info:
                registry.record_worker(entry(clock, **{field: naive}))
            assert info.value.field == field
        assert registry.list_workers(now=clock.now()) == []
        with pytest.raises(ValidationError) as info:
            registry.list_workers(now=naive)
        assert info.value.field == "now"
        with pytest.raises(ValidationError) as info:
            registry.prune_workers(older_than=naive)
        assert info.value.field == "older_than"

        east = timezone(timedelta(hours=9))
        registry.record_worker(entry(clock, started_at=clock.now().astimezone(east), last_seen_at=clock.now().astimezone(east)))
        [back] = registry.list_workers(now=clock.now())
        assert back.started_at == clock.now() and back.last_seen_at.utcoffset() == timedelta(0)


__all__ = ["WorkerRegistryContract", "entry"]
