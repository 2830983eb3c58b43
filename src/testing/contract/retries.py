"""Contract part: failures, retries, the reaper, manual retry and purge (C04, C11b, C14, C15)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from tether.adapters.clock import FakeClock
from tether.domain import transitions
from tether.domain.errors import InvalidTransition, JobNotFound, LeaseLost, ValidationError
from tether.domain.failure import DEFAULT_MAX_ERROR_CHARS, describe_failure, sanitize_text
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.timeutil import UTC
from tether.ports.repository import JobRepository
from tether.testing.contract.support import MINUTE, ContractSupport

#: The worker's policy in the cases, without jitter so the waits are exact (C15b: 1 s then 2 s).
EXACT = RetryPolicy(jitter=0.0)


class RetryContract(ContractSupport):
    """What happens after an attempt: complete, fail, dead letter, expiry, manual retry, purge."""

    def _run_failing(self, repository: JobRepository, clock: FakeClock, job: Job, exc: BaseException,
                     *, permanent: bool = False) -> Job:
        """One simulated handler run that raises ``exc``: lease it, then fail the way the worker does."""
        leased = repository.lease_job(job.id, worker_id="w-1", now=clock.now(), lease_timeout=self.lease_timeout)
        assert leased is not None, f"job {job.id} should be due at {clock.now().isoformat()}"
        retry_at = transitions.next_retry_at(leased, now=clock.now(), policy=EXACT, r=0.0, permanent=permanent)
        return repository.fail(job.id, self.token_of(leased), now=clock.now(), error=describe_failure(exc), retry_at=retry_at)

    # -- complete / fail / dead letter -------------------------------------------------------
    def test_fail_with_retry_at_schedules_the_retry(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        leased = self.lease_one(repository, clock)
        retry_at = clock.now() + timedelta(seconds=42)
        failed = repository.fail(job.id, self.token_of(leased), now=clock.now(), error="ValueError: x", retry_at=retry_at)
        assert failed.status is JobStatus.RETRYING
        assert failed.scheduled_at == retry_at and failed.attempts == 1 and failed.last_error == "ValueError: x"
        assert (failed.lease_token, failed.leased_by, failed.lease_expires_at, failed.finished_at) == (None, None, None, None)
        assert repository.get(job.id) == failed
        clock.advance(41.999999)
        assert repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60) == []
        clock.advance(0.000001)
        again = self.lease_one(repository, clock)
        assert again.id == job.id and again.attempts == 2

    def test_fail_without_retry_at_or_attempts_goes_dead(self, repository: JobRepository, clock: FakeClock) -> None:
        no_retry = self.add(repository, clock, max_attempts=3)
        used_up = self.add(repository, clock, max_attempts=1)
        a, b = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=2)
        clock.advance(3)
        dead_a = repository.fail(no_retry.id, self.token_of(a), now=clock.now(), error="E: a", retry_at=None)
        dead_b = repository.fail(used_up.id, self.token_of(b), now=clock.now(), error="E: b",
                                 retry_at=clock.now() + timedelta(seconds=1))
        for dead, error in ((dead_a, "E: a"), (dead_b, "E: b")):
            assert dead.status is JobStatus.DEAD and dead.attempts == 1
            assert dead.finished_at == clock.now() and dead.last_error == error and dead.lease_token is None
            assert repository.get(dead.id) == dead

    def test_dead_letter_is_immediate(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, max_attempts=5)
        leased = self.lease_one(repository, clock)
        dead = repository.dead_letter(job.id, self.token_of(leased), now=clock.now(), error="PermanentError: gone")
        assert dead.status is JobStatus.DEAD and dead.attempts == 1 and dead.last_error == "PermanentError: gone"
        assert dead.finished_at == clock.now()
        assert repository.lease(queues=None, worker_id="w", now=clock.now() + timedelta(days=1), lease_timeout=60) == []

    def test_c11b_error_text_with_nul_is_stored_sanitized(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        failed = self._run_failing(repository, clock, job, ValueError("bad\x00byte"))
        assert failed.status is JobStatus.RETRYING and failed.attempts == 1
        assert failed.last_error == "ValueError: bad\\x00byte"
        stored = repository.get(job.id)
        assert stored.status is JobStatus.RETRYING and stored.attempts == 1
        assert stored.last_error == "ValueError: bad\\x00byte" and "\x00" not in stored.last_error
        # The repository sanitizes raw error text itself too (the port promises it).
        clock.advance(1)
        leased = self.lease_one(repository, clock)
        raw = "bad\x00byte " + "\udcff" + "x" * (3 * DEFAULT_MAX_ERROR_CHARS)
        failed = repository.fail(job.id, self.token_of(leased), now=clock.now(), error=raw, retry_at=clock.now())
        assert failed.last_error == sanitize_text(raw)
        assert repository.get(job.id).last_error == sanitize_text(raw)
        assert len(sanitize_text(raw)) <= DEFAULT_MAX_ERROR_CHARS

    # -- C14, C15 ----------------------------------------------------------------------------
    def test_c14_backoff_bounds(self) -> None:
        policy = RetryPolicy()
        expected = {1: 1, 2: 2, 9: 256, 10: 300, 64: 300, 1075: 300, 10**6: 300}
        assert {n: policy.backoff(n) for n in expected} == expected
        for attempt in (0, -1, -(10**9)):
            assert policy.backoff(attempt) == 1
        # with the default jitter j = 0.25: m = min(backoff, 300 / 1.25) and m <= delay <= 300
        shortest = {1: 1, 2: 2, 9: 240, 10: 240, 1075: 240, 10**6: 240, 10**100: 240}
        for attempt, m in shortest.items():
            assert policy.shortest_delay(attempt) == m
            for r in (0.0, 0.5, 0.999999, 1.0):
                delay = policy.delay(attempt, r)
                assert math.isfinite(delay) and m <= delay <= min(m * 1.25, 300)
        assert (policy.delay(10, 0.0), policy.delay(10, 0.5), policy.delay(10, 1.0)) == (240, 270, 300)

    def test_c15a_one_attempt_and_a_transient_error_is_dead(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, max_attempts=1)
        result = self._run_failing(repository, clock, job, ValueError("transient"))
        assert result.status is JobStatus.DEAD and result.attempts == 1
        assert repository.get(job.id).status is JobStatus.DEAD
        assert repository.lease_job(job.id, worker_id="w", now=clock.now() + timedelta(days=1), lease_timeout=60) is None

    def test_c15b_three_attempts_wait_1s_then_2s_then_dead(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        job = self.add(repository, clock, max_attempts=3)
        runs = 0
        first = self._run_failing(repository, clock, job, ValueError("always"))
        runs += 1
        assert first.status is JobStatus.RETRYING and first.scheduled_at == t0 + timedelta(seconds=1)
        assert repository.lease(queues=None, worker_id="w", now=t0 + timedelta(seconds=0.999999), lease_timeout=60) == []
        self.at(clock, t0, 1)
        second = self._run_failing(repository, clock, job, ValueError("always"))
        runs += 1
        assert second.status is JobStatus.RETRYING and second.scheduled_at == t0 + timedelta(seconds=3)  # waits 2 s
        assert second.attempts == 2
        self.at(clock, t0, 3)
        third = self._run_failing(repository, clock, job, ValueError("always"))
        runs += 1
        assert third.status is JobStatus.DEAD and third.attempts == 3 and runs == 3
        assert third.finished_at == t0 + timedelta(seconds=3)
        assert repository.lease(queues=None, worker_id="w", now=t0 + timedelta(days=1), lease_timeout=60) == []

    def test_c15c_max_attempts_below_one_is_rejected(self, repository: JobRepository, clock: FakeClock) -> None:
        for bad in (0, -1):
            with pytest.raises(ValidationError) as info:
                self.new_job(clock, max_attempts=bad)
            assert info.value.field == "max_attempts"
        assert self.total(repository) == 0

    def test_c15d_permanent_error_is_dead_at_once(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, max_attempts=5)
        result = self._run_failing(repository, clock, job, ValueError("customer deleted"), permanent=True)
        assert result.status is JobStatus.DEAD and result.attempts == 1
        assert result.last_error == "ValueError: customer deleted"

    def test_c15e_attempt_lost_to_the_reaper_counts(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        job = self.add(repository, clock, max_attempts=3)
        assert self._run_failing(repository, clock, job, ValueError("one")).attempts == 1
        self.at(clock, t0, 1)
        lost = self.lease_one(repository, clock)
        assert lost.attempts == 2
        self.at(clock, t0, 1 + self.lease_timeout)
        reaped = repository.reap(now=clock.now())
        assert [(j.id, j.status, j.attempts) for j in reaped] == [(job.id, JobStatus.RETRYING, 2)]
        last = self._run_failing(repository, clock, job, ValueError("three"))
        assert last.status is JobStatus.DEAD and last.attempts == 3
        assert repository.lease_job(job.id, worker_id="w", now=clock.now() + timedelta(days=1), lease_timeout=60) is None

    # -- the reaper --------------------------------------------------------------------------
    def test_c04_reaper_uses_only_the_jobs_own_lease(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        job = self.add(repository, clock)
        other = self.add(repository, clock)
        held = self.lease_one(repository, clock, worker_id="w-gone")
        sibling = self.lease_one(repository, clock, worker_id="w-gone")
        self.at(clock, t0, 10)  # everything else about w-gone goes away: its other job finishes
        repository.complete(other.id, self.token_of(sibling), now=clock.now())
        self.at(clock, t0, self.lease_timeout - 0.000001)
        assert repository.reap(now=clock.now()) == []
        assert repository.get(job.id) == held
        self.at(clock, t0, self.lease_timeout)
        reaped = repository.reap(now=clock.now())
        assert [(j.id, j.status, j.attempts) for j in reaped] == [(job.id, JobStatus.RETRYING, 1)]
        stored = repository.get(job.id)
        assert stored == reaped[0]
        assert stored.scheduled_at == clock.now() and stored.lease_token is None and stored.lease_expires_at is None
        assert stored.last_error and "lease" in stored.last_error.lower() and "expired" in stored.last_error.lower()
        assert repository.reap(now=clock.now()) == []

    def test_reaper_judges_each_job_by_its_own_expiry(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        short = self.add(repository, clock)
        long = self.add(repository, clock)
        beating = self.add(repository, clock)
        s = self.lease_one(repository, clock, worker_id="w", lease_timeout=60)
        self.lease_one(repository, clock, worker_id="w", lease_timeout=600)
        b = self.lease_one(repository, clock, worker_id="w", lease_timeout=60)
        self.at(clock, t0, 30)
        repository.heartbeat(beating.id, self.token_of(b), now=clock.now(), lease_timeout=60)  # now expires at 90 s
        self.at(clock, t0, 60)
        assert [j.id for j in repository.reap(now=clock.now())] == [short.id]
        assert repository.get(s.id).status is JobStatus.RETRYING
        assert repository.get(long.id).status is JobStatus.RUNNING
        assert repository.get(beating.id).status is JobStatus.RUNNING
        self.at(clock, t0, 90)
        assert [j.id for j in repository.reap(now=clock.now())] == [beating.id]

    def test_reaper_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        for _ in range(5):
            self.add(repository, clock)
        repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=5)
        clock.advance(60)
        assert len(repository.reap(now=clock.now(), limit=2)) == 2
        assert len(repository.reap(now=clock.now(), limit=10)) == 3
        assert repository.count_by_status()[JobStatus.RETRYING] == 5

    def test_reaper_limit_below_one_takes_nothing(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        held = self.lease_one(repository, clock, lease_timeout=60)
        clock.advance(60)
        assert repository.reap(now=clock.now(), limit=0) == []
        assert repository.reap(now=clock.now(), limit=-1) == []
        assert repository.get(job.id) == held

    def test_a_reap_pass_writes_exactly_the_domain_rule_for_each_expired_lease(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        # Every expired lease is written as transitions.reap makes it (status, scheduled_at,
        # finished_at, the exact last_error text), and nothing else is touched.  The worker ids
        # exercise the quoting of the error text; the expiries, its time format (with and
        # without microseconds, four-digit years); max_attempts 1 goes dead, 2 retries.
        workers = ["w-1", "it's", 'say "hi"', "both ' and \"", "back\\slash \\'", "ünï cødé ☃ 🙂", " spaced  ", "x" * 200]
        starts = [datetime(5, 3, 1, tzinfo=UTC), datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), clock.now()]
        expired: list[Job] = []
        for i, worker in enumerate(workers):
            then = FakeClock(starts[i % len(starts)])
            job = self.add(repository, then, max_attempts=1 + i % 2)
            leased = repository.lease_job(job.id, worker_id=worker, now=then.now(), lease_timeout=(60, 60.5, 0.000001)[i % 3])
            assert leased is not None
            expired.append(leased)
        end = datetime(2026, 6, 1, tzinfo=UTC)
        clock.set(end - timedelta(seconds=30))
        live = self.add(repository, clock)
        live = repository.lease_job(live.id, worker_id="w-live", now=clock.now(), lease_timeout=31)
        finished = self.add(repository, clock)
        finished_lease = self.lease_one(repository, clock, lease_timeout=1)
        finished = repository.complete(finished.id, self.token_of(finished_lease), now=clock.now())
        waiting = self.add(repository, clock)
        clock.set(end)
        untouched = [live, finished, waiting]
        want = [transitions.reap(j, now=end, token=self.token_of(j))
                for j in sorted(expired, key=lambda j: (j.lease_expires_at, j.id))]
        assert [j.status for j in want].count(JobStatus.DEAD) == 4  # both outcomes are covered

        first = repository.reap(now=end, limit=3)
        assert first == want[:3]
        assert repository.reap(now=end, limit=100) == want[3:]
        assert [repository.get(j.id) for j in want] == want
        assert [repository.get(j.id) for j in untouched] == untouched
        assert repository.reap(now=end) == []

    def test_reaper_sends_a_job_out_of_attempts_to_dead(self, repository: JobRepository, clock: FakeClock) -> None:
        # C05 at repository level: lease -> the worker dies -> reaper, three times.
        job = self.add(repository, clock, max_attempts=3)
        runs = 0
        for attempt in (1, 2, 3):
            leased = self.lease_one(repository, clock)
            runs += 1
            assert leased.attempts == attempt
            clock.advance(self.lease_timeout)
            (reaped,) = repository.reap(now=clock.now())
            assert reaped.id == job.id
            assert reaped.status is (JobStatus.RETRYING if attempt < 3 else JobStatus.DEAD)
        assert runs == 3
        dead = repository.get(job.id)
        assert dead.status is JobStatus.DEAD and dead.attempts == 3 and dead.finished_at == clock.now()
        assert dead.last_error and "lease" in dead.last_error.lower() and "expired" in dead.last_error.lower()
        assert repository.lease(queues=None, worker_id="w", now=clock.now() + timedelta(days=1), lease_timeout=60) == []

    def test_reaper_leaves_a_re_leased_or_finished_job_alone(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        job = self.add(repository, clock)
        first = self.lease_one(repository, clock, lease_timeout=60)
        self.at(clock, t0, 60)
        repository.release(job.id, self.token_of(first), now=clock.now())  # handed back just in time
        fresh = self.lease_one(repository, clock, lease_timeout=60)
        assert repository.reap(now=clock.now()) == []
        assert repository.get(job.id) == fresh
        done = repository.complete(job.id, self.token_of(fresh), now=clock.now())
        self.at(clock, t0, 1000)
        assert repository.reap(now=clock.now()) == []
        assert repository.get(job.id) == done

    @staticmethod
    def _reaper_thread(
        repository: JobRepository, now: datetime, start: threading.Barrier, into: list[int],
        errors: list[BaseException],
    ) -> Callable[[], None]:
        """A thread body: wait at ``start``, then reap at ``now`` in passes of 3 until a pass takes
        nothing, adding the ids taken to ``into`` and any exception to ``errors``."""

        def run() -> None:
            try:
                start.wait()
                while batch := repository.reap(now=now, limit=3):
                    into.extend(j.id for j in batch)
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                errors.append(exc)

        return run

    def test_concurrent_reapers_take_each_expired_lease_once(self, repository: JobRepository, clock: FakeClock) -> None:
        for _ in range(self.reap_race_jobs):
            self.add(repository, clock)
        leased = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=self.reap_race_jobs)
        now = clock.advance(60)
        taken: list[list[int]] = [[] for _ in range(4)]
        errors: list[BaseException] = []
        start = threading.Barrier(len(taken))
        self.run_threads([self._reaper_thread(repository, now, start, mine, errors) for mine in taken])
        assert not errors, errors
        every = [job_id for mine in taken for job_id in mine]
        assert sorted(every) == sorted(j.id for j in leased)  # each once: none twice, none missed
        assert repository.count_by_status()[JobStatus.RETRYING] == len(leased)

    def test_reaper_and_holders_racing_never_both_win(self, repository: JobRepository, clock: FakeClock) -> None:
        # Every lease has expired; the holders complete while the reaper runs.  For each job exactly
        # one side wins: a holder whose complete succeeded is never reaped, and a reaped job's
        # holder gets LeaseLost.
        for _ in range(self.reap_race_jobs):
            self.add(repository, clock)
        leased = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=self.reap_race_jobs)
        assert len(leased) == self.reap_race_jobs
        now = clock.advance(61)
        reaped_ids: list[int] = []
        completed_ids: list[int] = []
        lost_ids: list[int] = []
        errors: list[BaseException] = []
        start = threading.Barrier(2)
        reaper = self._reaper_thread(repository, now, start, reaped_ids, errors)

        def holders() -> None:
            try:
                start.wait()
                for job in reversed(leased):
                    try:
                        repository.complete(job.id, self.token_of(job), now=now)
                        completed_ids.append(job.id)
                    except LeaseLost:
                        lost_ids.append(job.id)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        self.run_threads([reaper, holders])
        assert not errors, errors
        assert sorted(reaped_ids) == sorted(lost_ids)
        assert not set(reaped_ids) & set(completed_ids)
        assert sorted(reaped_ids + completed_ids) == sorted(j.id for j in leased)
        for job_id in completed_ids:
            assert repository.get(job_id).status is JobStatus.COMPLETED
        for job_id in reaped_ids:
            assert repository.get(job_id).status is JobStatus.RETRYING

    # -- manual retry ------------------------------------------------------------------------
    def test_retry_dead_resets_attempts_and_leases_with_a_new_token(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, max_attempts=2)
        leased = self.lease_one(repository, clock)
        clock.advance(1)
        dead = repository.dead_letter(job.id, self.token_of(leased), now=clock.now(), error="E: no")
        clock.advance(1)
        retried = repository.retry_dead(job.id, now=clock.now())
        assert retried.status is JobStatus.QUEUED and retried.attempts == 0
        assert retried.scheduled_at == clock.now() and retried.finished_at is None and retried.lease_token is None
        assert retried.last_error == dead.last_error  # kept, so the operator still sees why it died
        assert repository.get(job.id) == retried
        again = self.lease_one(repository, clock)
        assert again.attempts == 1 and again.lease_token != leased.lease_token
        with pytest.raises(LeaseLost):
            repository.complete(job.id, self.token_of(leased), now=clock.now())
        with pytest.raises(InvalidTransition):
            repository.retry_dead(job.id, now=clock.now())
        done = repository.complete(job.id, self.token_of(again), now=clock.now())
        with pytest.raises(InvalidTransition):
            repository.retry_dead(job.id, now=clock.now())
        assert repository.get(job.id) == done
        with pytest.raises(JobNotFound):
            repository.retry_dead(job.id + 10_000, now=clock.now())

    # -- purge -------------------------------------------------------------------------------
    def test_purge_deletes_finished_jobs_by_finish_time(self, repository: JobRepository, clock: FakeClock) -> None:
        t0 = clock.now()
        done = self.add(repository, clock, idempotency_key="order-1")
        dead = self.add(repository, clock)
        waiting = self.add(repository, clock)
        running = self.add(repository, clock)
        retrying = self.add(repository, clock)
        leases = {j.id: j for j in repository.lease(queues=None, worker_id="w", now=t0, lease_timeout=3600, limit=5)}
        repository.release(waiting.id, self.token_of(leases[waiting.id]), now=t0)
        repository.fail(retrying.id, self.token_of(leases[retrying.id]), now=t0, error="E", retry_at=t0 + timedelta(days=9))
        finished = self.at(clock, t0, 10)
        repository.complete(done.id, self.token_of(leases[done.id]), now=finished)
        repository.dead_letter(dead.id, self.token_of(leases[dead.id]), now=finished, error="E")
        later = self.at(clock, t0, 5 * MINUTE)
        assert repository.purge(older_than=finished) == 0  # strictly before
        assert repository.purge(older_than=finished + timedelta(microseconds=1)) == 2
        for gone in (done.id, dead.id):
            with pytest.raises(JobNotFound):
                repository.get(gone)
        assert {repository.get(j.id).status for j in (waiting, running, retrying)} == {
            JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.RETRYING}
        assert repository.purge(older_than=later) == 0
        # the idempotency key is free again
        again = repository.enqueue(self.new_job(clock, idempotency_key="order-1"), now=later)
        assert again.created and again.job.id not in (done.id, dead.id)

    def test_purge_frees_the_idempotency_keys_of_completed_dead_and_cancelled_jobs(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        t0 = clock.now()
        done = self.add(repository, clock, {"v": "old"}, idempotency_key="key-done")
        dead = self.add(repository, clock, {"v": "old"}, idempotency_key="key-dead")
        cancelled = self.add(repository, clock, {"v": "old"}, idempotency_key="key-cancelled")
        waiting = self.add(repository, clock, {"v": "old"}, idempotency_key="key-waiting")
        leases = {j.id: j for j in repository.lease(queues=None, worker_id="w", now=t0, lease_timeout=3600, limit=2)}
        assert set(leases) == {done.id, dead.id}
        repository.complete(done.id, self.token_of(leases[done.id]), now=t0)
        repository.dead_letter(dead.id, self.token_of(leases[dead.id]), now=t0, error="E")
        repository.cancel(cancelled.id, now=t0)
        later = self.at(clock, t0, 60)
        keys = ("key-done", "key-dead", "key-cancelled", "key-waiting")
        # before the purge each key still names its finished job
        for key, old in zip(keys, (done, dead, cancelled, waiting), strict=True):
            held = repository.enqueue(self.new_job(clock, {"v": "new"}, idempotency_key=key), now=later)
            assert not held.created and held.job.id == old.id
        assert repository.purge(older_than=later) == 3
        fresh = {key: repository.enqueue(self.new_job(clock, {"v": "new"}, idempotency_key=key), now=later) for key in keys}
        for key in keys[:3]:
            result = fresh[key]
            assert result.created and result.job.id > waiting.id, key
            assert (result.job.status, result.job.attempts, result.job.payload) == (JobStatus.QUEUED, 0, {"v": "new"})
            assert repository.find_by_key(key) == result.job
        assert not fresh["key-waiting"].created and fresh["key-waiting"].job.id == waiting.id  # not finished: still held
