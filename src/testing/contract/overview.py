"""The overview contract: one class any repository that is also a :class:`~tether.ports.overview.JobOverview` runs.

Subclass :class:`OverviewContract` and supply a function-scoped ``repository`` fixture that yields a
fresh, empty repository (a :class:`~tether.ports.repository.JobRepository` and a ``JobOverview``)::

    class TestMyOverview(OverviewContract):
        @pytest.fixture
        def repository(self):
            repo = MyJobRepository(...)
            yield repo
            repo.close()

Each answer is compared with the reference of :mod:`tether.domain.overview` computed from the same
jobs, and with figures written out by hand.  Every time comes from the ``clock`` fixture.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.overview import JobFilter, QueueSummary, browse, minute_of
from tether.testing.contract.support import ContractSupport


class OverviewContract(ContractSupport):
    """browse_jobs, status_totals, queue_summaries, finished_per_minute.  No ``Test`` prefix: pytest
    collects only your subclass."""

    def _mixed_store(self, repository: Any, clock: FakeClock) -> list[Job]:
        """12 jobs over two queues and two types in every status; returns them by ascending id."""
        for i in range(12):
            self.add(repository, clock, {"i": i}, queue="mail" if i % 2 else "reports", job_type=f"t.{i % 3}")
        for _ in range(6):
            self.lease_one(repository, clock)
        repository.complete(1, self._token(repository, 1), now=clock.now())
        repository.complete(2, self._token(repository, 2), now=clock.now())
        repository.dead_letter(3, self._token(repository, 3), now=clock.now(), error="boom")
        retry_at = clock.now() + timedelta(minutes=5)
        repository.fail(4, self._token(repository, 4), now=clock.now(), error="again", retry_at=retry_at)
        repository.cancel(7, now=clock.now())
        return [repository.get(i) for i in range(1, 13)]

    @staticmethod
    def _token(repository: Any, job_id: int) -> str:
        token = repository.get(job_id).lease_token
        assert token is not None
        return str(token)

    def _all_pages(self, repository: Any, filters: JobFilter, *, limit: int, window: int) -> list[list[int]]:
        pages: list[list[int]] = []
        before: int | None = None
        while True:
            page = repository.browse_jobs(filters, before_id=before, limit=limit, window=window)
            pages.append([j.id for j in page.jobs])
            if page.next_before_id is None:
                return pages
            assert before is None or page.next_before_id < before, "a cursor must move down"
            before = page.next_before_id

    def test_an_empty_store_has_no_page_no_queue_and_zero_totals(self, repository: Any, clock: FakeClock) -> None:
        page = repository.browse_jobs(JobFilter(), before_id=None, limit=10, window=100)
        assert page.jobs == () and page.next_before_id is None
        assert repository.queue_summaries(now=clock.now()) == []
        totals = repository.status_totals()
        assert dict(totals.counts) == {s: 0 for s in JobStatus} and totals.estimated == frozenset()
        assert repository.finished_per_minute(since=clock.now() - timedelta(hours=1), max_rows=10).minutes == ()

    @pytest.mark.parametrize(
        "filters",
        [
            JobFilter(),
            JobFilter(status=JobStatus.QUEUED),
            JobFilter(status=JobStatus.RUNNING, queue="mail"),
            JobFilter(status=JobStatus.COMPLETED),
            JobFilter(queue="reports", job_type="t.1"),
        ],
        ids=["all", "queued", "running-mail", "completed", "reports-t1"],
    )
    @pytest.mark.parametrize(("limit", "window"), [(3, 100), (2, 4), (5, 5)])
    def test_pages_match_the_reference_and_walk_every_match_once_newest_first(
        self, repository: Any, clock: FakeClock, filters: JobFilter, limit: int, window: int
    ) -> None:
        jobs = self._mixed_store(repository, clock)
        newest_first = sorted(jobs, key=lambda j: j.id, reverse=True)
        before = None
        while True:
            page = repository.browse_jobs(filters, before_id=before, limit=limit, window=window)
            below = [j for j in newest_first if before is None or j.id < before]
            expected = browse(below, filters, limit=limit, window=window)
            assert [j.id for j in page.jobs] == [j.id for j in expected.jobs]
            assert (page.next_before_id, page.window_limited) == (expected.next_before_id, expected.window_limited)
            assert len(page.jobs) <= limit
            if page.next_before_id is None:
                break
            before = page.next_before_id
        walked = [i for p in self._all_pages(repository, filters, limit=limit, window=window) for i in p]
        assert walked == [j.id for j in newest_first if filters.matches(j)]

    def test_a_window_bounds_a_page_whose_filter_has_no_live_status(self, repository: Any, clock: FakeClock) -> None:
        self._mixed_store(repository, clock)  # completed: 1, 2
        page = repository.browse_jobs(JobFilter(status=JobStatus.COMPLETED), before_id=None, limit=10, window=5)
        assert page.jobs == () and page.next_before_id == 8 and page.window_limited  # ids 12..8 looked at
        page = repository.browse_jobs(JobFilter(status=JobStatus.COMPLETED), before_id=8, limit=10, window=5)
        assert page.jobs == () and page.next_before_id == 3 and page.window_limited  # ids 7..3
        page = repository.browse_jobs(JobFilter(status=JobStatus.COMPLETED), before_id=3, limit=10, window=5)
        assert [j.id for j in page.jobs] == [2, 1] and page.next_before_id is None
        live = repository.browse_jobs(JobFilter(status=JobStatus.QUEUED), before_id=None, limit=10, window=1)
        assert [j.id for j in live.jobs] == [12, 11, 10, 9, 8] and live.next_before_id is None  # no window

    def test_a_page_reads_what_is_stored_with_its_lease(self, repository: Any, clock: FakeClock) -> None:
        self._mixed_store(repository, clock)
        [running] = repository.browse_jobs(JobFilter(status=JobStatus.RUNNING), before_id=6, limit=1, window=1).jobs
        assert running == repository.get(5) and running.leased_by == "w-1"

    def test_totals_count_every_status_exactly_on_a_small_store(self, repository: Any, clock: FakeClock) -> None:
        self._mixed_store(repository, clock)
        totals = repository.status_totals()
        assert dict(totals.counts) == {
            JobStatus.QUEUED: 5, JobStatus.RUNNING: 2, JobStatus.RETRYING: 1,
            JobStatus.COMPLETED: 2, JobStatus.DEAD: 1, JobStatus.CANCELLED: 1,
        }
        assert totals.estimated == frozenset()
        assert repository.status_totals(live=repository.queue_summaries(now=clock.now())) == totals

    def test_queue_summaries_count_live_jobs_and_find_the_oldest_due(self, repository: Any, clock: FakeClock) -> None:
        start = clock.now()
        self._mixed_store(repository, clock)  # even ids in mail; queued 8..12, running 5, 6, retrying 4 (due in 5 min)
        clock.advance(60)
        self.add(repository, clock, queue="mail", delay=3600)  # 13: queued, not due
        summaries = repository.queue_summaries(now=clock.now())
        by_name = {s.queue: s for s in summaries}
        assert [s.queue for s in summaries] == ["mail", "reports"]
        mail, reports = by_name["mail"], by_name["reports"]
        assert (mail.queued, mail.retrying, mail.running, mail.due) == (4, 1, 1, 3)  # 8, 10, 12, 13; 4; 6
        assert (reports.queued, reports.retrying, reports.running, reports.due) == (2, 0, 1, 2)  # 9, 11; 5
        assert mail.oldest_due_at == start and reports.oldest_due_at == start
        assert mail.latency(clock.now()) == 60.0
        clock.advance(300)
        later = {s.queue: s for s in repository.queue_summaries(now=clock.now())}
        assert later["mail"].due == 4  # the retrying job is due now

    def test_queue_summaries_follow_retries_and_finishes_and_refuse_a_naive_now(
        self, repository: Any, clock: FakeClock
    ) -> None:
        t0 = clock.now()
        a1 = self.add(repository, clock, queue="a")
        clock.advance(10)
        t10 = clock.now()
        self.add(repository, clock, queue="a")
        b1 = self.add(repository, clock, queue="b")
        b1_leased = self.lease_one(repository, clock, queues=["b"])
        assert b1_leased.id == b1.id
        clock.advance(5)
        assert repository.queue_summaries(now=clock.now()) == [
            QueueSummary("a", queued=2, due=2, oldest_due_at=t0),
            QueueSummary("b", running=1),
        ]
        leased = self.lease_one(repository, clock, queues=["a"])
        assert leased.id == a1.id
        repository.fail(a1.id, self._token(repository, a1.id), now=clock.now(), error="E",
                        retry_at=clock.now() + timedelta(seconds=60))
        summaries = repository.queue_summaries(now=clock.now())
        assert summaries[0] == QueueSummary("a", queued=1, retrying=1, due=1, oldest_due_at=t10)  # the retry waits
        assert summaries[0].latency(clock.now()) == 5.0 and summaries[1].latency(clock.now()) is None
        repository.complete(b1.id, self._token(repository, b1.id), now=clock.now())
        assert [s.queue for s in repository.queue_summaries(now=clock.now())] == ["a"]  # b holds no live job
        with pytest.raises(ValidationError, match="now"):
            repository.queue_summaries(now=clock.now().replace(tzinfo=None))

    def test_finished_jobs_are_counted_per_minute_up_to_a_row_limit(self, repository: Any, clock: FakeClock) -> None:
        since = minute_of(clock.now())
        for i in range(5):
            self.add(repository, clock, {"i": i})
        for minute, outcome in enumerate(["completed", "completed", "dead", "completed", "cancelled"]):
            clock.advance(60)
            job = self.lease_one(repository, clock)
            if outcome == "completed":
                repository.complete(job.id, str(job.lease_token), now=clock.now())
            elif outcome == "dead":
                repository.dead_letter(job.id, str(job.lease_token), now=clock.now(), error="x")
            else:
                repository.cancel(job.id, now=clock.now())
                repository.complete(job.id, str(job.lease_token), now=clock.now())  # recorded as cancelled
        result = repository.finished_per_minute(since=since, max_rows=100)
        assert not result.capped
        assert [(m.minute - since, m.completed, m.dead, m.cancelled) for m in result.minutes] == [
            (timedelta(minutes=1), 1, 0, 0),
            (timedelta(minutes=2), 1, 0, 0),
            (timedelta(minutes=3), 0, 1, 0),
            (timedelta(minutes=4), 1, 0, 0),
            (timedelta(minutes=5), 0, 0, 1),
        ]
        newest = repository.finished_per_minute(since=since, max_rows=2)
        assert newest.capped and [(m.minute - since) for m in newest.minutes] == [timedelta(minutes=4), timedelta(minutes=5)]
        recent = repository.finished_per_minute(since=since + timedelta(minutes=3), max_rows=100)
        assert not recent.capped and len(recent.minutes) == 3
