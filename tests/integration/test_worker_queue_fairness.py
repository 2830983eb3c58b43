"""Fairness across queues belongs to the worker pool: a pool on several named queues rotates which
queue its lease queries (and its refilling completion flushes) ask first, so one queue's backlog
cannot starve another.  With real threads on memory, SQLite and PostgreSQL (whose refills go
through ``complete_and_lease``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.adapters.sqlalchemy import open_repository
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import EnqueueRequest, Tether
from tether.entrypoints.worker.acquirer import Acquirer

from tests.postgres_fixtures import schema_name, temporary_repository

_schemas = itertools.count()
BACKLOG = 300


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tether]:
    clock = SystemClock()
    if request.param == "postgres":
        with temporary_repository(schema_name(f"wqf{next(_schemas)}")) as pg:
            yield Tether(pg, PollingDispatcher(pg, clock, poll_interval=0.02), clock)
        return
    repo: Any = InMemoryJobRepository() if request.param == "memory" else open_repository(f"sqlite:///{tmp_path / 'j.db'}")
    yield Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.02), clock)
    repo.close()


def started_order(app: Tether, **pool: Any) -> list[str]:
    """Run the pool until idle; the queues of the jobs in the order their handlers started."""
    order: list[str] = []
    lock = threading.Lock()

    @app.handler("work")
    def work(payload: dict[str, Any], ctx: JobContext) -> None:
        with lock:
            order.append(ctx.job.queue)

    app.worker(concurrency=2, prefetch=0, lease_timeout=30, reap_interval=1, max_wait=0.05, **pool).run(
        stop_when_idle=True, install_signal_handlers=False
    )
    return order


def test_a_backlog_on_one_queue_does_not_starve_another(app: Tether) -> None:
    app.enqueue_many([EnqueueRequest("work", {"n": n}, queue="a") for n in range(BACKLOG)])
    app.enqueue("work", {"n": -1}, queue="b")  # due after every job of a: last in the global lease order
    order = started_order(app, queues=["a", "b"])
    assert len(order) == BACKLOG + 1
    # the second lease query (or refill) asks b first: b's job is among the first two queries' jobs
    assert order.index("b") < 4, order[:10]


def test_a_pool_on_all_queues_keeps_the_strict_lease_order(app: Tether) -> None:
    app.enqueue_many([EnqueueRequest("work", {"n": n}, queue="a") for n in range(20)])
    app.enqueue("work", {"n": -1}, queue="b")
    order = started_order(app)
    assert sorted(order) == ["a"] * 20 + ["b"]
    assert order.index("b") >= 19  # leased last (a handler of its query's other job may start after it)


def test_the_acquirer_rotates_the_queues_it_asks_first() -> None:
    acquirer = Acquirer.__new__(Acquirer)
    acquirer._queues, acquirer._rotates, acquirer._turn = ["a", "b", "c"], True, itertools.count()
    assert [acquirer.next_queues() for _ in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]
    ]
    acquirer._queues, acquirer._rotates = None, False
    assert acquirer.next_queues() is None
