"""Contract part: leases filtered by job type (``JobRepository.lease(job_types=...)``).

A worker pool with both thread-run and ``async def`` handlers asks each kind's job types for
that kind's free slots; these checks say what such a lease must do on every store: only the
types asked, in the lease order the unfiltered lease would give them, with the queue filter,
listed order, paused queues, running and rate limits applied as ever, and nothing of the other
types touched.  The completion flush of a pool whose handlers are all of one kind leases
with ``complete_and_lease(job_types=...)``: the same rules, beside its completions.
"""

from __future__ import annotations

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport


class TypedLeaseContract(ContractSupport):
    """Leases filtered by job type."""

    def _typed(self, repository: JobRepository, clock: FakeClock, job_types: list[str] | None, limit: int = 10,
               **options: object) -> list[Job]:
        return repository.lease(
            queues=options.pop("queues", None), worker_id="w", now=clock.now(), lease_timeout=60, limit=limit,  # type: ignore[arg-type]
            job_types=job_types, **options,  # type: ignore[arg-type]
        )

    def test_a_typed_lease_takes_only_the_types_asked_in_lease_order(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        sync = [self.add(repository, clock, job_type="kind.sync", priority=p).id for p in (0, 5)]
        clock.advance(1)
        loop = [self.add(repository, clock, job_type="kind.async", priority=p).id for p in (9, 1, 9)]
        got = self._typed(repository, clock, ["kind.async"], limit=2)
        assert [j.id for j in got] == [loop[0], loop[2]]  # the best two of its type, though kind.sync waited longer
        assert all(repository.get(i).status is JobStatus.QUEUED for i in sync)
        got = self._typed(repository, clock, ["kind.sync", "kind.async"])
        assert [j.id for j in got] == [sync[1], loop[1], sync[0]]  # both types: the one lease order
        assert self._typed(repository, clock, ["kind.async"]) == []

    def test_no_filter_takes_every_type_and_an_empty_filter_takes_nothing(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        a = self.add(repository, clock, job_type="kind.a")
        b = self.add(repository, clock, job_type="kind.b")
        assert self._typed(repository, clock, []) == []
        assert self._typed(repository, clock, ["kind.unknown"]) == []
        assert repository.get(a.id).status is JobStatus.QUEUED and repository.get(b.id).status is JobStatus.QUEUED
        assert [j.id for j in self._typed(repository, clock, None)] == [a.id, b.id]

    def test_a_typed_lease_honours_queues_and_listed_order(self, repository: JobRepository, clock: FakeClock) -> None:
        a_sync = self.add(repository, clock, queue="a", job_type="kind.sync", priority=9)
        a_loop = self.add(repository, clock, queue="a", job_type="kind.async")
        b_loop = [self.add(repository, clock, queue="b", job_type="kind.async", priority=p).id for p in (0, 3)]
        c_loop = self.add(repository, clock, queue="c", job_type="kind.async")
        got = self._typed(repository, clock, ["kind.async"], queues=["b", "a"], listed_order=True)
        assert [j.id for j in got] == [b_loop[1], b_loop[0], a_loop.id]
        assert repository.get(a_sync.id).status is JobStatus.QUEUED  # another type
        assert repository.get(c_loop.id).status is JobStatus.QUEUED  # another queue
        assert [j.id for j in self._typed(repository, clock, ["kind.sync"], queues=["a"])] == [a_sync.id]

    def test_a_typed_lease_leaves_paused_queues_out_and_keeps_to_running_limits(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        repository.set_queue_paused("held", True, now=clock.now())
        repository.set_queue_limit("api", 2, now=clock.now())
        held = self.add(repository, clock, queue="held", job_type="kind.async")
        other = self.add(repository, clock, queue="api", job_type="kind.sync")
        api = [self.add(repository, clock, queue="api", job_type="kind.async").id for _ in range(3)]
        clock.advance(1)
        got = self._typed(repository, clock, ["kind.async"])
        assert sorted(j.id for j in got) == api[:2]  # the limit's two slots, the older two
        assert repository.get(held.id).status is JobStatus.QUEUED
        assert repository.get(other.id).status is JobStatus.QUEUED  # another type: not taking the slot's place
        assert self._typed(repository, clock, ["kind.async", "kind.sync"]) == []  # the limit is full

    def test_a_typed_lease_keeps_to_a_rate_limit(self, repository: JobRepository, clock: FakeClock) -> None:
        repository.set_queue_rate("slow", 2, 60, now=clock.now())
        sync = self.add(repository, clock, queue="slow", job_type="kind.sync")
        loop = [self.add(repository, clock, queue="slow", job_type="kind.async").id for _ in range(3)]
        clock.advance(1)
        assert sorted(j.id for j in self._typed(repository, clock, ["kind.async"])) == loop[:2]
        assert self._typed(repository, clock, ["kind.sync"]) == []  # the window's two starts are used
        assert repository.get(sync.id).status is JobStatus.QUEUED

    @pytest.mark.parametrize("bad", ["kind.a", ["bad type!"], [None], 7])
    def test_a_bad_job_types_filter_names_job_types_and_leases_nothing(
        self, repository: JobRepository, clock: FakeClock, bad: object
    ) -> None:
        job = self.add(repository, clock, job_type="kind.a")
        with pytest.raises(ValidationError) as caught:
            self._typed(repository, clock, bad)  # type: ignore[arg-type]
        assert caught.value.field == "job_types"
        assert repository.get(job.id).status is JobStatus.QUEUED

    def test_complete_and_lease_with_job_types_refills_only_those_types(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        first = self.add(repository, clock, job_type="kind.async")
        held = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)[0]
        sync = self.add(repository, clock, job_type="kind.sync", priority=9)
        loop = [self.add(repository, clock, job_type="kind.async", priority=p).id for p in (0, 5, 0)]
        results, leased = repository.complete_and_lease(
            [(held.id, self.token_of(held))], now=clock.now(), queues=None, worker_id="w", lease_timeout=60, limit=2,
            job_types=["kind.async"],  # type: ignore[call-arg]
        )
        assert held.id == first.id and [getattr(r, "status", r) for r in results] == [JobStatus.COMPLETED]
        assert [j.id for j in leased] == [loop[1], loop[0]]  # its type only, in lease order
        assert repository.get(sync.id).status is JobStatus.QUEUED  # the best job of another type stays
        assert repository.get(loop[2]).status is JobStatus.QUEUED  # past the limit

    @pytest.mark.parametrize("bad", ["kind.a", ["bad type!"], 7])
    def test_complete_and_lease_with_a_bad_job_types_filter_writes_nothing(
        self, repository: JobRepository, clock: FakeClock, bad: object
    ) -> None:
        self.add(repository, clock, job_type="kind.a")
        held = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)[0]
        waiting = self.add(repository, clock, job_type="kind.a")
        with pytest.raises(ValidationError) as caught:
            repository.complete_and_lease(
                [(held.id, self.token_of(held))], now=clock.now(), queues=None, worker_id="w", lease_timeout=60,
                limit=2, job_types=bad,  # type: ignore[call-arg, arg-type]
            )
        assert caught.value.field == "job_types"
        assert repository.get(held.id).status is JobStatus.RUNNING  # its completion was not written
        assert repository.get(waiting.id).status is JobStatus.QUEUED


__all__ = ["TypedLeaseContract"]
