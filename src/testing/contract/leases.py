"""Contract part: leasing, lease order and fencing (cases C01-C04, C21, token uniqueness)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import InvalidTransition, LeaseLost
from tether.domain.job import JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import MINUTE, ContractSupport


class LeaseContract(ContractSupport):
    """Leases, heartbeats, release, and the fence on every write to a running job."""

    # -- leasing -----------------------------------------------------------------------------
    def test_lease_sets_the_lease_fields_and_counts_the_attempt(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, queue="mail")
        clock.advance(7)
        leased = self.lease_one(repository, clock, worker_id="host-1")
        assert leased.id == job.id
        assert leased.status is JobStatus.RUNNING
        assert leased.attempts == 1
        assert leased.leased_by == "host-1"
        assert leased.leased_at == clock.now()
        assert leased.lease_expires_at == clock.now() + timedelta(seconds=self.lease_timeout)
        assert isinstance(leased.lease_token, str) and leased.lease_token
        assert repository.get(job.id) == leased

    def test_lease_respects_limit_and_lease_order(self, repository: JobRepository, clock: FakeClock) -> None:
        ids = [self.add(repository, clock, priority=p).id for p in (1, 5, 3, 5, 0)]
        first = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=3)
        assert [j.id for j in first] == [ids[1], ids[3], ids[2]]
        rest = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=10)
        assert [j.id for j in rest] == [ids[0], ids[4]]
        assert repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=10) == []

    def test_lease_honours_the_queue_filter(self, repository: JobRepository, clock: FakeClock) -> None:
        a = self.add(repository, clock, queue="a")
        b = self.add(repository, clock, queue="b")
        c = self.add(repository, clock, queue="c")
        got = repository.lease(queues=["c", "a"], worker_id="w", now=clock.now(), lease_timeout=60, limit=10)
        assert sorted(j.id for j in got) == [a.id, c.id]
        assert repository.get(b.id).status is JobStatus.QUEUED
        assert [j.id for j in repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)] == [b.id]

    def test_lease_of_several_queues_keeps_one_global_order_by_default(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        a = [self.add(repository, clock, queue="a").id for _ in range(3)]
        clock.advance(1)
        b = [self.add(repository, clock, queue="b", priority=p).id for p in (0, 5)]
        got = repository.lease(queues=["b", "a"], worker_id="w", now=clock.now(), lease_timeout=60, limit=4)
        assert [j.id for j in got] == [b[1], a[0], a[1], a[2]]  # priority, then the older jobs of a

    def test_lease_in_listed_order_takes_the_queues_in_turn(self, repository: JobRepository, clock: FakeClock) -> None:
        a = [self.add(repository, clock, queue="a", priority=p).id for p in (0, 9, 0)]
        clock.advance(1)
        b = [self.add(repository, clock, queue="b", priority=p).id for p in (0, 1)]
        c = self.add(repository, clock, queue="c").id
        now = clock.now()
        first = repository.lease(queues=["b", "a"], worker_id="w", now=now, lease_timeout=60, limit=3, listed_order=True)
        assert [j.id for j in first] == [b[1], b[0], a[1]]  # all of b in lease order, then the best of a
        second = repository.lease(queues=["b", "a"], worker_id="w", now=now, lease_timeout=60, limit=5, listed_order=True)
        assert [j.id for j in second] == [a[0], a[2]]
        assert repository.get(c).status is JobStatus.QUEUED  # not listed: untouched
        # one queue, or all queues: the flag changes nothing
        d = [self.add(repository, clock, queue="c", priority=p).id for p in (0, 3)]
        now = clock.now()
        alone = repository.lease(queues=["c"], worker_id="w", now=now, lease_timeout=60, limit=1, listed_order=True)
        assert [j.id for j in alone] == [d[1]]
        rest = repository.lease(queues=None, worker_id="w", now=now, lease_timeout=60, limit=5, listed_order=True)
        assert [j.id for j in rest] == [c, d[0]]

    def test_complete_and_lease_in_listed_order(self, repository: JobRepository, clock: FakeClock) -> None:
        z = self.add(repository, clock, queue="z")
        held = repository.lease(queues=["z"], worker_id="w", now=clock.now(), lease_timeout=60)[0]
        a = [self.add(repository, clock, queue="a", priority=9).id for _ in range(2)]
        b = [self.add(repository, clock, queue="b").id for _ in range(2)]
        results, leased = repository.complete_and_lease(
            [(held.id, self.token_of(held))], now=clock.now(), queues=["b", "a"], worker_id="w", lease_timeout=60,
            limit=3, listed_order=True,
        )
        assert [getattr(r, "status", r) for r in results] == [JobStatus.COMPLETED]
        assert held.id == z.id
        assert [j.id for j in leased] == [b[0], b[1], a[0]]

    def test_c21_lease_order_priority_desc_scheduled_asc_id_asc(self, repository: JobRepository, clock: FakeClock) -> None:
        # C21: (priority, scheduled_at, id) = (0, t-10, 1), (10, t-1, 2), (10, t-5, 4), (10, t-5, 3), (10, t+60, 5)
        t = clock.now()
        spec = [(0, -10), (10, -1), (10, -5), (10, -5), (10, 60)]  # enqueued as ids 1..5 in this order
        ids = [self.add(repository, clock, priority=p, run_at=t + timedelta(seconds=s)).id for p, s in spec]
        assert ids == sorted(ids) and len(set(ids)) == 5, "ids must grow in enqueue order"
        order = []
        while leased := repository.lease(queues=None, worker_id="w", now=t, lease_timeout=60, limit=1):
            order.append(leased[0].id)
        assert order == [ids[2], ids[3], ids[1], ids[0]]  # 3, 4, 2, 1
        assert repository.lease(queues=None, worker_id="w", now=t + timedelta(seconds=59.999999), lease_timeout=60) == []
        assert repository.lease_job(ids[4], worker_id="w", now=t + timedelta(seconds=59), lease_timeout=60) is None
        late = repository.lease(queues=None, worker_id="w", now=t + timedelta(seconds=60), lease_timeout=60, limit=5)
        assert [j.id for j in late] == [ids[4]]

    def test_c21_lease_order_in_one_batch(self, repository: JobRepository, clock: FakeClock) -> None:
        t = clock.now()
        spec = [(0, -10), (10, -1), (10, -5), (10, -5), (10, 60)]
        ids = [self.add(repository, clock, priority=p, run_at=t + timedelta(seconds=s)).id for p, s in spec]
        batch = repository.lease(queues=None, worker_id="w", now=t, lease_timeout=60, limit=10)
        assert [j.id for j in batch] == [ids[2], ids[3], ids[1], ids[0]]

    def test_lease_job_by_id_only_when_due(self, repository: JobRepository, clock: FakeClock) -> None:
        due = self.add(repository, clock)
        later = self.add(repository, clock, delay=30)
        leased = repository.lease_job(due.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert leased is not None and leased.status is JobStatus.RUNNING and leased.attempts == 1
        assert leased.lease_expires_at == clock.now() + timedelta(seconds=60)
        # already taken, not due, unknown: None, and nothing changes
        assert repository.lease_job(due.id, worker_id="other", now=clock.now(), lease_timeout=60) is None
        assert repository.get(due.id) == leased
        assert repository.lease_job(later.id, worker_id="w", now=clock.now(), lease_timeout=60) is None
        assert repository.get(later.id) == later
        assert repository.lease_job(later.id + 10_000, worker_id="w", now=clock.now(), lease_timeout=60) is None
        clock.advance(30)
        assert repository.lease_job(later.id, worker_id="w", now=clock.now(), lease_timeout=60) is not None
        # finished jobs are never leased again
        repository.complete(leased.id, self.token_of(leased), now=clock.now())
        assert repository.lease_job(due.id, worker_id="w", now=clock.now(), lease_timeout=60) is None

    @pytest.mark.slow
    def test_lease_tokens_are_never_reused(self, repository: JobRepository, clock: FakeClock) -> None:
        # The same worker id leases the same job over and over (released in between, and now and
        # then dead-lettered and manually retried): every lease has a token of its own.
        job = self.add(repository, clock, max_attempts=1)
        tokens = []
        for i in range(self.token_reuse_leases):
            if i % 2:
                leased = repository.lease_job(job.id, worker_id="host-1", now=clock.now(), lease_timeout=60)
                assert leased is not None
            else:
                leased = self.lease_one(repository, clock, worker_id="host-1", lease_timeout=60)
            token = self.token_of(leased)
            tokens.append(token)
            if i % 100 == 99:
                repository.dead_letter(job.id, token, now=clock.now(), error="boom")
                repository.retry_dead(job.id, now=clock.now())
            else:
                repository.release(job.id, token, now=clock.now())
            clock.advance(0.001)
        assert len(set(tokens)) == self.token_reuse_leases

    # -- fencing: C01-C03 --------------------------------------------------------------------
    def _taken_over(self, repository: JobRepository, clock: FakeClock, old_worker: str = "A", new_worker: str = "B"):
        """C01's timeline to t=16m01s: A leased at t=0, reaped at 16 min, B leased at 16m01s."""
        t0 = clock.now()
        job = self.add(repository, clock)
        a = self.lease_one(repository, clock, worker_id=old_worker)
        assert a.attempts == 1
        self.at(clock, t0, 16 * MINUTE)
        reaped = repository.reap(now=clock.now())
        assert [j.id for j in reaped] == [job.id]
        assert reaped[0].status is JobStatus.RETRYING and reaped[0].attempts == 1
        self.at(clock, t0, 16 * MINUTE + 1)
        b = self.lease_one(repository, clock, worker_id=new_worker)
        assert b.id == job.id and b.attempts == 2
        assert b.lease_token != a.lease_token
        return t0, a, b

    def test_c01_old_holder_cannot_complete_after_takeover(self, repository: JobRepository, clock: FakeClock) -> None:
        t0, a, b = self._taken_over(repository, clock)
        self.at(clock, t0, 17 * MINUTE)
        with pytest.raises(LeaseLost):
            repository.complete(a.id, self.token_of(a), now=clock.now())
        with pytest.raises(LeaseLost):
            repository.fail(a.id, self.token_of(a), now=clock.now(), error="late", retry_at=clock.now())
        with pytest.raises(LeaseLost):
            repository.dead_letter(a.id, self.token_of(a), now=clock.now(), error="late")
        with pytest.raises(LeaseLost):
            repository.heartbeat(a.id, self.token_of(a), now=clock.now(), lease_timeout=self.lease_timeout)
        with pytest.raises(LeaseLost):
            repository.release(a.id, self.token_of(a), now=clock.now())
        current = repository.get(a.id)
        assert current == b, "the old holder's writes must change nothing"
        assert current.status is JobStatus.RUNNING and current.attempts == 2 and current.leased_by == "B"
        done = repository.complete(b.id, self.token_of(b), now=clock.now())
        assert done.status is JobStatus.COMPLETED and done.attempts == 2
        assert repository.get(b.id).status is JobStatus.COMPLETED

    def test_c02_old_holder_failure_leaves_the_new_lease_alone(self, repository: JobRepository, clock: FakeClock) -> None:
        t0, a, b = self._taken_over(repository, clock)
        before = repository.get(a.id)
        self.at(clock, t0, 16 * MINUTE + 30)
        with pytest.raises(LeaseLost):
            repository.fail(a.id, self.token_of(a), now=clock.now(), error="ValueError: transient",
                            retry_at=clock.now() + timedelta(seconds=1))
        after = repository.get(a.id)
        assert after == before
        assert after.attempts == 2 and after.lease_token == b.lease_token and after.scheduled_at == before.scheduled_at
        assert after.last_error == before.last_error
        self.at(clock, t0, 16 * MINUTE + 31)
        assert repository.lease(queues=None, worker_id="C", now=clock.now(), lease_timeout=self.lease_timeout) == []

    def test_c03_same_worker_id_after_restart_is_fenced_by_token(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        job = self.add(repository, clock)
        old = self.lease_one(repository, clock, worker_id="host-1")
        self.at(clock, t0, 1 * MINUTE)  # the old process is killed here; nothing is written
        self.at(clock, t0, 16 * MINUTE)
        assert [j.id for j in repository.reap(now=clock.now())] == [job.id]
        self.at(clock, t0, 16 * MINUTE + 1)
        new = self.lease_one(repository, clock, worker_id="host-1")
        assert new.attempts == 2 and new.leased_by == "host-1"
        assert new.lease_token != old.lease_token
        with pytest.raises(LeaseLost):
            repository.complete(job.id, self.token_of(old), now=clock.now())
        assert repository.get(job.id) == new
        assert repository.complete(job.id, self.token_of(new), now=clock.now()).status is JobStatus.COMPLETED

    def test_writes_with_another_jobs_token_are_refused(self, repository: JobRepository, clock: FakeClock) -> None:
        self.add(repository, clock)
        self.add(repository, clock)
        j1, j2 = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=2)
        with pytest.raises(LeaseLost):
            repository.complete(j1.id, self.token_of(j2), now=clock.now())
        with pytest.raises(LeaseLost):
            repository.complete(j1.id + j2.id + 10_000, self.token_of(j1), now=clock.now())
        assert repository.get(j1.id) == j1 and repository.get(j2.id) == j2

    def test_writes_after_the_job_finished_are_refused(self, repository: JobRepository, clock: FakeClock) -> None:
        self.add(repository, clock)
        job = self.lease_one(repository, clock)
        token = self.token_of(job)
        done = repository.complete(job.id, token, now=clock.now())
        assert done.status is JobStatus.COMPLETED
        assert done.finished_at == clock.now() and done.lease_token is None and done.attempts == 1
        for write in (
            lambda: repository.complete(job.id, token, now=clock.now()),
            lambda: repository.fail(job.id, token, now=clock.now(), error="x", retry_at=clock.now()),
            lambda: repository.dead_letter(job.id, token, now=clock.now(), error="x"),
            lambda: repository.heartbeat(job.id, token, now=clock.now(), lease_timeout=60),
            lambda: repository.release(job.id, token, now=clock.now()),
        ):
            with pytest.raises(LeaseLost):
                write()
        assert repository.get(job.id) == done

    # -- heartbeat and release ---------------------------------------------------------------
    def test_heartbeat_extends_the_lease_and_is_fenced(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        job = self.add(repository, clock)
        leased = self.lease_one(repository, clock)
        self.at(clock, t0, 10 * MINUTE)
        beat = repository.heartbeat(job.id, self.token_of(leased), now=clock.now(), lease_timeout=self.lease_timeout)
        assert beat.lease_expires_at == t0 + timedelta(minutes=25)
        assert beat.lease_token == leased.lease_token and beat.attempts == 1 and beat.status is JobStatus.RUNNING
        self.at(clock, t0, 15 * MINUTE)  # the first expiry has passed; the heartbeat keeps the job
        assert repository.reap(now=clock.now()) == []
        with pytest.raises(LeaseLost):
            repository.heartbeat(job.id, "0" * 32, now=clock.now(), lease_timeout=self.lease_timeout)
        assert repository.get(job.id) == beat
        self.at(clock, t0, 25 * MINUTE)
        assert [j.id for j in repository.reap(now=clock.now())] == [job.id]
        with pytest.raises(LeaseLost):
            repository.heartbeat(job.id, self.token_of(leased), now=clock.now(), lease_timeout=self.lease_timeout)

    def test_release_keeps_last_error_as_it_was_through_to_completion(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        # last_error is the last real failure: a release writes none, so a released job that then
        # completes shows no error, and one that failed before shows that failure.
        clean = self.add(repository, clock)
        failing = self.add(repository, clock)
        first = repository.lease_job(failing.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert first is not None
        repository.fail(failing.id, self.token_of(first), now=clock.now(), error="ValueError: one", retry_at=clock.now())
        for job_id, want in ((clean.id, None), (failing.id, "ValueError: one")):
            leased = repository.lease_job(job_id, worker_id="w", now=clock.now(), lease_timeout=60)
            assert leased is not None
            released = repository.release(job_id, self.token_of(leased), now=clock.now())
            again = repository.lease_job(job_id, worker_id="w", now=clock.now(), lease_timeout=60)
            assert again is not None
            done = repository.complete(job_id, self.token_of(again), now=clock.now())
            assert (released.last_error, done.last_error, repository.get(job_id).last_error) == (want, want, want)

    def test_release_gives_the_attempt_back_and_is_fenced(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, max_attempts=1)
        leased = self.lease_one(repository, clock)
        clock.advance(5)
        with pytest.raises(LeaseLost):
            repository.release(job.id, "f" * 32, now=clock.now())
        released = repository.release(job.id, self.token_of(leased), now=clock.now())
        assert released.status is JobStatus.QUEUED
        assert released.attempts == 0
        assert released.scheduled_at == clock.now()
        assert (released.lease_token, released.leased_by, released.lease_expires_at) == (None, None, None)
        assert released.last_error is None  # a release is not a failure
        assert repository.get(job.id) == released
        with pytest.raises(LeaseLost):
            repository.complete(job.id, self.token_of(leased), now=clock.now())
        again = self.lease_one(repository, clock)
        assert again.attempts == 1 and again.lease_token != leased.lease_token

    def test_holder_writes_on_unknown_jobs_raise_lease_lost(self, repository: JobRepository, clock: FakeClock) -> None:
        with pytest.raises(LeaseLost):
            repository.complete(424242, "0" * 32, now=clock.now())
        with pytest.raises(LeaseLost):
            repository.heartbeat(424242, "0" * 32, now=clock.now(), lease_timeout=60)
        assert self.total(repository) == 0

    def test_retry_of_a_live_job_is_refused(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        with pytest.raises(InvalidTransition):
            repository.retry_dead(job.id, now=clock.now())
        leased = self.lease_one(repository, clock)
        with pytest.raises(InvalidTransition):
            repository.retry_dead(job.id, now=clock.now())
        assert repository.get(job.id) == leased
