"""The public dispatcher contract: what every :class:`~tether.ports.dispatcher.Dispatcher` must do.

A dispatcher author (ours or a third party's) runs it by subclassing and supplying a
``dispatcher`` fixture built over the ``repository`` and ``clock`` fixtures::

    from tether.testing.contract.dispatcher import DispatcherContract

    class TestMyDispatcher(DispatcherContract):
        @pytest.fixture
        def dispatcher(self, repository, clock):
            d = MyDispatcher(repository, clock)
            yield d
            d.close()

``repository`` defaults to a fresh :class:`~tether.adapters.memory.InMemoryJobRepository` and
``clock`` to a :class:`~tether.adapters.clock.FakeClock` at 2026-01-01T00:00:00Z; override either
fixture to run the contract over another repository.  The suite checks behaviour, never speed:
waits are upper bounds (``delivery_wait``) that a healthy dispatcher beats by far, and no test
asserts how long anything took.

What it checks: a notified job is leased to the worker that acquires it; an idle acquire returns
``[]`` after ``max_wait``; a job due later is not handed out before it is due and is handed out once
the clock passes it and :meth:`~tether.ports.dispatcher.Dispatcher.maintain` runs; a job is never
handed to two workers at once (many threads acquiring), nor handed out again while it runs or after
it finished, however many duplicate notifications arrive; ``wake()`` returns a blocked acquire;
``queues`` filters; ``queues=None`` reads every queue; ``limit`` is respected; a job enqueued
without any notification is still found within one poll or sweep.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository


class DispatcherContract:
    """Subclass with a ``dispatcher`` fixture; every ``test_*`` method here then runs against it.

    Knobs (class attributes) a subclass may change:

    Attributes:
        lease_timeout: seconds a lease lasts in these tests (15 min: nothing expires by accident).
        delivery_wait: ``max_wait`` (seconds) of an acquire that must find work; an upper bound,
            not an expectation.
        idle_wait: ``max_wait`` (seconds) of an acquire that must find nothing.
        thread_join_timeout: seconds to wait for a helper thread before failing.
        racing_workers, racing_jobs: threads and jobs of the "never two workers" test.
        max_rounds: acquire calls a test makes while collecting jobs before it gives up.
    """

    lease_timeout: float = 15 * 60.0
    delivery_wait: float = 5.0
    idle_wait: float = 0.3
    thread_join_timeout: float = 60.0
    racing_workers: int = 8
    racing_jobs: int = 60
    max_rounds: int = 200

    # -- fixtures ------------------------------------------------------------------------------
    @pytest.fixture
    def clock(self) -> FakeClock:
        """A fake clock at 2026-01-01T00:00:00Z, shared by the repository and the dispatcher."""
        return FakeClock()

    @pytest.fixture
    def repository(self) -> Iterator[JobRepository]:
        """A fresh in-memory repository (override to run the contract over another one)."""
        repo = InMemoryJobRepository()
        yield repo
        repo.close()

    @pytest.fixture
    def dispatcher(self, repository: JobRepository, clock: FakeClock) -> Dispatcher:
        """The dispatcher under test, built over ``repository`` and ``clock``: subclasses provide it."""
        raise NotImplementedError("a DispatcherContract subclass must define the `dispatcher` fixture")

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def enqueue(
        repository: JobRepository,
        dispatcher: Dispatcher,
        clock: FakeClock,
        *,
        queue: str = "default",
        delay: float | None = None,
        notify: bool = True,
    ) -> Job:
        """Enqueue one job at ``clock.now()`` and (unless ``notify=False``) tell the dispatcher."""
        now = clock.now()
        new_job = prepare_job("contract.job", {}, now=now, queue=queue, delay=delay)
        job = repository.enqueue(new_job, now=now).job
        if notify:
            dispatcher.notify([job])
        return job

    def acquire(self, dispatcher: Dispatcher, *, worker_id: str = "w1", queues: list[str] | None = None,
                limit: int = 1, max_wait: float | None = None) -> list[Job]:
        """One acquire call with this contract's lease timeout (``max_wait`` defaults to ``delivery_wait``)."""
        jobs = dispatcher.acquire(
            queues=queues,
            worker_id=worker_id,
            limit=limit,
            lease_timeout=self.lease_timeout,
            max_wait=self.delivery_wait if max_wait is None else max_wait,
        )
        assert len(jobs) <= limit, f"acquire returned {len(jobs)} jobs for limit={limit}"
        return jobs

    def collect(self, dispatcher: Dispatcher, clock: FakeClock, count: int, *, worker_id: str = "w1",
                queues: list[str] | None = None, limit: int = 1) -> list[Job]:
        """Acquire until ``count`` jobs came back (running ``maintain`` between empty rounds)."""
        got: list[Job] = []
        for _ in range(self.max_rounds):
            if len(got) >= count:
                break
            jobs = self.acquire(dispatcher, worker_id=worker_id, queues=queues, limit=limit, max_wait=self.idle_wait)
            if not jobs:
                dispatcher.maintain(clock.now())
            got.extend(jobs)
        return got

    def assert_leased_to(self, repository: JobRepository, job: Job, worker_id: str) -> None:
        """``job`` (as returned by acquire) is running in the repository under its own token and worker."""
        assert job.status is JobStatus.RUNNING
        assert job.leased_by == worker_id
        assert job.lease_token
        stored = repository.get(job.id)
        assert stored.status is JobStatus.RUNNING
        assert stored.lease_token == job.lease_token
        assert stored.leased_by == worker_id
        assert stored.attempts == 1

    # -- the contract --------------------------------------------------------------------------
    def test_notified_job_is_leased_to_the_acquiring_worker(self, repository, dispatcher, clock):
        job = self.enqueue(repository, dispatcher, clock)
        got = self.acquire(dispatcher, worker_id="worker-a", queues=["default"])
        assert [j.id for j in got] == [job.id]
        self.assert_leased_to(repository, got[0], "worker-a")
        assert got[0].leased_at == clock.now()
        assert got[0].lease_expires_at == clock.now() + timedelta(seconds=self.lease_timeout)

    def test_idle_acquire_returns_nothing_after_max_wait(self, repository, dispatcher, clock):
        assert self.acquire(dispatcher, queues=["default"], max_wait=self.idle_wait) == []
        assert self.acquire(dispatcher, queues=None, max_wait=self.idle_wait) == []
        assert self.acquire(dispatcher, queues=["default"], max_wait=0) == []
        assert repository.list_jobs() == []

    def test_future_job_is_not_handed_out_before_it_is_due(self, repository, dispatcher, clock):
        job = self.enqueue(repository, dispatcher, clock, delay=60.0)
        dispatcher.maintain(clock.now())
        assert self.acquire(dispatcher, queues=["default"], max_wait=self.idle_wait) == []
        clock.advance(59.0)
        dispatcher.maintain(clock.now())
        assert self.acquire(dispatcher, queues=["default"], max_wait=self.idle_wait) == []
        stored = repository.get(job.id)
        assert (stored.status, stored.attempts) == (JobStatus.QUEUED, 0)
        clock.advance(1.0)
        dispatcher.maintain(clock.now())
        got = self.collect(dispatcher, clock, 1, queues=["default"])
        assert [j.id for j in got] == [job.id]
        self.assert_leased_to(repository, got[0], "w1")

    def test_a_job_is_never_handed_to_two_workers(self, repository, dispatcher, clock):
        jobs = [self.enqueue(repository, dispatcher, clock) for _ in range(self.racing_jobs)]
        results: dict[str, list[Job]] = {f"racer-{i}": [] for i in range(self.racing_workers)}
        errors: list[BaseException] = []
        done = threading.Event()
        total = threading.Semaphore(0)

        def race(worker_id: str) -> None:
            try:
                for _ in range(self.max_rounds):
                    if done.is_set():
                        return
                    got = self.acquire(dispatcher, worker_id=worker_id, queues=["default"], limit=3, max_wait=self.idle_wait)
                    results[worker_id].extend(got)
                    for _job in got:
                        total.release()
                    if not got:
                        dispatcher.maintain(clock.now())
            except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=race, args=(w,), daemon=True) for w in results]
        for t in threads:
            t.start()
        for _ in range(len(jobs)):
            if not total.acquire(timeout=self.thread_join_timeout):
                break
        done.set()
        dispatcher.wake()
        for t in threads:
            t.join(self.thread_join_timeout)
            assert not t.is_alive(), "an acquiring thread did not return"
        assert errors == []
        handed = [(w, j) for w, got in results.items() for j in got]
        ids = [j.id for _, j in handed]
        assert sorted(ids) == sorted(j.id for j in jobs), "every job handed out exactly once"
        for worker_id, job in handed:
            self.assert_leased_to(repository, job, worker_id)

    def test_wake_returns_a_blocked_acquire(self, repository, dispatcher, clock):
        outcome: list[list[Job]] = []
        thread = threading.Thread(
            target=lambda: outcome.append(self.acquire(dispatcher, queues=["default"], max_wait=10 * self.thread_join_timeout)),
            daemon=True,
        )
        thread.start()
        for _ in range(int(self.thread_join_timeout / 0.1)):
            thread.join(0.1)  # repeated, in case the first wake-up came before the acquire began to wait
            if not thread.is_alive():
                break
            dispatcher.wake()
        assert not thread.is_alive(), "wake() did not return a blocked acquire"
        assert outcome == [[]]
        job = self.enqueue(repository, dispatcher, clock)  # the dispatcher still works after a wake-up
        assert [j.id for j in self.collect(dispatcher, clock, 1, queues=["default"])] == [job.id]

    def test_queues_filter_what_a_worker_gets(self, repository, dispatcher, clock):
        alpha = self.enqueue(repository, dispatcher, clock, queue="alpha")
        beta = self.enqueue(repository, dispatcher, clock, queue="beta")
        got = self.collect(dispatcher, clock, 1, queues=["alpha"])
        assert [j.id for j in got] == [alpha.id]
        assert self.acquire(dispatcher, queues=["alpha"], max_wait=self.idle_wait) == []
        assert self.acquire(dispatcher, queues=["gamma"], max_wait=self.idle_wait) == []
        assert repository.get(beta.id).status is JobStatus.QUEUED
        got = self.collect(dispatcher, clock, 1, worker_id="w2", queues=["beta"])
        assert [j.id for j in got] == [beta.id]
        self.assert_leased_to(repository, got[0], "w2")

    def test_job_types_filter_what_a_worker_gets(self, repository, dispatcher, clock):
        """A dispatcher whose ``acquire`` takes ``job_types`` hands out only jobs of those types
        (the others stay queued for a later acquire); one that does not take it (a worker pool
        then leases as if its handlers were all of one kind) hands out jobs of every type."""
        now = clock.now()
        plain = repository.enqueue(prepare_job("kind.sync", {}, now=now), now=now).job
        loop = repository.enqueue(prepare_job("kind.async", {}, now=now), now=now).job
        dispatcher.notify([plain, loop])
        if "job_types" not in inspect.signature(dispatcher.acquire).parameters:
            got = self.collect(dispatcher, clock, 2, queues=None, limit=5)
            assert sorted(j.id for j in got) == sorted([plain.id, loop.id])
            return
        got = dispatcher.acquire(queues=None, worker_id="w1", limit=5, lease_timeout=self.lease_timeout,
                                 max_wait=self.delivery_wait, job_types=["kind.async"])
        assert [j.id for j in got] == [loop.id]
        assert repository.get(plain.id).status is JobStatus.QUEUED
        assert dispatcher.acquire(queues=None, worker_id="w1", limit=5, lease_timeout=self.lease_timeout,
                                  max_wait=self.idle_wait, job_types=["kind.async"]) == []
        got = dispatcher.acquire(queues=None, worker_id="w2", limit=5, lease_timeout=self.lease_timeout,
                                 max_wait=self.delivery_wait, job_types=["kind.sync", "kind.async"])
        assert [j.id for j in got] == [plain.id]
        self.assert_leased_to(repository, got[0], "w2")

    def test_queues_none_reads_every_queue(self, repository, dispatcher, clock):
        jobs = [self.enqueue(repository, dispatcher, clock, queue=q) for q in ("q1", "q2", "q3")]
        got = self.collect(dispatcher, clock, 3, queues=None, limit=3)
        assert sorted(j.id for j in got) == sorted(j.id for j in jobs)

    def test_limit_is_respected_and_the_rest_delivered_later(self, repository, dispatcher, clock):
        jobs = [self.enqueue(repository, dispatcher, clock) for _ in range(5)]
        first = self.acquire(dispatcher, queues=["default"], limit=2)
        assert 1 <= len(first) <= 2
        rest = self.collect(dispatcher, clock, 5 - len(first), queues=["default"], limit=2)
        ids = [j.id for j in first + rest]
        assert sorted(ids) == sorted(j.id for j in jobs)
        assert len(set(ids)) == 5

    def test_lost_notification_is_found_within_one_poll_or_sweep(self, repository, dispatcher, clock):
        job = self.enqueue(repository, dispatcher, clock, notify=False)
        dispatcher.maintain(clock.now())
        got = self.acquire(dispatcher, queues=["default"])
        assert [j.id for j in got] == [job.id]
        self.assert_leased_to(repository, got[0], "w1")

    def test_running_job_is_not_handed_out_again(self, repository, dispatcher, clock):
        job = self.enqueue(repository, dispatcher, clock)
        [leased] = self.acquire(dispatcher, worker_id="holder", queues=["default"])
        dispatcher.notify([job])  # a duplicate notification (e.g. a re-publish) of the queued snapshot
        dispatcher.notify([job])
        dispatcher.maintain(clock.now())
        assert self.acquire(dispatcher, worker_id="other", queues=["default"], max_wait=self.idle_wait) == []
        stored = repository.get(job.id)
        assert (stored.status, stored.lease_token, stored.leased_by, stored.attempts) == (
            JobStatus.RUNNING, leased.lease_token, "holder", 1,
        )

    def test_finished_job_is_not_handed_out_again(self, repository, dispatcher, clock):
        job = self.enqueue(repository, dispatcher, clock)
        [leased] = self.acquire(dispatcher, queues=["default"])
        assert leased.lease_token is not None
        repository.complete(job.id, leased.lease_token, now=clock.now())
        dispatcher.notify([job])
        dispatcher.maintain(clock.now())
        assert self.acquire(dispatcher, worker_id="w2", queues=["default"], max_wait=self.idle_wait) == []
        assert repository.get(job.id).status is JobStatus.COMPLETED

    def test_notify_of_nothing_or_of_future_jobs_is_harmless(self, repository, dispatcher, clock):
        dispatcher.notify([])
        later = self.enqueue(repository, dispatcher, clock, delay=3600.0)
        dispatcher.notify([later])
        assert self.acquire(dispatcher, queues=["default"], max_wait=self.idle_wait) == []
        assert repository.get(later.id).status is JobStatus.QUEUED

    def test_jobs_leased_directly_are_not_handed_out_again_and_later_ones_still_are(self, repository, dispatcher, clock):
        """A pool that refills from the repository (``leases_from``) tells ``leased_directly``
        (harmless for any dispatcher): the notifications of those jobs then buy nothing, and a job published afterwards is
        still delivered (no other job's notification was spent on them)."""
        assert dispatcher.leases_from(repository) in (True, False)  # either way, being told must be harmless
        jobs = [self.enqueue(repository, dispatcher, clock) for _ in range(3)]
        direct = repository.lease(queues=["default"], worker_id="refill", now=clock.now(),
                                  lease_timeout=self.lease_timeout, limit=3)
        assert sorted(j.id for j in direct) == sorted(j.id for j in jobs)
        dispatcher.leased_directly(direct)
        assert self.acquire(dispatcher, worker_id="w2", queues=["default"], limit=3, max_wait=self.idle_wait) == []
        later = self.enqueue(repository, dispatcher, clock)
        got = self.collect(dispatcher, clock, 1, worker_id="w2", queues=["default"], limit=3)
        assert [j.id for j in got] == [later.id]
        self.assert_leased_to(repository, got[0], "w2")
        for job in direct:
            assert repository.get(job.id).leased_by == "refill"


__all__ = ["DispatcherContract"]
