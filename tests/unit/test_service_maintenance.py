"""Maintenance (reaper, purge cutoff, the maintenance loop) and JobContext, on memory + FakeClock."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import LeaseLost, StorageUnavailable, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job
from tether.entrypoints.context import JobContext
from tether.entrypoints.maintenance import MaintenanceLoop, Reaper, purge_cutoff


class Notified:
    def __init__(self) -> None:
        self.jobs: list[list[int]] = []
        self.maintained: list[datetime] = []

    def notify(self, jobs: Sequence[Job]) -> None:
        self.jobs.append([j.id for j in jobs])

    def maintain(self, now: datetime) -> None:
        self.maintained.append(now)

    def acquire(self, **kwargs):  # pragma: no cover
        return []

    def wake(self) -> None: ...

    def close(self) -> None: ...


def leased_jobs(repo: InMemoryJobRepository, clock: FakeClock, n: int, max_attempts: int = 3) -> list[Job]:
    for _ in range(n):
        repo.enqueue(prepare_job("t", {}, now=clock.now(), max_attempts=max_attempts), now=clock.now())
    return repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=n)


def test_reaper_takes_back_every_expired_lease_in_batches_and_notifies_the_retrying_ones() -> None:
    repo, clock, dispatcher = InMemoryJobRepository(), FakeClock(), Notified()
    jobs = leased_jobs(repo, clock, 7)
    last = leased_jobs(repo, clock, 1, max_attempts=1)[0]
    reaper = Reaper(repo, clock, dispatcher, batch_size=3)  # type: ignore[arg-type]
    assert reaper.run_once() == []  # nothing expired yet
    clock.advance(60)
    reaped = reaper.run_once()
    assert sorted(j.id for j in reaped) == sorted([j.id for j in jobs] + [last.id])
    assert repo.get(last.id).status is JobStatus.DEAD
    assert all(repo.get(j.id).status is JobStatus.RETRYING for j in jobs)
    assert sorted(dispatcher.jobs[0]) == sorted(j.id for j in jobs)  # the dead one is not published
    assert len(dispatcher.jobs) == 1


def test_purge_cutoff() -> None:
    now = datetime(2026, 5, 1, tzinfo=UTC)
    assert purge_cutoff(timedelta(days=7), now) == now - timedelta(days=7)
    other_zone = datetime(2026, 4, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    assert purge_cutoff(other_zone, now) == datetime(2026, 4, 1, tzinfo=UTC)
    for bad in (timedelta(seconds=-1), datetime(2026, 1, 1), 3600, "7d"):
        with pytest.raises(ValidationError) as info:
            purge_cutoff(bad, now)
        assert info.value.field == "older_than"


def test_maintenance_loop_survives_errors_and_keeps_running() -> None:
    class Flaky(InMemoryJobRepository):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def reap(self, *, now, limit=100):  # type: ignore[override]
            self.calls += 1
            if self.calls <= 2:
                raise StorageUnavailable("database is locked")
            return super().reap(now=now, limit=limit)

    repo, clock, dispatcher = Flaky(), FakeClock(), Notified()
    leased_jobs(repo, clock, 1)
    clock.advance(61)
    loop = MaintenanceLoop(Reaper(repo, clock, dispatcher), dispatcher, reap_interval=0.02, maintain_interval=0.02)  # type: ignore[arg-type]
    loop.start()
    deadline = time.monotonic() + 10
    while loop.reaped < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.stop()
    assert repo.calls >= 3 and loop.reaped == 1
    assert dispatcher.maintained and dispatcher.maintained[0] == clock.now()


def test_job_context_sleep_cancel_and_heartbeat() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    [job] = leased_jobs(repo, clock, 1)
    ctx = JobContext(job, repository=repo, clock=clock, lease_timeout=60, worker_id="w")
    assert (ctx.attempt, ctx.token, ctx.cancelled, ctx.lease_lost) == (1, job.lease_token, False, False)
    assert ctx.sleep(0.01) is True
    clock.advance(30)
    ctx.heartbeat()
    assert ctx.job.lease_expires_at == clock.now() + timedelta(seconds=60)
    threading.Timer(0.1, ctx.cancel).start()
    assert ctx.sleep(30) is False  # woken by the cancellation
    assert ctx.cancelled and ctx.sleep(5) is False
    clock.advance(61)
    repo.reap(now=clock.now())
    with pytest.raises(LeaseLost):
        ctx.heartbeat()
    assert ctx.lease_lost


def test_job_context_needs_a_leased_job() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    job = repo.enqueue(prepare_job("t", {}, now=clock.now()), now=clock.now()).job
    with pytest.raises(ValueError):
        JobContext(job, repository=repo, clock=clock, lease_timeout=60, worker_id="w")
