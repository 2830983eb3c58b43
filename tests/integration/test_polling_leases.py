"""PollingDispatcher on the in-memory repository, with real threads."""

from __future__ import annotations

import threading
import time

import pytest
from tether.adapters.clock import FakeClock, SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import StorageUnavailable, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job


def _enqueue(repo: InMemoryJobRepository, clock, job_type: str = "t", queue: str = "default", **kw) -> Job:
    new = prepare_job(job_type, {}, now=clock.now(), queue=queue, **kw)
    return repo.enqueue(new, now=clock.now()).job


def _acquire_in_background(dispatcher: PollingDispatcher, max_wait: float) -> tuple[threading.Thread, list[list[Job]]]:
    """Start ``acquire(limit=1)`` on a thread; its result is appended to the returned list."""
    got: list[list[Job]] = []
    thread = threading.Thread(
        target=lambda: got.append(
            dispatcher.acquire(queues=None, worker_id="w", limit=1, lease_timeout=30, max_wait=max_wait)
        )
    )
    thread.start()
    return thread, got


class CountingRepository(InMemoryJobRepository):
    """The memory repository, counting lease queries (to see the idle backoff)."""

    def __init__(self) -> None:
        super().__init__()
        self.lease_calls = 0

    def lease(self, **kwargs):  # type: ignore[override]
        self.lease_calls += 1
        return super().lease(**kwargs)


def test_acquire_leases_due_jobs_up_to_limit_in_lease_order() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    low = _enqueue(repo, clock, priority=0)
    high = _enqueue(repo, clock, priority=5)
    third = _enqueue(repo, clock, priority=0)
    dispatcher = PollingDispatcher(repo, clock)
    jobs = dispatcher.acquire(queues=None, worker_id="w1", limit=2, lease_timeout=30, max_wait=0)
    assert [j.id for j in jobs] == [high.id, low.id]
    assert all(j.status is JobStatus.RUNNING and j.leased_by == "w1" and j.lease_token for j in jobs)
    assert jobs[0].leased_at == clock.now()
    assert (jobs[0].lease_expires_at - clock.now()).total_seconds() == 30
    rest = dispatcher.acquire(queues=None, worker_id="w1", limit=5, lease_timeout=30, max_wait=0)
    assert [j.id for j in rest] == [third.id]


def test_acquire_honours_the_queue_filter() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    _enqueue(repo, clock, queue="a")
    b = _enqueue(repo, clock, queue="b")
    dispatcher = PollingDispatcher(repo, clock)
    jobs = dispatcher.acquire(queues=["b"], worker_id="w", limit=5, lease_timeout=30, max_wait=0)
    assert [j.id for j in jobs] == [b.id]


def test_acquire_returns_empty_after_max_wait_and_backs_off_when_idle() -> None:
    repo, clock = CountingRepository(), SystemClock()
    dispatcher = PollingDispatcher(repo, clock, poll_interval=0.2, min_poll_interval=0.01)
    started = time.monotonic()
    assert dispatcher.acquire(queues=None, worker_id="w", limit=1, lease_timeout=30, max_wait=1.0) == []
    elapsed = time.monotonic() - started
    assert elapsed >= 1.0
    # Without backoff a 10 ms poll would query ~100 times in one second; doubling up to 0.2 s
    # gives 0.01+0.02+0.04+0.08+0.16 then 0.2 s steps: about 10 queries.
    assert 3 <= repo.lease_calls <= 20


def test_notify_wakes_a_waiting_acquirer_at_once() -> None:
    repo, clock = InMemoryJobRepository(), SystemClock()
    dispatcher = PollingDispatcher(repo, clock, poll_interval=60.0, min_poll_interval=30.0)
    thread, got = _acquire_in_background(dispatcher, max_wait=60)
    time.sleep(0.2)  # the acquirer is now in its 30 s idle wait
    job = _enqueue(repo, clock)
    dispatcher.notify([job])
    thread.join(timeout=10)
    assert not thread.is_alive(), "notify did not wake the acquirer"
    assert [j.id for j in got[0]] == [job.id]


