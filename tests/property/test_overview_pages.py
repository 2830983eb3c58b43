"""Dashboard pages on random stores: for any jobs, filter, limit and window, the SQLite and memory
pages equal the reference of :func:`tether.domain.overview.browse`, and walking the cursor visits
every matching job exactly once, newest first; live counts and queue summaries match the reference."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.job import JobStatus
from tether.domain.overview import JobFilter, browse, summarize_queues, total_by_status
from tether.domain.validation import prepare_job

from tests.property.scratch_sqlite import close_scratch_sqlite, open_scratch_sqlite

FATES = ["queued", "running", "completed", "dead", "cancelled", "retrying", "later"]
jobs_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["t.x", "t.y"]), st.sampled_from(FATES)), max_size=30
)
filters_strategy = st.builds(
    JobFilter,
    status=st.none() | st.sampled_from(list(JobStatus)),
    queue=st.none() | st.sampled_from(["a", "b"]),
    job_type=st.none() | st.sampled_from(["t.x", "t.y"]),
)


def fill(repository: Any, clock: FakeClock, jobs: list[tuple[str, str, str]]) -> None:
    for queue, job_type, fate in jobs:
        delay = 3600 if fate == "later" else None
        job = repository.enqueue(
            prepare_job(job_type, {}, now=clock.now(), queue=queue, max_attempts=2, delay=delay), now=clock.now()
        ).job
        if fate in ("queued", "later"):
            continue
        if fate == "cancelled":
            repository.cancel(job.id, now=clock.now())
            continue
        leased = repository.lease_job(job.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert leased is not None and leased.lease_token
        if fate == "completed":
            repository.complete(job.id, leased.lease_token, now=clock.now())
        elif fate == "dead":
            repository.dead_letter(job.id, leased.lease_token, now=clock.now(), error="x")
        elif fate == "retrying":
            repository.fail(job.id, leased.lease_token, now=clock.now(), error="x", retry_at=clock.now())
        clock.advance(1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, filters=filters_strategy, limit=st.integers(1, 7), window=st.integers(1, 12))
def test_pages_equal_the_reference_and_walk_every_match_once(
    jobs: list[tuple[str, str, str]], filters: JobFilter, limit: int, window: int
) -> None:
    clock = FakeClock()
    sqlite = open_scratch_sqlite("tether-overview-")
    memory = InMemoryJobRepository()
    try:
        for repository in (sqlite, memory):
            fill(repository, FakeClock(clock.now()), jobs)
        stored = sorted(memory.list_jobs(limit=1000), key=lambda j: j.id, reverse=True)
        for repository in (sqlite, memory):
            before: int | None = None
            walked: list[int] = []
            while True:
                page = repository.browse_jobs(filters, before_id=before, limit=limit, window=window)
                expected = browse([j for j in stored if before is None or j.id < before], filters, limit=limit, window=window)
                assert [j.id for j in page.jobs] == [j.id for j in expected.jobs]
                assert (page.next_before_id, page.window_limited) == (expected.next_before_id, expected.window_limited)
                walked += [j.id for j in page.jobs]
                if page.next_before_id is None:
                    break
                assert before is None or page.next_before_id < before
                before = page.next_before_id
            assert walked == [j.id for j in stored if filters.matches(j)]
            now = clock.now()
            assert repository.queue_summaries(now=now) == summarize_queues(stored, now=now)
            assert repository.status_totals() == total_by_status(stored)
    finally:
        close_scratch_sqlite(sqlite)
        memory.close()
