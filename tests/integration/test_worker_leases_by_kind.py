"""A pool with both thread-run and ``async def`` handlers leases each kind for that kind's room:
it never holds more leased jobs of a kind than the kind has slots, even with a backlog of the
other kind at the head of the queue; a pool whose handlers are all plain keeps today's
unfiltered lease (and its completion flush's refills).

Real threads and the pool's real event loop, on the in-memory store and on PostgreSQL; what the
pool holds is read from the store (its ``running`` rows leased to the pool), sampled while the
backlog drains.  A pool whose handlers are all ``async def`` refills its slots with its completion
flush, leasing its own job types only.  Waits are bounded; nothing is timed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, Self

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import StorageUnavailable
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.container import connect
from tether.entrypoints.requests import EnqueueRequest
from tether.entrypoints.service import Tether

from tests.conftest import wait_for
from tests.counting_repository import CountingRepository
from tests.postgres_fixtures import schema_name, temporary_app

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.2, jitter=0)
THREADS, ASYNC_SLOTS = 2, 3


@pytest.fixture(params=["memory", pytest.param("postgresql", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest) -> Iterator[Tether]:
    if request.param == "postgresql":
        with temporary_app(schema_name("lease_kinds"), retry_policy=FAST) as pg_app:
            yield pg_app
        return
    memory_app = connect("memory://", retry_policy=FAST)
    try:
        yield memory_app
    finally:
        memory_app.close()


class HeldSampler:
    """Reads, over and over on a thread of its own, how many jobs of each type the store shows
    ``running`` under ``worker_id``, and keeps the most seen at once."""

    def __init__(self, app: Tether, worker_id: str) -> None:
        self.most: Counter[str] = Counter()
        self.samples = 0
        self._app, self._worker_id = app, worker_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="held-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = Counter(j.job_type for j in self._app.list(status=JobStatus.RUNNING, limit=1000)
                          if j.leased_by == self._worker_id)
            for job_type, count in now.items():
                self.most[job_type] = max(self.most[job_type], count)
            self.samples += 1
            time.sleep(0.002)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_pool_of_both_kinds_never_holds_more_jobs_of_a_kind_than_its_slots(app: Tether) -> None:
    inside: Counter[str] = Counter()
    most_inside: Counter[str] = Counter()
    lock = threading.Lock()

    def enter(kind: str) -> None:
        with lock:
            inside[kind] += 1
            most_inside[kind] = max(most_inside[kind], inside[kind])

    def leave(kind: str) -> None:
        with lock:
            inside[kind] -= 1

    @app.handler("plain")
    def plain(payload: dict) -> None:
        enter("plain")
        time.sleep(0.03)
        leave("plain")

    @app.handler("fetch")
    async def fetch(payload: dict) -> None:
        enter("fetch")
        await asyncio.sleep(0.03)
        leave("fetch")

    # a backlog of each kind at the head of the queue in turn: plain first, then fetch, then plain
    app.enqueue_many([EnqueueRequest("plain", {"i": i}) for i in range(15)]
                     + [EnqueueRequest("fetch", {"i": i}) for i in range(20)]
                     + [EnqueueRequest("plain", {"i": i}) for i in range(10)])
    pool = app.worker(concurrency=THREADS, async_concurrency=ASYNC_SLOTS, worker_id="w-kinds", max_wait=0.05,
                      reap_interval=0.5)
    with HeldSampler(app, "w-kinds") as sampler, pool:
        wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 45, what="every job to complete")
    assert sampler.samples > 10 and sampler.most["plain"] >= 1 and sampler.most["fetch"] >= 1  # it did look
    assert sampler.most["plain"] <= THREADS, f"held {sampler.most['plain']} plain jobs with {THREADS} threads"
    assert sampler.most["fetch"] <= ASYNC_SLOTS, f"held {sampler.most['fetch']} async jobs with {ASYNC_SLOTS} slots"
    assert most_inside["plain"] <= THREADS and most_inside["fetch"] <= ASYNC_SLOTS
    assert most_inside["fetch"] > 1  # the loop ran several at once: the split does not serialise it
    assert pool.stats.completed == 45


class RecordingRepository(CountingRepository):
    """Records the ``job_types`` of every lease (absent: ``"unfiltered"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.filters: list[Any] = []

    def lease(self, **options: Any) -> list[Any]:
        self.filters.append(tuple(sorted(options["job_types"])) if "job_types" in options else "unfiltered")
        return super().lease(**options)


def test_a_pool_of_plain_handlers_keeps_the_unfiltered_lease_and_its_refills() -> None:
    repo, clock = RecordingRepository(), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)
    app.handler("plain")(lambda payload: None)
    app.enqueue_many([EnqueueRequest("plain", {"i": i}) for i in range(200)])
    with app.worker(concurrency=4, max_wait=0.05):
        wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 200, what="every job to complete")
    assert repo.filters and set(repo.filters) == {"unfiltered"}
    assert repo.refilled > 0  # the completion flush still leases for the free threads