def test_wake_interrupts_a_blocked_acquire() -> None:
    repo, clock = InMemoryJobRepository(), SystemClock()
    dispatcher = PollingDispatcher(repo, clock, poll_interval=60.0, min_poll_interval=30.0)
    thread, got = _acquire_in_background(dispatcher, max_wait=60)
    time.sleep(0.2)
    dispatcher.wake()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert got == [[]]


def test_a_job_enqueued_without_notify_is_still_found_by_the_next_poll() -> None:
    repo, clock = InMemoryJobRepository(), SystemClock()
    dispatcher = PollingDispatcher(repo, clock, poll_interval=0.05, min_poll_interval=0.01)
    thread, got = _acquire_in_background(dispatcher, max_wait=30)
    time.sleep(0.2)
    job = _enqueue(repo, clock)  # no notify: a lost notification costs latency, never the job
    thread.join(timeout=10)
    assert [j.id for j in got[0]] == [job.id]


def test_a_delayed_job_is_not_leased_before_it_is_due() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    job = _enqueue(repo, clock, delay=60)
    dispatcher = PollingDispatcher(repo, clock)
    assert dispatcher.acquire(queues=None, worker_id="w", limit=1, lease_timeout=30, max_wait=0) == []
    clock.advance(60)
    assert [j.id for j in dispatcher.acquire(queues=None, worker_id="w", limit=1, lease_timeout=30, max_wait=0)] == [job.id]


def test_storage_errors_reach_the_caller_and_are_never_read_as_no_work() -> None:
    class Down(InMemoryJobRepository):
        def lease(self, **kwargs):  # type: ignore[override]
            raise StorageUnavailable("database is locked")

    dispatcher = PollingDispatcher(Down(), FakeClock())
    with pytest.raises(StorageUnavailable):
        dispatcher.acquire(queues=None, worker_id="w", limit=1, lease_timeout=30, max_wait=0.1)


def test_close_makes_acquire_return_at_once_and_maintain_is_a_no_op() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    job = _enqueue(repo, clock)
    dispatcher = PollingDispatcher(repo, clock)
    dispatcher.maintain(clock.now())
    assert repo.get(job.id).status is JobStatus.QUEUED
    dispatcher.close()
    assert dispatcher.acquire(queues=None, worker_id="w", limit=1, lease_timeout=30, max_wait=5) == []
    assert repo.get(job.id).status is JobStatus.QUEUED


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"poll_interval": 0}, "poll_interval"),
        ({"poll_interval": float("nan")}, "poll_interval"),
        ({"min_poll_interval": -1}, "min_poll_interval"),
        ({"poll_interval": 0.5, "min_poll_interval": 1.0}, "min_poll_interval"),
    ],
)
def test_bad_intervals_are_rejected_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        PollingDispatcher(InMemoryJobRepository(), FakeClock(), **kwargs)
    assert info.value.field == field


def test_an_enqueue_wakes_an_idle_worker_of_the_same_process_after_commit() -> None:
    """With a 30-60 s idle poll, only the after-commit notification can start the job within the wait."""
    from tether.entrypoints.service import Tether

    repo, clock = InMemoryJobRepository(), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=60.0, min_poll_interval=30.0), clock)
    started = threading.Event()

    @app.handler("t")
    def t(payload: dict) -> None:
        started.set()

    pool = app.worker(concurrency=1, max_wait=60.0, reap_interval=60)
    pool.start()
    try:
        time.sleep(0.3)  # the acquirer is idle in its 30 s wait
        with app.transaction() as tx:
            app.enqueue("t", {}, connection=tx)
            assert not started.wait(0.3)  # not committed: not visible, nobody woken
        assert started.wait(10)
    finally:
        pool.stop()
