"""Contract part: reading jobs back, and refusing naive datetimes at the repository boundary."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import JobNotFound, ValidationError
from tether.domain.job import JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport


class ReadContract(ContractSupport):
    """get, list_jobs, count_by_status, due_jobs, count_due_ahead; and the time rule on every method."""

    def test_get_unknown_job_raises_job_not_found(self, repository: JobRepository, clock: FakeClock) -> None:
        with pytest.raises(JobNotFound) as info:
            repository.get(987_654)
        assert info.value.job_id == 987_654

    def _mixed(self, repository: JobRepository, clock: FakeClock) -> dict[str, int]:
        """Jobs in every status across queues a and b; returns their ids by name."""
        ids = {
            "a_queued": self.add(repository, clock, queue="a").id,
            "b_queued": self.add(repository, clock, queue="b").id,
            "a_later": self.add(repository, clock, queue="a", delay=3600).id,
            "a_running": self.add(repository, clock, queue="a", priority=3).id,
            "b_retrying": self.add(repository, clock, queue="b", priority=2).id,
            "b_done": self.add(repository, clock, queue="b", priority=1).id,
            "a_dead": self.add(repository, clock, queue="a", priority=1).id,
        }
        leased = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=600, limit=4)
        assert [j.id for j in leased] == [ids["a_running"], ids["b_retrying"], ids["b_done"], ids["a_dead"]]
        _, retrying, done, dead = leased
        repository.fail(retrying.id, self.token_of(retrying), now=clock.now(), error="E", retry_at=clock.now())
        repository.complete(done.id, self.token_of(done), now=clock.now())
        repository.dead_letter(dead.id, self.token_of(dead), now=clock.now(), error="E")
        return ids

    def test_list_jobs_filters_pages_and_orders_by_id(self, repository: JobRepository, clock: FakeClock) -> None:
        ids = self._mixed(repository, clock)
        assert [j.id for j in repository.list_jobs()] == sorted(ids.values())
        assert [j.id for j in repository.list_jobs(queue="a")] == sorted(v for k, v in ids.items() if k.startswith("a_"))
        assert [j.id for j in repository.list_jobs(status=JobStatus.QUEUED)] == sorted(
            [ids["a_queued"], ids["b_queued"], ids["a_later"]])
        assert [j.id for j in repository.list_jobs(status=JobStatus.QUEUED, queue="b")] == [ids["b_queued"]]
        assert [j.id for j in repository.list_jobs(status=JobStatus.RUNNING)] == [ids["a_running"]]
        assert [j.id for j in repository.list_jobs(status=JobStatus.DEAD, queue="b")] == []
        everything = sorted(ids.values())
        assert [j.id for j in repository.list_jobs(limit=3)] == everything[:3]
        assert [j.id for j in repository.list_jobs(limit=3, offset=3)] == everything[3:6]
        assert [j.id for j in repository.list_jobs(limit=3, offset=6)] == everything[6:]
        assert repository.list_jobs(offset=100) == []
        for job in repository.list_jobs():
            assert repository.get(job.id) == job

    def test_count_by_status_names_every_status(self, repository: JobRepository, clock: FakeClock) -> None:
        assert repository.count_by_status() == {status: 0 for status in JobStatus}
        self._mixed(repository, clock)
        assert repository.count_by_status() == {
            JobStatus.QUEUED: 3, JobStatus.RUNNING: 1, JobStatus.RETRYING: 1, JobStatus.COMPLETED: 1, JobStatus.DEAD: 1,
            JobStatus.CANCELLED: 0}
        assert repository.count_by_status(queue="a") == {
            JobStatus.QUEUED: 2, JobStatus.RUNNING: 1, JobStatus.RETRYING: 0, JobStatus.COMPLETED: 0, JobStatus.DEAD: 1,
            JobStatus.CANCELLED: 0}
        assert repository.count_by_status(queue="nowhere") == {status: 0 for status in JobStatus}

    def test_count_by_status_of_some_job_types(self, repository: JobRepository, clock: FakeClock) -> None:
        self.add(repository, clock, job_type="emails.send", queue="a")
        self.add(repository, clock, job_type="emails.send", queue="b")
        self.add(repository, clock, job_type="reports.build", queue="a")
        self.lease_one(repository, clock, queues=["b"])
        zero = {status: 0 for status in JobStatus}
        assert repository.count_by_status(job_types=["emails.send"]) == {**zero, JobStatus.QUEUED: 1, JobStatus.RUNNING: 1}
        assert repository.count_by_status(job_types=["emails.send", "reports.build"]) == repository.count_by_status()
        assert repository.count_by_status(queue="a", job_types=["reports.build"]) == {**zero, JobStatus.QUEUED: 1}
        assert repository.count_by_status(job_types=["nothing.here"]) == zero
        assert repository.count_by_status(job_types=[]) == zero

    def test_due_jobs_lists_without_leasing(self, repository: JobRepository, clock: FakeClock) -> None:
        ids = self._mixed(repository, clock)
        due = repository.due_jobs(now=clock.now(), queues=None, limit=10)
        assert [j.id for j in due] == [ids["b_retrying"], ids["a_queued"], ids["b_queued"]]  # lease order
        assert [j.id for j in repository.due_jobs(now=clock.now(), queues=["a"], limit=10)] == [ids["a_queued"]]
        assert [j.id for j in repository.due_jobs(now=clock.now(), queues=None, limit=2)] == [ids["b_retrying"], ids["a_queued"]]
        for job in due:
            assert repository.get(job.id) == job  # nothing was leased
        later = clock.now() + timedelta(seconds=3600)
        assert ids["a_later"] in [j.id for j in repository.due_jobs(now=later, queues=["a"], limit=10)]

    def test_count_due_ahead_counts_the_due_jobs_of_its_queue_that_go_first(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        first = self.add(repository, clock, priority=5)
        early = self.add(repository, clock, run_at=clock.now() - timedelta(seconds=30))
        self.add(repository, clock)  # same priority and due time: the lower id goes first
        target = self.add(repository, clock)
        after = self.add(repository, clock)  # a higher id
        self.add(repository, clock, priority=9, delay=60)  # not due yet
        self.add(repository, clock, priority=9, queue="other")  # another queue
        running = self.add(repository, clock, priority=9)
        assert self.lease_one(repository, clock, queues=["default"]).id == running.id  # running: not waiting
        self.add(repository, clock, priority=1)
        leased = self.lease_one(repository, clock, queues=["default"])
        assert leased.id == first.id
        repository.fail(leased.id, self.token_of(leased), now=clock.now(), error="E", retry_at=clock.now())
        now = clock.now()
        target = repository.get(target.id)
        # ahead of target: first (retrying, priority 5), the priority-1 job, early, same
        assert repository.count_due_ahead(target, now=now, limit=100) == 4
        assert repository.count_due_ahead(target, now=now, limit=3) == 3  # "3 or more"
        assert repository.count_due_ahead(target, now=now, limit=0) == 0
        assert repository.count_due_ahead(repository.get(early.id), now=now, limit=100) == 2
        assert repository.count_due_ahead(repository.get(first.id), now=now, limit=100) == 0
        assert repository.count_due_ahead(repository.get(after.id), now=now, limit=100) == 5
        assert repository.count_due_ahead(target, now=now + timedelta(seconds=60), limit=100) == 5  # the 9 became due
        assert repository.get(target.id) == target  # a read: nothing changed

    # -- naive datetimes ---------------------------------------------------------------------
    def test_naive_datetimes_are_rejected_before_any_write(self, repository: JobRepository, clock: FakeClock) -> None:
        naive = clock.now().replace(tzinfo=None)
        new = self.new_job(clock)
        with pytest.raises(ValidationError) as info:
            self.new_job(clock, run_at=naive)
        assert info.value.field == "run_at"
        calls: list[tuple[str, Callable[[], Any]]] = [
            ("now", lambda: repository.enqueue(new, now=naive)),
            ("now", lambda: repository.enqueue_many([new], now=naive)),
            ("scheduled_at", lambda: repository.enqueue(attrs.evolve(new, scheduled_at=naive), now=clock.now())),
        ]
        for field, call in calls:
            with pytest.raises(ValidationError) as info:
                call()
            assert info.value.field == field
        assert self.total(repository) == 0

        job = self.add(repository, clock)
        leased_elsewhere = self.add(repository, clock)
        held = repository.lease_job(leased_elsewhere.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert held is not None
        token = self.token_of(held)
        calls = [
            ("now", lambda: repository.lease(queues=None, worker_id="w", now=naive, lease_timeout=60)),
            ("now", lambda: repository.lease_job(job.id, worker_id="w", now=naive, lease_timeout=60)),
            ("now", lambda: repository.due_jobs(now=naive, queues=None, limit=10)),
            ("now", lambda: repository.count_due_ahead(job, now=naive, limit=10)),
            ("now", lambda: repository.complete(held.id, token, now=naive)),
            ("now", lambda: repository.fail(held.id, token, now=naive, error="E", retry_at=None)),
            ("retry_at", lambda: repository.fail(held.id, token, now=clock.now(), error="E", retry_at=naive)),
            ("now", lambda: repository.dead_letter(held.id, token, now=naive, error="E")),
            ("now", lambda: repository.heartbeat(held.id, token, now=naive, lease_timeout=60)),
            ("now", lambda: repository.release(held.id, token, now=naive)),
            ("now", lambda: repository.reap(now=naive)),
            ("older_than", lambda: repository.purge(older_than=naive)),
        ]
        for field, call in calls:
            with pytest.raises(ValidationError) as info:
                call()
            assert info.value.field == field
        assert repository.get(job.id) == job
        assert repository.get(held.id) == held
        assert self.total(repository) == 2

    def test_aware_times_in_other_zones_mean_the_same_instant(self, repository: JobRepository, clock: FakeClock) -> None:
        from datetime import timezone

        job = self.add(repository, clock)
        east = clock.now().astimezone(timezone(timedelta(hours=9)))
        leased = repository.lease(queues=None, worker_id="w", now=east, lease_timeout=60)
        assert [j.id for j in leased] == [job.id]
        assert leased[0].leased_at == clock.now() and leased[0].leased_at.utcoffset() == timedelta(0)
        assert isinstance(leased[0].lease_expires_at, datetime)