def test_a_pool_of_both_kinds_asks_each_kind_its_own_types_and_leaves_jobs_it_has_no_handler_for() -> None:
    repo, clock = RecordingRepository(), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)
    app.handler("plain")(lambda payload: None)

    @app.handler("fetch")
    async def fetch(payload: dict) -> None:
        await asyncio.sleep(0)

    stranger = app.enqueue("elsewhere.only").job  # no handler in this pool
    app.enqueue_many([EnqueueRequest("plain") for _ in range(20)] + [EnqueueRequest("fetch") for _ in range(20)])
    with app.worker(concurrency=2, async_concurrency=3, max_wait=0.05):
        wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 40, what="every job to complete")
    assert "unfiltered" not in repo.filters
    assert set(repo.filters) <= {("fetch", "plain"), ("fetch",), ("plain",)}
    assert ("fetch", "plain") in repo.filters
    assert repo.refills == []  # the flush leases nothing: its lease could not choose the kind
    assert app.get(stranger.id).status is JobStatus.QUEUED and app.get(stranger.id).attempts == 0


class FollowUpFailsRepository(RecordingRepository):
    """Every lease of one kind alone fails (the follow-ups after a full lease of both kinds)."""

    def lease(self, **options: Any) -> list[Any]:
        if len(options.get("job_types") or ()) == 1:
            self.filters.append("failed")
            raise StorageUnavailable("the follow-up lease fails")
        return super().lease(**options)


def test_jobs_of_a_full_lease_of_both_kinds_are_run_when_the_follow_up_lease_fails() -> None:
    repo, clock = FollowUpFailsRepository(), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)
    app.handler("plain")(lambda payload: None)

    @app.handler("fetch")
    async def fetch(payload: dict) -> None:
        await asyncio.sleep(0)

    app.enqueue_many([EnqueueRequest("plain") for _ in range(6)] + [EnqueueRequest("fetch") for _ in range(6)])
    with app.worker(concurrency=2, async_concurrency=3, max_wait=0.05, reap_interval=60):
        wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 12, what="every job to complete, none left leased")
    assert "failed" in repo.filters  # the follow-ups did fail, and what came before them ran


def test_a_pool_of_async_handlers_refills_its_slots_with_its_completion_flush_and_its_own_types() -> None:
    repo, clock = CountingRepository(), SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)
    most_inside, inside = 0, 0
    lock = threading.Lock()

    @app.handler("fetch")
    async def fetch(payload: dict) -> None:
        nonlocal most_inside, inside
        with lock:
            inside += 1
            most_inside = max(most_inside, inside)
        await asyncio.sleep(0.002)
        with lock:
            inside -= 1

    stranger = app.enqueue("elsewhere.only", priority=9).job  # first in lease order, no handler here
    app.enqueue_many([EnqueueRequest("fetch", {"i": i}) for i in range(300)])
    with app.worker(concurrency=2, async_concurrency=ASYNC_SLOTS, max_wait=0.05, reap_interval=60) as pool:
        wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 300, what="every job to complete")
    assert repo.refilled > 0  # the flush did lease for the loop's slots
    assert set(repo.refill_types) == {("fetch",)}  # with the loop's job types, never unfiltered
    assert most_inside <= ASYNC_SLOTS
    assert pool.stats.completed == 300
    assert app.get(stranger.id).status is JobStatus.QUEUED and app.get(stranger.id).attempts == 0
