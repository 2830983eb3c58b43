"""No internal thread of a worker pool dies of what an adapter or a hook raises, with real threads.

The pool runs on a repository and a dispatcher wrapped in :class:`tests.faults.Faulty`, which
raise ``asyncio.CancelledError`` (a ``BaseException``) and ``RuntimeError`` at chosen calls of
the methods each internal thread uses: leasing (``tether-acquire``), completions
(``tether-complete``), heartbeats and the registry refresh (``tether-heartbeat``), the reaper and
the dispatcher's upkeep (``tether-maintenance``), failures (handler threads), and the idle count
(``run``'s own thread).  ``run(stop_when_idle=True)`` must return with every job completed, each
planned fault met, and no exception escaping any thread.  On memory, SQLite and PostgreSQL (whose
completions go through ``complete_and_lease``).
"""

from __future__ import annotations

import asyncio
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
from tether.domain.job import JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether
from tether.entrypoints.worker import acquirer as acquirer_module
from tether.entrypoints.worker import supervision
from tether.entrypoints.worker.stats import WorkerStats

from tests.faults import Faulty
from tests.postgres_fixtures import schema_name, temporary_repository

_schemas = itertools.count()
FAST = RetryPolicy(base_seconds=0.01, cap_seconds=0.05, jitter=0)
POOL: dict[str, Any] = {
    "concurrency": 3, "lease_timeout": 1.0, "heartbeat_interval": 0.05, "reap_interval": 0.1, "max_wait": 0.05,
}
JOBS = 30


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def repository(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemoryJobRepository()
    elif request.param == "sqlite":
        repo = open_repository(f"sqlite:///{tmp_path / 'jobs.db'}")
        yield repo
        repo.close()
    else:
        with temporary_repository(schema_name(f"wtf{next(_schemas)}")) as pg:
            yield pg


@pytest.fixture
def thread_deaths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of threads that ended with an exception (``threading.excepthook``)."""
    deaths: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: deaths.append(args.thread.name if args.thread else "?"))
    return deaths


def run_in_thread(app: Tether, timeout: float = 60.0, **options: Any) -> WorkerStats:
    """``run(stop_when_idle=True)`` on a thread; fails the test if it has not returned in ``timeout`` s."""
    pool = app.worker(**{**POOL, **options})
    result: list[WorkerStats] = []
    runner = threading.Thread(target=lambda: result.append(pool.run(stop_when_idle=True, install_signal_handlers=False)),
                              daemon=True)
    runner.start()
    runner.join(timeout)
    if runner.is_alive():
        pool.request_stop()
        pool.request_stop()
        runner.join(10.0)
        pytest.fail(f"run(stop_when_idle=True) did not return within {timeout} s")
    return result[0]


def test_every_internal_thread_outlives_cancelled_and_runtime_errors(repository: Any, thread_deaths: list[str]) -> None:
    cancelled, broken = asyncio.CancelledError, RuntimeError
    repo = Faulty(repository, {
        "complete_many": {1: cancelled(), 2: broken("complete_many")},
        "complete_and_lease": {1: cancelled(), 2: broken("complete_and_lease")},
        "heartbeat": {1: cancelled(), 2: broken("heartbeat")},
        "reap": {1: cancelled(), 2: broken("reap")},
        "fail": {1: cancelled()},
        "record_worker": {2: cancelled(), 3: broken("record_worker")},
        "count_by_status": {1: cancelled(), 2: broken("count_by_status")},
    })
    clock = SystemClock()
    dispatcher = Faulty(PollingDispatcher(repo, clock, poll_interval=0.02), {  # type: ignore[arg-type]
        "acquire": {1: cancelled(), 3: broken("acquire")},
        "maintain": {1: cancelled(), 2: broken("maintain")},
    })
    app = Tether(repo, dispatcher, clock, retry_policy=FAST, registry=repo)  # type: ignore[arg-type]
    runs: dict[int, int] = {}
    lock = threading.Lock()

    @app.handler("work")
    def work(payload: dict[str, int], ctx: JobContext) -> None:
        with lock:
            runs[ctx.job.id] = runs.get(ctx.job.id, 0) + 1
        if payload["n"] == 0 and ctx.attempt == 1:
            raise ValueError("the first attempt of job 0 fails")  # its fail() write raises CancelledError
        ctx.sleep(0.06)  # long enough for a heartbeat pass to see it held

    ids = [app.enqueue("work", {"n": n}).job.id for n in range(JOBS)]
    stats = run_in_thread(app)

    assert {i: app.get(i).status for i in ids} == dict.fromkeys(ids, JobStatus.COMPLETED)
    assert set(runs) == set(ids)
    # every fault the plan could meet was met (complete_many is not used by a pool whose flush refills)
    met = sorted(repo.raised + dispatcher.raised)
    expected = [f for f in sorted(repo.planned() + dispatcher.planned()) if f[0] not in ("complete_many", "complete_and_lease")]
    assert [f for f in met if f[0] not in ("complete_many", "complete_and_lease")] == expected
    assert sorted(f for f in met if f[0] in ("complete_many", "complete_and_lease"))[:2] in (
        [("complete_and_lease", 1, "CancelledError"), ("complete_and_lease", 2, "RuntimeError")],
        [("complete_many", 1, "CancelledError"), ("complete_many", 2, "RuntimeError")],
    )
    assert thread_deaths == []
    assert stats.completed == JOBS


def test_a_thread_that_dies_anyway_is_started_again(
    repository: Any, thread_deaths: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acquiring loop raises outside its per-pass guard and the crash report itself fails, so
    the thread really ends: the pool's supervisor notices and starts a new one."""
    crashes = iter([True])

    real_room = acquirer_module.Acquirer._prefetch_room

    def room(self: acquirer_module.Acquirer) -> int:
        if threading.current_thread().name == "tether-acquire" and next(crashes, False):
            raise asyncio.CancelledError
        return real_room(self)

    def report(*_args: object) -> None:
        raise RuntimeError("the crash report fails too")

    monkeypatch.setattr(acquirer_module.Acquirer, "_prefetch_room", room)
    monkeypatch.setattr(supervision, "_log_crash", report)
    restarted: list[str] = []
    real_check = supervision.Supervisor.check_once
    monkeypatch.setattr(supervision.Supervisor, "check_once", lambda self: restarted.extend(real_check(self)) or [])

    clock = SystemClock()
    app = Tether(repository, PollingDispatcher(repository, clock, poll_interval=0.02), clock, retry_policy=FAST)
    app.handler("work")(lambda payload: None)
    ids = [app.enqueue("work", {"n": n}).job.id for n in range(JOBS)]
    stats = run_in_thread(app)

    assert {i: app.get(i).status for i in ids} == dict.fromkeys(ids, JobStatus.COMPLETED)
    assert stats.completed == JOBS
    assert restarted == ["tether-acquire"]
    assert thread_deaths == ["tether-acquire"]


def test_supervised_thread_restarts_its_loop_after_a_crash() -> None:
    """One crash: the loop runs again on the same thread after the first backoff step."""
    runs: list[int] = []
    done = threading.Event()

    def loop() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise asyncio.CancelledError
        done.set()

    thread = supervision.SupervisedThread("t", loop, stopped=lambda: False)
    thread.start()
    assert done.wait(5.0)
    thread.join(5.0)
    assert runs == [0, 1, 2]
    assert thread.crashes == 2 and thread.restarts == 0
    assert not thread.dead()  # its loop returned: ended, not dead


def test_supervisor_gives_up_with_a_clear_error_when_no_thread_can_start(
    monkeypatch: pytest.MonkeyPatch, thread_deaths: list[str]
) -> None:
    reasons: list[str] = []
    supervisor = supervision.Supervisor("w1", give_up=reasons.append)
    monkeypatch.setattr(supervision, "_log_crash", lambda *_: (_ for _ in ()).throw(RuntimeError("log")))
    thread = supervisor.thread("tether-x", lambda: (_ for _ in ()).throw(RuntimeError("boom")), stopped=lambda: False)
    thread.start()
    thread.join(5.0)
    assert thread.dead()
    assert thread_deaths == ["tether-x"]

    def no_threads(self: supervision.SupervisedThread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(supervision.SupervisedThread, "revive", no_threads)
    assert supervisor.check_once() == []
    assert supervisor.check_once() == []
    assert reasons == [
        ("worker w1: its thread tether-x died and could not be started again (RuntimeError: can't start new thread); "
        "the pool stops")
    ]
