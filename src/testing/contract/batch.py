"""Contract part: fenced batch completion (``complete_many``) and completion with
the next lease in one call (``complete_and_lease``).

A worker pool flushes the completions of several handler threads in one call; every item must
still be its own compare-and-set on (id, ``running``, lease token), the answers come back in input
order, and a stale token comes back as :class:`~tether.domain.errors.LeaseLost` for that item
alone while the others complete.
"""

from __future__ import annotations

from datetime import timedelta

from tether.adapters.clock import FakeClock
from tether.domain.errors import LeaseLost
from tether.domain.job import Job, JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import MINUTE, ContractSupport


class BatchCompletionContract(ContractSupport):
    """``complete_many``: each item fenced on its own, results in input order."""

    def test_complete_many_completes_each_item_in_input_order(self, repository: JobRepository, clock: FakeClock) -> None:
        for n in range(4):
            self.add(repository, clock, {"n": n})
        leased = repository.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=self.lease_timeout, limit=4)
        assert len(leased) == 4
        clock.advance(3)
        order = [leased[2], leased[0], leased[3], leased[1]]  # not lease order: the answer must follow the input
        results = repository.complete_many([(j.id, self.token_of(j)) for j in order], now=clock.now())
        assert [r.id for r in results if isinstance(r, Job)] == [j.id for j in order]
        for job, result in zip(order, results):
            assert isinstance(result, Job)
            assert result.status is JobStatus.COMPLETED
            assert result.finished_at == clock.now()
            assert result.attempts == 1
            assert (result.lease_token, result.leased_by, result.lease_expires_at) == (None, None, None)
            assert result.payload_json == job.payload_json
            assert repository.get(job.id) == result
        assert repository.count_by_status()[JobStatus.COMPLETED] == 4

    def test_complete_many_returns_lease_lost_for_stale_tokens_and_completes_the_rest(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        fresh = self.add(repository, clock, {"n": 0})
        taken = self.add(repository, clock, {"n": 1})
        finished = self.add(repository, clock, {"n": 2})
        mine = {j.id: j for j in repository.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60, limit=3)}
        assert set(mine) == {fresh.id, taken.id, finished.id}
        # `taken`: the lease expires, the reaper takes it back and w-2 leases it under a new token
        start = clock.now()
        self.at(clock, start, 61)
        assert [j.id for j in repository.reap(now=clock.now())] == sorted(mine)
        retaken = repository.lease_job(taken.id, worker_id="w-2", now=clock.now(), lease_timeout=60)
        assert retaken is not None and retaken.lease_token != mine[taken.id].lease_token
        # `fresh` and `finished`: leased again by w-1 itself (new tokens); `finished` completes alone first
        again = {
            job_id: repository.lease_job(job_id, worker_id="w-1", now=clock.now(), lease_timeout=60)
            for job_id in (fresh.id, finished.id)
        }
        assert all(j is not None for j in again.values())
        done = repository.complete(finished.id, self.token_of(again[finished.id]), now=clock.now())  # type: ignore[arg-type]
        before_taken = repository.get(taken.id)
        before_finished = repository.get(finished.id)
        clock.advance(1)
        items = [
            (taken.id, self.token_of(mine[taken.id])),  # stale: another worker holds it now
            (fresh.id, self.token_of(again[fresh.id])),  # current: completes
            (finished.id, self.token_of(again[finished.id])),  # type: ignore[arg-type]  # already completed
            (fresh.id + taken.id + finished.id + 1000, "no-such-lease"),  # unknown job
        ]
        results = repository.complete_many(items, now=clock.now())
        assert len(results) == 4
        assert isinstance(results[0], LeaseLost) and results[0].job_id == taken.id
        assert isinstance(results[1], Job) and results[1].status is JobStatus.COMPLETED
        assert results[1].finished_at == clock.now()
        assert isinstance(results[2], LeaseLost) and results[2].job_id == finished.id
        assert isinstance(results[3], LeaseLost)
        # the refused items changed nothing
        assert repository.get(taken.id) == before_taken
        assert repository.get(taken.id).lease_token == retaken.lease_token
        assert repository.get(finished.id) == before_finished == done
        # and the new holder of `taken` can still complete it
        assert repository.complete(taken.id, self.token_of(retaken), now=clock.now()).status is JobStatus.COMPLETED

    def test_complete_many_of_nothing_is_nothing(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        assert repository.complete_many([], now=clock.now()) == []
        assert repository.get(job.id) == job

    def test_complete_many_with_a_token_of_another_job_is_refused(self, repository: JobRepository, clock: FakeClock) -> None:
        a = self.add(repository, clock, {"n": "a"})
        b = self.add(repository, clock, {"n": "b"})
        leased = {j.id: j for j in repository.lease(queues=None, worker_id="w", now=clock.now(),
                                                    lease_timeout=15 * MINUTE, limit=2)}
        crossed = [(a.id, self.token_of(leased[b.id])), (b.id, self.token_of(leased[a.id]))]
        results = repository.complete_many(crossed, now=clock.now() + timedelta(seconds=1))
        assert [type(r) for r in results] == [LeaseLost, LeaseLost]
        assert repository.get(a.id) == leased[a.id] and repository.get(b.id) == leased[b.id]


    # -- complete_and_lease --------------------------------------------------------------------
    def test_complete_and_lease_completes_each_item_fenced_and_leases_the_next_jobs(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        added = [self.add(repository, clock, {"n": n}) for n in range(5)]
        first = repository.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60, limit=2)
        assert [j.id for j in first] == [added[0].id, added[1].id]
        clock.advance(2)
        items = [(first[1].id, self.token_of(first[1])), (first[0].id, "not-the-token"),
                 (first[0].id, self.token_of(first[0]))]
        results, leased = repository.complete_and_lease(
            items, now=clock.now(), queues=None, worker_id="w-2", lease_timeout=30, limit=2
        )
        assert len(results) == 3
        assert isinstance(results[0], Job) and results[0].id == first[1].id
        assert isinstance(results[1], LeaseLost) and results[1].job_id == first[0].id  # a wrong token is refused ...
        assert isinstance(results[2], Job) and results[2].id == first[0].id  # ... the right one next to it lands
        for result in (results[0], results[2]):
            assert isinstance(result, Job)
            assert result.status is JobStatus.COMPLETED and result.finished_at == clock.now()
            assert (result.lease_token, result.leased_by, result.lease_expires_at) == (None, None, None)
            assert repository.get(result.id) == result
        # the lease: the next two jobs in lease order, each under its own fresh token
        assert [j.id for j in leased] == [added[2].id, added[3].id]
        tokens = {j.lease_token for j in leased}
        assert None not in tokens and len(tokens) == 2 and not tokens & {self.token_of(j) for j in first}
        for job in leased:
            assert job.status is JobStatus.RUNNING and job.attempts == 1 and job.leased_by == "w-2"
            assert job.leased_at == clock.now() and job.lease_expires_at == clock.now() + timedelta(seconds=30)
            assert repository.get(job.id) == job
        assert repository.get(added[4].id).status is JobStatus.QUEUED
        # the new leases are fenced like any other: a stale token cannot complete them
        again, more = repository.complete_and_lease(
            [(leased[0].id, self.token_of(first[0]))], now=clock.now(), queues=None, worker_id="w-2",
            lease_timeout=30, limit=5,
        )
        assert isinstance(again[0], LeaseLost) and repository.get(leased[0].id) == leased[0]
        assert [j.id for j in more] == [added[4].id]  # what is left; completed and running jobs are never leased

    def test_complete_and_lease_with_limit_zero_only_completes_and_without_items_only_leases(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        a = self.add(repository, clock, {"n": "a"})
        b = self.add(repository, clock, {"n": "b"})
        job = self.lease_one(repository, clock)
        assert job.id == a.id
        results, leased = repository.complete_and_lease(
            [(job.id, self.token_of(job))], now=clock.now(), queues=None, worker_id="w", lease_timeout=60, limit=0
        )
        assert isinstance(results[0], Job) and results[0].status is JobStatus.COMPLETED and leased == []
        assert repository.get(b.id).status is JobStatus.QUEUED
        results, leased = repository.complete_and_lease(
            [], now=clock.now(), queues=None, worker_id="w", lease_timeout=60, limit=3
        )
        assert results == [] and [j.id for j in leased] == [b.id]

    def test_complete_and_lease_leases_only_from_the_queues_asked_for(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        mine = self.add(repository, clock, {"n": 0}, queue="mine")
        theirs = self.add(repository, clock, {"n": 1}, queue="theirs")
        other = self.add(repository, clock, {"n": 2}, queue="other")
        held = self.lease_one(repository, clock, queues=["mine"])
        assert held.id == mine.id
        extra = self.add(repository, clock, {"n": 3}, queue="mine")
        results, leased = repository.complete_and_lease(
            [(held.id, self.token_of(held))], now=clock.now(), queues=["mine"], worker_id="w", lease_timeout=60, limit=5
        )
        assert isinstance(results[0], Job) and [j.id for j in leased] == [extra.id]
        results, leased = repository.complete_and_lease(
            [(leased[0].id, self.token_of(leased[0]))], now=clock.now(), queues=["theirs", "other"], worker_id="w",
            lease_timeout=60, limit=5,
        )
        assert isinstance(results[0], Job) and {j.id for j in leased} == {theirs.id, other.id}


__all__ = ["BatchCompletionContract"]
