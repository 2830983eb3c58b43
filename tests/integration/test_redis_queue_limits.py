"""A limited queue on Redis Streams: an entry whose lease the limit refused never strands its job.

Two worker pools (four threads each) on one store read the queue's stream; with a running limit
of 1 most entries they read find the queue full, are acknowledged, and leave their job queued.
Every job still runs, one at a time: a freed slot announces the queue's next due job (published
again), and the sweep re-publishes due jobs as the safety net.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether

from tests.conftest import REDIS_URL, wait_for
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis


@pytest.fixture
def prefix(redis_client: Any) -> Any:
    with temporary_prefix(redis_client, "limits") as name:
        yield name


@pytest.mark.parametrize("sweep_interval", [3600.0, 0.5], ids=["freed-slots-announce", "with-sweep"])
def test_every_job_of_a_limited_queue_runs_one_at_a_time(prefix: str, sweep_interval: float) -> None:
    repo, clock = InMemoryJobRepository(), SystemClock()
    state = {"running": 0, "peak": 0}
    ran: list[int] = []
    lock = threading.Lock()
    apps = [
        Tether(repo, RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, block=0.2,
                                            sweep_interval=sweep_interval), clock)
        for _ in range(2)
    ]
    for app in apps:
        @app.handler("api.call", queue="api")
        def call(payload: dict[str, int]) -> None:
            with lock:
                state["running"] += 1
                state["peak"] = max(state["peak"], state["running"])
            time.sleep(0.02)
            with lock:
                state["running"] -= 1
                ran.append(payload["n"])

    apps[0].limit_queue("api", max_running=1)
    pools = [app.worker(concurrency=4, max_wait=0.2) for app in apps]
    for pool in pools:
        pool.start()
    try:
        for n in range(20):
            apps[0].enqueue("api.call", {"n": n})
        wait_for(lambda: len(ran) == 20, timeout=30, what="every job of the limited queue to run")
        assert sorted(ran) == list(range(20))
        assert state["peak"] == 1
        # the handler records its run before its completion is written (batched): wait for the write
        wait_for(lambda: apps[0].counts("api")[JobStatus.COMPLETED] == 20, timeout=30, what="20 completions")
    finally:
        for pool in pools:
            pool.stop()
        for app in apps:
            app.close()


def test_a_rate_limited_queue_goes_on_at_each_new_window_without_the_sweep(prefix: str) -> None:
    """5 starts per second, the sweep an hour away: once a window is spent nothing completes and
    no entry is left to read, so only the pools' announcement of each new window starts the rest."""
    repo, clock = InMemoryJobRepository(), SystemClock()
    leased_at: list[float] = []
    lock = threading.Lock()
    apps = [
        Tether(repo, RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, block=0.2, sweep_interval=3600.0), clock)
        for _ in range(2)
    ]
    for app in apps:
        @app.handler("api.call", queue="api")
        def call(payload: dict[str, int], ctx: Any) -> None:
            with lock:
                leased_at.append(ctx.job.leased_at.timestamp())

    apps[0].rate_limit_queue("api", starts=5, per=1.0)
    pools = [app.worker(concurrency=4, max_wait=0.2) for app in apps]
    for pool in pools:
        pool.start()
    try:
        for n in range(15):
            apps[0].enqueue("api.call", {"n": n})
        wait_for(lambda: len(leased_at) == 15, timeout=10, what="every job of the rate-limited queue to run")
        per_window: dict[int, int] = {}
        for instant in leased_at:
            per_window[int(instant)] = per_window.get(int(instant), 0) + 1
        assert max(per_window.values()) <= 5, per_window
    finally:
        for pool in pools:
            pool.stop()
        for app in apps:
            app.close()
