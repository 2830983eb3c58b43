"""A worker pool on Redis Streams refills its threads in the completion flush, as on polling.

The pool leases its next jobs in the statement that writes its completions
(``complete_and_lease``) and tells the dispatcher (``leased_directly``), which retires one stream
entry per job so leased: after a drain every entry is delivered and acknowledged, and a job
published afterwards is still delivered by its own entry (the sweep is set an hour away, so it
cannot be what delivers it).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.domain.job import JobStatus
from tether.entrypoints.service import Tether

from tests.conftest import REDIS_URL, wait_for
from tests.counting_repository import CountingRepository
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis


@pytest.fixture
def prefix(redis_client: Any) -> Any:
    with temporary_prefix(redis_client, "refill") as name:
        yield name


def test_a_draining_pool_refills_from_the_repository_and_retires_the_entries(redis_client: Any, prefix: str) -> None:
    repo = CountingRepository()
    clock = SystemClock()
    dispatcher = RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, block=0.2, sweep_interval=3600.0)
    app = Tether(repo, dispatcher, clock)
    runs: list[int] = []
    lock = threading.Lock()

    @app.handler("t.job")
    def record(payload: dict[str, Any]) -> None:
        with lock:
            runs.append(payload["n"])

    for n in range(300):
        app.enqueue("t.job", {"n": n})
    pool = app.worker(concurrency=4, max_wait=0.2)
    pool.start()
    try:
        wait_for(lambda: len(runs) >= 300, what="300 jobs to run")
        assert sorted(runs) == list(range(300))  # each exactly once
        assert repo.refilled > 0  # the flush did lease

        stream = dispatcher.keys.stream("default")

        def retired() -> bool:
            [group] = redis_client.xinfo_groups(stream)
            return int(group["pending"]) == 0 and group["last-delivered-id"] == redis_client.xinfo_stream(stream)[
                "last-generated-id"
            ]

        wait_for(retired, timeout=10, what="every entry to be delivered and acknowledged")
        # The entries of refilled jobs were retired by the dispatcher, not read back one by one
        # (each would cost a by-id lease that finds the job taken): a few races at most, where
        # telling nothing costs about one per refilled job.
        assert repo.by_id < repo.refilled // 3, (repo.by_id, repo.refilled)
        late = app.enqueue("t.job", {"n": 300}).job
        wait_for(lambda: 300 in runs, timeout=10, what="a job published after the drain to run")
        wait_for(lambda: app.get(late.id).status is JobStatus.COMPLETED, timeout=10, what="its completion")
    finally:
        pool.stop(drain_timeout=5)
        app.close()
    assert sorted(runs) == list(range(301))
