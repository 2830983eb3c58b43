"""A long-lived process that creates and runs worker pools again and again keeps flat memory: a
stopped pool is not retained by the app, the dispatcher or the repository, its threads end, and
what the dispatcher keeps per worker stays bounded.  With real threads on memory, SQLite and
PostgreSQL.
"""

from __future__ import annotations

import gc
import itertools
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import MAX_IDLE_WORKERS, PollingDispatcher
from tether.adapters.sqlalchemy import open_repository
from tether.entrypoints.service import Tether

from tests.postgres_fixtures import schema_name, temporary_repository

_schemas = itertools.count()
POOLS = 25


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tether]:
    clock = SystemClock()
    if request.param == "postgres":
        with temporary_repository(schema_name(f"wpm{next(_schemas)}")) as pg:
            application = Tether(pg, PollingDispatcher(pg, clock, poll_interval=0.02), clock)
            yield application
            application.dispatcher.close()
        return
    repo: Any = InMemoryJobRepository() if request.param == "memory" else open_repository(f"sqlite:///{tmp_path / 'j.db'}")
    application = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.02), clock)
    yield application
    application.close()


def tether_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("tether-") and t.is_alive())


def test_stopped_pools_are_released_with_their_threads(app: Tether) -> None:
    app.handler("work")(lambda payload: None)
    before = tether_threads()
    pools: list[weakref.ref[Any]] = []
    for n in range(POOLS):
        app.enqueue("work", {"n": n})
        pool = app.worker(concurrency=2, lease_timeout=5, reap_interval=0.5, max_wait=0.02, drain_timeout=1)
        stats = pool.run(stop_when_idle=True, install_signal_handlers=False)
        assert stats.completed == 1
        pools.append(weakref.ref(pool))
        del pool
    deadline = time.monotonic() + 10
    while tether_threads() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tether_threads() == before
    gc.collect()
    assert [ref() is None for ref in pools] == [True] * POOLS


def test_the_polling_dispatcher_keeps_a_bounded_idle_book() -> None:
    repo = InMemoryJobRepository()
    dispatcher = PollingDispatcher(repo, SystemClock(), poll_interval=0.02, min_poll_interval=0.01)
    for n in range(MAX_IDLE_WORKERS + 10):  # pools that came and went, each with its own worker id
        assert dispatcher.acquire(queues=None, worker_id=f"w{n}", limit=1, lease_timeout=5, max_wait=0.0001) == []
    assert 0 < len(dispatcher._idle_delay) <= MAX_IDLE_WORKERS
