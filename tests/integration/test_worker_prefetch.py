"""Leasing ahead of the free threads (prefetch) and refilling them with the completion flush.

- A job prefetched but not started when shutdown begins goes back to its queue at once (queued,
  lease cleared, attempt given back) and never runs; the job already running finishes.
- Handlers slower than the prefetch horizon get no job leased ahead of them.
- With a dispatcher that leases from the repository, the completion flush leases the next jobs
  (``complete_and_lease``), every completion still answered on its own.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.job import JobStatus
from tether.entrypoints.service import EnqueueRequest, Tether
from tether.entrypoints.worker import acquirer as acquirer_module

from tests.conftest import wait_for
from tests.counting_repository import CountingRepository


def make_app(repo: InMemoryJobRepository | None = None) -> Tether:
    repo = repo if repo is not None else InMemoryJobRepository()
    clock = SystemClock()
    return Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)


def test_prefetched_jobs_are_released_unstarted_at_shutdown_and_the_running_one_finishes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(acquirer_module, "PREFETCH_HORIZON", 1e6)  # any handler time allows the full prefetch
    app = make_app()
    ran: list[int] = []
    pool_box: list[Any] = []

    @app.handler("t.quick")
    def quick(payload: dict[str, Any]) -> None:
        ran.append(payload["n"])

    @app.handler("t.block")
    def block(payload: dict[str, Any]) -> None:
        pool = pool_box[0]
        wait_for(lambda: pool.stopping, what="shutdown to begin")
        # shutdown releases the prefetched jobs before it waits for this one
        wait_for(lambda: app.counts()[JobStatus.QUEUED] == 3, what="the prefetched jobs to be released")

    pool = app.worker(concurrency=1, prefetch=3, drain_timeout=20.0, max_wait=0.1)
    pool_box.append(pool)
    pool.start()
    app.enqueue("t.quick", {"n": 0})
    wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 1, what="the warm-up job")
    blocker = app.enqueue("t.block", {}, priority=10)
    quick_ids = [r.job.id for r in app.enqueue_many([EnqueueRequest("t.quick", {"n": n}) for n in (1, 2, 3)])]
    del blocker
    # one thread, yet all four are leased: one running, three waiting for the thread
    wait_for(lambda: app.counts()[JobStatus.RUNNING] == 4, what="the blocker and three prefetched jobs leased")
    stats = pool.stop()
    assert ran == [0]  # the prefetched jobs never ran
    assert stats.released == 3 and stats.completed == 2
    for job_id in quick_ids:
        job = app.get(job_id)
        assert job.status is JobStatus.QUEUED and job.attempts == 0 and job.lease_token is None
        assert job.last_error is None  # handed back, not failed
    assert app.counts()[JobStatus.COMPLETED] == 2
    app.close()


def test_no_job_is_leased_ahead_of_handlers_slower_than_the_horizon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acquirer_module, "PREFETCH_HORIZON", 0.05)
    app = make_app()
    running_seen: list[int] = []

    @app.handler("t.slow")
    def slow(payload: dict[str, Any]) -> None:
        running_seen.append(app.counts()[JobStatus.RUNNING])
        time.sleep(0.1)  # longer than the horizon: no prefetch room (0.05 / 0.1 < 1)

    app.enqueue_many([EnqueueRequest("t.slow", {"n": n}) for n in range(4)])
    pool = app.worker(concurrency=1, prefetch=5, max_wait=0.1)
    pool.start()
    wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 4, what="the slow jobs")
    pool.stop()
    assert running_seen == [1, 1, 1, 1]  # each lease took only the one free thread's job
    app.close()


def test_the_completion_flush_leases_the_next_jobs_and_answers_each_completion() -> None:
    repo = CountingRepository()
    app = make_app(repo)
    runs: dict[int, int] = {}
    lock = threading.Lock()

    @app.handler("t.noop")
    def noop(payload: dict[str, Any]) -> None:
        with lock:
            runs[payload["n"]] = runs.get(payload["n"], 0) + 1

    app.enqueue_many([EnqueueRequest("t.noop", {"n": n}) for n in range(300)])
    pool = app.worker(concurrency=4, max_wait=0.1)
    pool.start()
    wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 300, what="the drain")
    stats = pool.stop()
    assert runs == {n: 1 for n in range(300)}
    assert stats.completed == 300 and stats.lease_lost == 0
    assert any(completed and leased for completed, leased in repo.refills)  # completions and leases together
    assert app.counts()[JobStatus.RUNNING] == 0
    app.close()
