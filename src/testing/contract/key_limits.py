"""Contract part: per-key running limits, a queue's ``max_running_per_key`` over its jobs' ``concurrency_key``.

The rule (:mod:`tether.domain.queues`): at most ``max_running_per_key`` jobs of the queue with the
same key run at once under unexpired leases, across every caller, on every lease path (``lease``,
``lease_job``, ``complete_and_lease``); a lease passes over a job whose key is at its limit, so
the jobs behind it (other keys, no key) still start; jobs without a key are not limited by it;
keys count per queue; an expired lease frees its key's slot before the reaper writes the job;
with ``max_running`` too, both hold.  Bad input names its field and writes nothing.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport


class KeyLimitContract(ContractSupport):
    """``concurrency_key`` on jobs, ``set_queue_key_limit``, ``count_running_by_key`` and how leases honour them."""

    def _keyed(self, repository: JobRepository, clock: FakeClock, key: str | None, queue: str = "api") -> Job:
        return self.add(repository, clock, queue=queue, concurrency_key=key)

    def _lease_ids(self, repository: JobRepository, clock: FakeClock, *, limit: int = 10,
                   queues: list[str] | None = None) -> list[int]:
        got = repository.lease(queues=queues, worker_id="w", now=clock.now(), lease_timeout=self.lease_timeout,
                               limit=limit)
        return sorted(j.id for j in got)

    def test_a_concurrency_key_is_stored_and_comes_back_with_the_job(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        keyed = self._keyed(repository, clock, "customer-42")
        plain = self._keyed(repository, clock, None)
        batch = repository.enqueue_many(
            [self.new_job(clock, queue="api", concurrency_key="customer-7"), self.new_job(clock, queue="api")],
            now=clock.now(),
        )
        assert keyed.concurrency_key == "customer-42" and plain.concurrency_key is None
        assert repository.get(keyed.id) == keyed and repository.get(plain.id).concurrency_key is None
        assert [r.job.concurrency_key for r in batch] == ["customer-7", None]
        assert [repository.get(r.job.id).concurrency_key for r in batch] == ["customer-7", None]
        leased = {j.id: j for j in repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=10)}
        assert leased[keyed.id].concurrency_key == "customer-42" and leased[plain.id].concurrency_key is None

    def test_one_key_runs_one_at_a_time_while_other_keys_and_keyless_jobs_flow(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        state = repository.set_queue_key_limit("api", 1, now=clock.now())
        assert (state.name, state.max_running_per_key, state.max_running, state.paused) == ("api", 1, None, False)
        a1, a2, b1, b2 = (self._keyed(repository, clock, k) for k in ("a", "a", "b", "b"))
        free = [self._keyed(repository, clock, None) for _ in range(2)]
        clock.advance(1)
        assert self._lease_ids(repository, clock) == sorted([a1.id, b1.id, *(j.id for j in free)])
        assert self._lease_ids(repository, clock) == []
        assert repository.get(a2.id).status is JobStatus.QUEUED and repository.get(b2.id).status is JobStatus.QUEUED
        assert repository.count_running_by_key("api", "a", now=clock.now()) == 1
        running_a1 = repository.get(a1.id)
        repository.complete(a1.id, self.token_of(running_a1), now=clock.advance(1))
        assert repository.count_running_by_key("api", "a", now=clock.now()) == 0
        assert self._lease_ids(repository, clock) == [a2.id]

    def test_a_key_at_its_limit_never_hides_the_jobs_behind_it(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        busy = [self._keyed(repository, clock, "busy") for _ in range(6)]
        other = self._keyed(repository, clock, "quiet")
        clock.advance(1)
        assert self._lease_ids(repository, clock, limit=1) == [busy[0].id]
        assert self._lease_ids(repository, clock, limit=1) == [other.id]  # five busy jobs ahead of it in lease order
        assert self._lease_ids(repository, clock, limit=1) == []

    def test_a_lease_filtered_by_job_type_honours_the_key_limit_too(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        """A pool with thread and async handlers leases per job type; a per-key limit still holds
        for such a lease, and a busy key of the asked type never hides another key's job."""
        repository.set_queue_key_limit("api", 1, now=clock.now())
        first = self.add(repository, clock, queue="api", concurrency_key="k", job_type="mail.send")
        second = self.add(repository, clock, queue="api", concurrency_key="k", job_type="mail.send")
        other_key = self.add(repository, clock, queue="api", concurrency_key="j", job_type="mail.send")
        other_type = self.add(repository, clock, queue="api", concurrency_key="m", job_type="report.build")
        clock.advance(1)

        def typed(limit: int) -> list[int]:
            got = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=self.lease_timeout,
                                   limit=limit, job_types=["mail.send"])
            return sorted(j.id for j in got)

        assert typed(1) == [first.id]
        assert typed(5) == [other_key.id]  # the second job of key k waits; the other type is not asked for
        assert typed(5) == []
        assert self._lease_ids(repository, clock) == [other_type.id]
        assert repository.get(second.id).status is JobStatus.QUEUED

    def test_a_per_key_limit_above_one_admits_that_many_of_a_key(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 2, now=clock.now())
        jobs = [self._keyed(repository, clock, "a") for _ in range(4)]
        clock.advance(1)
        assert self._lease_ids(repository, clock) == [jobs[0].id, jobs[1].id]
        assert self._lease_ids(repository, clock) == []

    def test_lease_job_honours_the_key_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        a1, a2, b1 = (self._keyed(repository, clock, k) for k in ("a", "a", "b"))
        clock.advance(1)
        got = repository.lease_job(a2.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert got is not None and got.id == a2.id
        assert repository.lease_job(a1.id, worker_id="w", now=clock.now(), lease_timeout=60) is None
        other = repository.lease_job(b1.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert other is not None and other.status is JobStatus.RUNNING

    def test_complete_and_lease_refills_within_the_key_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        a1, a2, a3 = (self._keyed(repository, clock, "a") for _ in range(3))
        clock.advance(1)
        [first] = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=5)
        results, more = repository.complete_and_lease(
            [(first.id, self.token_of(first))], now=clock.advance(1), queues=None, worker_id="w", lease_timeout=60,
            limit=5,
        )
        assert isinstance(results[0], Job) and results[0].status is JobStatus.COMPLETED
        assert [j.id for j in more] == [a2.id] and repository.get(a3.id).status is JobStatus.QUEUED
        assert first.id == a1.id

    def test_an_expired_lease_frees_its_key_before_the_reaper(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        first, second = (self._keyed(repository, clock, "a") for _ in range(2))
        clock.advance(1)
        assert self._lease_ids(repository, clock) == [first.id]
        clock.advance(self.lease_timeout + 1)  # nobody reaped it
        assert repository.count_running_by_key("api", "a", now=clock.now()) == 0
        assert self._lease_ids(repository, clock) == [second.id]

    def test_keys_count_per_queue_and_with_a_running_limit_both_hold(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        repository.set_queue_limit("api", 2, now=clock.now())
        a1, _a2, b1, _c1 = (self._keyed(repository, clock, k) for k in ("a", "a", "b", "c"))
        elsewhere = [self._keyed(repository, clock, "a", queue="bulk") for _ in range(2)]  # no per-key limit there
        clock.advance(1)
        assert self._lease_ids(repository, clock) == sorted([a1.id, b1.id, *(j.id for j in elsewhere)])
        assert self._lease_ids(repository, clock) == []
        [api] = [s for s in repository.queue_states() if s.name == "api"]
        assert (api.max_running, api.max_running_per_key) == (2, 1)

    def test_clearing_the_key_limit_and_pausing(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        for _ in range(3):
            self._keyed(repository, clock, "a")
        clock.advance(1)
        repository.set_queue_paused("api", True, now=clock.now())
        assert self._lease_ids(repository, clock) == []
        repository.set_queue_paused("api", False, now=clock.now())
        assert len(self._lease_ids(repository, clock)) == 1
        cleared = repository.set_queue_key_limit("api", None, now=clock.now())
        assert cleared.max_running_per_key is None and not cleared.limited
        assert len(self._lease_ids(repository, clock)) == 2
        assert len(repository.due_jobs(now=clock.now(), queues=["api"], limit=10)) == 0

    def test_due_jobs_ignores_the_key_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        jobs = [self._keyed(repository, clock, "a") for _ in range(3)]
        clock.advance(1)
        self._lease_ids(repository, clock)
        assert [j.id for j in repository.due_jobs(now=clock.now(), queues=["api"], limit=10)] == [jobs[1].id, jobs[2].id]

    def test_concurrent_leases_never_overshoot_a_key_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_key_limit("api", 1, now=clock.now())
        keys = [f"k{n}" for n in range(4)]
        for _ in range(8):
            for key in keys:
                self._keyed(repository, clock, key)
        clock.advance(1)
        now = clock.now()
        taken: list[Job] = []
        lock = threading.Lock()
        threads = getattr(self, "limit_race_threads", 8)
        start = threading.Barrier(threads)

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

        self.run_threads([lambda i=i: lease(i) for i in range(threads)])  # type: ignore[misc]
        assert Counter(j.concurrency_key for j in taken) == Counter(keys)
        running = repository.list_jobs(status=JobStatus.RUNNING, queue="api", limit=100)
        assert sorted(str(j.concurrency_key) for j in running) == keys

    # -- bad input --------------------------------------------------------------------------------
    @pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3", 1_000_001])
    def test_a_bad_key_limit_names_max_running_per_key_and_writes_nothing(
        self, repository: JobRepository, clock: FakeClock, bad: object
    ) -> None:
        with pytest.raises(ValidationError) as caught:
            repository.set_queue_key_limit("api", bad, now=clock.now())  # type: ignore[arg-type]
        assert caught.value.field == "max_running_per_key"
        with pytest.raises(ValidationError) as caught:
            repository.set_queue_key_limit("no spaces", 1, now=clock.now())
        assert caught.value.field == "queue"
        assert repository.queue_states() == []

    @pytest.mark.parametrize("bad", ["", "k" * 256, 42, b"bytes", "nul\x00", "lone-\ud800"])
    def test_a_bad_concurrency_key_names_its_field_and_writes_nothing(
        self, repository: JobRepository, clock: FakeClock, bad: object
    ) -> None:
        with pytest.raises(ValidationError) as caught:
            self.new_job(clock, queue="api", concurrency_key=bad)
        assert caught.value.field == "concurrency_key"
        assert self.total(repository) == 0
        assert self.new_job(clock, concurrency_key="k" * 255).concurrency_key == "k" * 255


__all__ = ["KeyLimitContract"]
