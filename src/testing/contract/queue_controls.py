"""Contract part: queue controls, a paused queue and a queue's running limit, on every lease path.

The rules (:mod:`tether.domain.queues`): no job of a paused queue is leased (``lease``,
``lease_job``, ``complete_and_lease``) nor listed by ``due_jobs``, while enqueue keeps accepting
jobs and running jobs finish; a limited queue never has more than ``max_running`` jobs running
under unexpired leases, however many callers lease at once; an expired lease frees its slot
before the reaper writes the job; queues stay implicit (a queue without jobs may be paused or
limited); a rate-limited queue starts at most ``rate_limit`` jobs per fixed window of
``rate_period`` seconds; bad input names its field and writes nothing.
"""

from __future__ import annotations

import threading

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.queues import QueueState
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport


class QueueControlContract(ContractSupport):
    """``set_queue_paused``, ``set_queue_limit``, ``queue_states``, ``count_by_queue`` and how leases honour them."""

    #: Threads leasing one limited queue at once in the no-overshoot race.
    limit_race_threads: int = 8

    def _lease(self, repository: JobRepository, clock: FakeClock, queues: list[str] | None = None, limit: int = 10,
               worker_id: str = "w") -> list[Job]:
        return repository.lease(queues=queues, worker_id=worker_id, now=clock.now(), lease_timeout=self.lease_timeout,
                                limit=limit)

    # -- pause ------------------------------------------------------------------------------------
    def test_a_paused_queue_is_never_leased_and_resume_gives_its_jobs_back(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        held = self.add(repository, clock, queue="mail")
        other = self.add(repository, clock, queue="reports")
        state = repository.set_queue_paused("mail", True, now=clock.now())
        assert (state.name, state.paused, state.max_running, state.updated_at) == ("mail", True, None, clock.now())
        late = self.add(repository, clock, queue="mail")  # enqueue keeps accepting jobs
        clock.advance(1)
        assert [j.id for j in self._lease(repository, clock)] == [other.id]
        assert self._lease(repository, clock, queues=["mail"]) == []
        assert self._lease(repository, clock, queues=["mail", "reports"]) == []
        assert repository.lease_job(held.id, worker_id="w", now=clock.now(), lease_timeout=60) is None
        assert repository.due_jobs(now=clock.now(), queues=None, limit=10) == []
        assert repository.due_jobs(now=clock.now(), queues=["mail"], limit=10) == []
        assert repository.get(held.id).status is JobStatus.QUEUED
        resumed = repository.set_queue_paused("mail", False, now=clock.now())
        assert resumed.paused is False
        assert [j.id for j in repository.due_jobs(now=clock.now(), queues=None, limit=10)] == [held.id, late.id]
        assert [j.id for j in self._lease(repository, clock, queues=["mail"])] == [held.id, late.id]

    def test_a_running_job_of_a_paused_queue_finishes(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, queue="mail")
        leased = self.lease_one(repository, clock)
        repository.set_queue_paused("mail", True, now=clock.now())
        repository.heartbeat(job.id, self.token_of(leased), now=clock.advance(1), lease_timeout=60)
        assert repository.complete(job.id, self.token_of(leased), now=clock.advance(1)).status is JobStatus.COMPLETED

    def test_complete_and_lease_leaves_a_paused_queue_alone(self, repository: JobRepository, clock: FakeClock) -> None:
        first = self.add(repository, clock, queue="mail")
        waiting = self.add(repository, clock, queue="mail")
        leased = self.lease_one(repository, clock)
        assert leased.id == first.id
        repository.set_queue_paused("mail", True, now=clock.now())
        results, more = repository.complete_and_lease(
            [(first.id, self.token_of(leased))], now=clock.advance(1), queues=None, worker_id="w",
            lease_timeout=60, limit=5,
        )
        assert isinstance(results[0], Job) and results[0].status is JobStatus.COMPLETED
        assert more == [] and repository.get(waiting.id).status is JobStatus.QUEUED

    def test_a_listed_order_lease_leaves_paused_queues_out_and_counts_limited_ones(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        a = [self.add(repository, clock, queue="a") for _ in range(3)]
        b = [self.add(repository, clock, queue="b") for _ in range(3)]
        [self.add(repository, clock, queue="c") for _ in range(2)]
        repository.set_queue_limit("b", 1, now=clock.now())
        repository.set_queue_paused("c", True, now=clock.now())
        clock.advance(1)
        got = repository.lease(queues=["c", "b", "a"], worker_id="w", now=clock.now(), lease_timeout=self.lease_timeout,
                               limit=10, listed_order=True)
        assert [j.id for j in got] == [b[0].id, *(j.id for j in a)]  # in the order listed: c paused, b at its limit
        assert repository.lease(queues=["a", "b"], worker_id="w", now=clock.now(), lease_timeout=self.lease_timeout,
                                limit=10, listed_order=True) == []

    def test_queues_are_implicit_and_listed_by_name(self, repository: JobRepository, clock: FakeClock) -> None:
        assert repository.queue_states() == []
        repository.set_queue_paused("nobody-yet", True, now=clock.now())
        repository.set_queue_limit("alpha", 4, now=clock.now())
        repository.set_queue_paused("nobody-yet", True, now=clock.now())  # idempotent
        states = repository.queue_states()
        assert [(s.name, s.paused, s.max_running) for s in states] == [("alpha", False, 4), ("nobody-yet", True, None)]
        assert all(isinstance(s, QueueState) and s.updated_at == clock.now() for s in states)
        job = self.add(repository, clock, queue="nobody-yet")
        assert self._lease(repository, clock) == []
        repository.set_queue_paused("nobody-yet", False, now=clock.now())
        assert [j.id for j in self._lease(repository, clock)] == [job.id]

    def test_count_by_queue(self, repository: JobRepository, clock: FakeClock) -> None:
        self.add(repository, clock, queue="a")
        self.add(repository, clock, queue="a", job_type="other.kind")
        self.add(repository, clock, queue="b")
        self.lease_one(repository, clock, queues=["b"])
        counts = repository.count_by_queue()
        assert set(counts) == {"a", "b"}
        assert counts["a"][JobStatus.QUEUED] == 2 and counts["b"][JobStatus.RUNNING] == 1
        assert all(len(c) == len(JobStatus) for c in counts.values())
        assert repository.count_by_queue(job_types=["other.kind"]) == {"a": {**{s: 0 for s in JobStatus}, JobStatus.QUEUED: 1}}

    # -- running limits ---------------------------------------------------------------------------
    def test_a_limited_queue_runs_at_most_its_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_limit("api", 2, now=clock.now())
        jobs = [self.add(repository, clock, queue="api") for _ in range(5)]
        free = [self.add(repository, clock, queue="bulk") for _ in range(3)]
        clock.advance(1)
        leased = self._lease(repository, clock, limit=20)
        assert sorted(j.id for j in leased) == sorted([jobs[0].id, jobs[1].id] + [j.id for j in free])
        assert self._lease(repository, clock, queues=["api"]) == []
        assert repository.lease_job(jobs[2].id, worker_id="w", now=clock.now(), lease_timeout=60) is None
        first = next(j for j in leased if j.id == jobs[0].id)
        repository.complete(first.id, self.token_of(first), now=clock.advance(1))
        again = self._lease(repository, clock, queues=["api"])
        assert [j.id for j in again] == [jobs[2].id]
        assert self._lease(repository, clock, queues=["api"]) == []

    def test_lease_job_takes_a_free_slot_of_a_limited_queue(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_limit("api", 1, now=clock.now())
        a = self.add(repository, clock, queue="api")
        b = self.add(repository, clock, queue="api")
        clock.advance(1)
        got = repository.lease_job(b.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert got is not None and got.id == b.id and got.status is JobStatus.RUNNING
        assert repository.lease_job(a.id, worker_id="w", now=clock.now(), lease_timeout=60) is None

    def test_complete_and_lease_refills_up_to_the_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_limit("api", 2, now=clock.now())
        for _ in range(6):
            self.add(repository, clock, queue="api")
        clock.advance(1)
        leased = self._lease(repository, clock, limit=5)
        assert len(leased) == 2
        results, more = repository.complete_and_lease(
            [(leased[0].id, self.token_of(leased[0]))], now=clock.advance(1), queues=None, worker_id="w",
            lease_timeout=60, limit=5,
        )
        assert isinstance(results[0], Job) and len(more) == 1
        assert repository.count_by_status(queue="api")[JobStatus.RUNNING] == 2

    def test_an_expired_lease_frees_its_slot_before_the_reaper(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_limit("api", 1, now=clock.now())
        self.add(repository, clock, queue="api")
        second = self.add(repository, clock, queue="api")
        clock.advance(1)
        assert len(self._lease(repository, clock)) == 1
        assert self._lease(repository, clock) == []
        clock.advance(self.lease_timeout + 1)  # the first lease expired; nobody reaped it
        taken = self._lease(repository, clock)
        assert [j.id for j in taken] == [second.id]

    def test_clearing_a_limit_and_pausing_a_limited_queue(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_limit("api", 1, now=clock.now())
        for _ in range(3):
            self.add(repository, clock, queue="api")
        clock.advance(1)
        repository.set_queue_paused("api", True, now=clock.now())
        assert self._lease(repository, clock) == []  # a pause wins over free slots
        repository.set_queue_paused("api", False, now=clock.now())
        assert len(self._lease(repository, clock)) == 1
        cleared = repository.set_queue_limit("api", None, now=clock.now())
        assert (cleared.max_running, cleared.paused) == (None, False)
        assert len(self._lease(repository, clock)) == 2

    def test_concurrent_leases_never_overshoot_a_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_limit("api", 3, now=clock.now())
        for _ in range(40):
            self.add(repository, clock, queue="api")
        clock.advance(1)
        now = clock.now()
        taken: list[Job] = []
        lock = threading.Lock()
        start = threading.Barrier(self.limit_race_threads)

        def lease(index: int) -> None:
            start.wait()
            for _ in range(3):  # by queue, over all queues, and by id (as the Redis consumer does)
                queues = ["api"] if index % 2 else None
                jobs = repository.lease(queues=queues, worker_id=f"w{index}", now=now, lease_timeout=60, limit=2)
                due = repository.due_jobs(now=now, queues=["api"], limit=index + 1)
                if due:
                    one = repository.lease_job(due[-1].id, worker_id=f"w{index}", now=now, lease_timeout=60)
                    jobs += [one] if one is not None else []
                with lock:
                    taken.extend(jobs)

        self.run_threads([lambda i=i: lease(i) for i in range(self.limit_race_threads)])  # type: ignore[misc]
        assert len(taken) == 3
        assert repository.count_by_status(queue="api")[JobStatus.RUNNING] == 3

    # -- rate limits ------------------------------------------------------------------------------
    def test_a_rate_limited_queue_starts_at_most_its_rate_per_fixed_window(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        start = clock.now()  # 2026-01-01T00:00:00Z: a multiple of 10 s since the epoch
        state = repository.set_queue_rate("api", 3, 10.0, now=clock.now())
        assert (state.rate_limit, state.rate_period, state.max_running) == (3, 10.0, None)
        jobs = [self.add(repository, clock, queue="api") for _ in range(10)]
        other = self.add(repository, clock, queue="bulk")
        self.at(clock, start, 1)
        first = self._lease(repository, clock, limit=20)
        assert sorted(j.id for j in first) == sorted([j.id for j in jobs[:3]] + [other.id])
        [api] = [s for s in repository.queue_states() if s.name == "api"]
        assert (api.window_start, api.window_starts, api.started_in_window(clock.now())) == (start, 3, 3)
        for job in first:  # finished jobs do not give starts back
            repository.complete(job.id, self.token_of(job), now=clock.now())
        self.at(clock, start, 9.999)
        assert self._lease(repository, clock) == []
        assert repository.lease_job(jobs[3].id, worker_id="w", now=clock.now(), lease_timeout=60) is None
        self.at(clock, start, 10)  # the next window
        got = repository.lease_job(jobs[5].id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert got is not None and got.id == jobs[5].id
        assert len(self._lease(repository, clock)) == 2
        self.at(clock, start, 19)
        assert self._lease(repository, clock) == []
        self.at(clock, start, 35)  # windows without leases in between: a fresh count
        assert len(self._lease(repository, clock, limit=2)) == 2
        assert len(self._lease(repository, clock)) == 1

    def test_a_rate_and_a_running_limit_together_take_the_smaller_room(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        repository.set_queue_rate("api", 3, 60.0, now=clock.now())
        repository.set_queue_limit("api", 1, now=clock.now())
        for _ in range(5):
            self.add(repository, clock, queue="api")
        clock.advance(1)
        [one] = self._lease(repository, clock)
        assert self._lease(repository, clock) == []
        results, more = repository.complete_and_lease(
            [(one.id, self.token_of(one))], now=clock.advance(1), queues=None, worker_id="w", lease_timeout=60, limit=5,
        )
        assert isinstance(results[0], Job) and len(more) == 1
        repository.complete(more[0].id, self.token_of(more[0]), now=clock.now())
        assert len(self._lease(repository, clock)) == 1  # the third start of the window
        repository.set_queue_limit("api", None, now=clock.now())
        assert self._lease(repository, clock) == []  # the rate still holds
        cleared = repository.set_queue_rate("api", None, None, now=clock.now())
        assert (cleared.rate_limit, cleared.rate_period) == (None, None)
        assert len(self._lease(repository, clock)) == 2  # the last two, on the plain path again

    def test_concurrent_leases_never_exceed_a_rate(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_rate("api", 5, 3600.0, now=clock.now())
        for _ in range(30):
            self.add(repository, clock, queue="api")
        clock.advance(1)
        now = clock.now()
        taken: list[Job] = []
        lock = threading.Lock()
        start = threading.Barrier(self.limit_race_threads)

        def lease(index: int) -> None:
            start.wait()
            for _ in range(3):
                jobs = repository.lease(queues=None, worker_id=f"w{index}", now=now, lease_timeout=60, limit=2)
                for job in jobs:
                    repository.complete(job.id, self.token_of(job), now=now)
                with lock:
                    taken.extend(jobs)

        self.run_threads([lambda i=i: lease(i) for i in range(self.limit_race_threads)])  # type: ignore[misc]
        assert len(taken) == 5

    @pytest.mark.parametrize(
        ("rate", "period", "field"),
        [(0, 10.0, "rate_limit"), (-1, 10.0, "rate_limit"), ("5", 10.0, "rate_limit"), (5, 0, "rate_period"),
         (5, -1.0, "rate_period"), (5, float("nan"), "rate_period"), (5, None, "rate_period"), (None, 10.0, "rate_limit"),
         (5, 0.0001, "rate_period")],
    )
    def test_a_bad_rate_names_its_field_and_writes_nothing(
        self, repository: JobRepository, clock: FakeClock, rate: object, period: object, field: str
    ) -> None:
        with pytest.raises(ValidationError) as caught:
            repository.set_queue_rate("api", rate, period, now=clock.now())  # type: ignore[arg-type]
        assert caught.value.field == field
        assert repository.queue_states() == []

    # -- bad input --------------------------------------------------------------------------------
    @pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3", 1_000_001])
    def test_a_bad_limit_names_max_running_and_writes_nothing(
        self, repository: JobRepository, clock: FakeClock, bad: object
    ) -> None:
        with pytest.raises(ValidationError) as caught:
            repository.set_queue_limit("api", bad, now=clock.now())  # type: ignore[arg-type]
        assert caught.value.field == "max_running"
        assert repository.queue_states() == []

    @pytest.mark.parametrize("bad", ["", "no spaces", "-dash-first", "x" * 65, None, 7])
    def test_a_bad_queue_name_names_queue_and_writes_nothing(
        self, repository: JobRepository, clock: FakeClock, bad: object
    ) -> None:
        for write in (lambda: repository.set_queue_paused(bad, True, now=clock.now()),  # type: ignore[arg-type]
                      lambda: repository.set_queue_limit(bad, 3, now=clock.now())):  # type: ignore[arg-type]
            with pytest.raises(ValidationError) as caught:
                write()
            assert caught.value.field == "queue"
        assert repository.queue_states() == []

    def test_a_naive_now_is_refused(self, repository: JobRepository, clock: FakeClock) -> None:
        with pytest.raises(ValidationError):
            repository.set_queue_paused("api", True, now=clock.now().replace(tzinfo=None))
        assert repository.queue_states() == []


__all__ = ["QueueControlContract"]
