"""A job released at shutdown is published again at once on Redis Streams.

Worker A takes a long job and is stopped with a short drain: the job is released back to its
queue.  Worker B, idle on another dispatcher of the same prefix, must run it within seconds:
the sweep is an hour away, so only the release's own publish can wake B.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether

from tests.conftest import REDIS_URL, wait_for
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis


@pytest.fixture
def prefix(redis_client: Any) -> Any:
    with temporary_prefix(redis_client, "release") as name:
        yield name


def test_a_job_released_at_shutdown_is_published_and_an_idle_worker_runs_it(prefix: str) -> None:
    repo, clock = InMemoryJobRepository(), SystemClock()
    started: list[str] = []
    lock = threading.Lock()

    def build(name: str) -> Tether:
        dispatcher = RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, block=0.2, sweep_interval=3600.0)
        app = Tether(repo, dispatcher, clock)

        @app.handler("t.long")
        def long_job(payload: dict[str, Any], ctx: JobContext) -> None:
            with lock:
                started.append(name)
            if name == "a":
                ctx.sleep(60)  # cancelled by A's shutdown

        return app

    a, b = build("a"), build("b")
    pool_a = a.worker(concurrency=1, max_wait=0.2, reap_interval=3600.0)
    pool_b = b.worker(concurrency=1, max_wait=0.2, reap_interval=3600.0)
    try:
        pool_a.start()
        job = a.enqueue("t.long", {}).job
        wait_for(lambda: started == ["a"], timeout=10, what="worker A to start the job")
        pool_b.start()  # idle: its start-up sweep ran before the release, the next is an hour away
        pool_a.stop(drain_timeout=0.1)
        assert pool_a.stats.released == 1
        wait_for(lambda: started == ["a", "b"], timeout=10, what="idle worker B to run the released job")
        wait_for(lambda: b.get(job.id).status.value == "completed", timeout=10, what="B's completion")
    finally:
        pool_a.stop(drain_timeout=0)
        pool_b.stop(drain_timeout=5)
        a.close()
        b.close()
