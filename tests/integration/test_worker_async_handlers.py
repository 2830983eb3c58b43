"""``async def`` handlers in the worker pool, with real threads and the pool's event loop, on the
in-memory repository (and PostgreSQL for the mixed pool): the loop runs them concurrently, beside
thread-run handlers, and every outcome goes through the pool's fenced writes.

Waits are bounded; no assertion is about speed beyond "the sleeps overlapped".
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether
from tether.entrypoints.worker import async_runner

from tests.conftest import wait_for

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.2, jitter=0)


def make_app() -> Tether:
    repo, clock = InMemoryJobRepository(), SystemClock()
    return Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)


def statuses(app: Tether, jobs: list[Job]) -> list[JobStatus]:
    return [app.get(job.id).status for job in jobs]


def test_async_handlers_run_on_the_pools_loop_concurrently_beside_thread_handlers() -> None:
    app = make_app()
    seen: dict[str, set[str]] = {"async": set(), "sync": set()}
    running = {"now": 0, "most": 0}

    @app.handler("fetch")
    async def fetch(payload: dict, ctx: JobContext) -> None:
        seen["async"].add(threading.current_thread().name)
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.2)
        running["now"] -= 1

    @app.handler("resize")
    def resize(payload: dict) -> None:
        seen["sync"].add(threading.current_thread().name)

    jobs = [app.enqueue("fetch", {"i": i}).job for i in range(40)] + [app.enqueue("resize").job for _ in range(5)]
    started = time.monotonic()
    with app.worker(concurrency=2, async_concurrency=50, prefetch=50):
        wait_for(lambda: all(s is JobStatus.COMPLETED for s in statuses(app, jobs)), what="every job to complete")
    elapsed = time.monotonic() - started
    assert seen["async"] == {"tether-async"}
    assert seen["sync"] and all(name.startswith("tether-worker-") for name in seen["sync"])
    assert running["most"] > 10  # overlapped on one loop, far beyond the two threads
    assert elapsed < 40 * 0.2 / 2  # not one after the other


def test_async_concurrency_caps_the_handlers_on_the_loop() -> None:
    app = make_app()
    running = {"now": 0, "most": 0}

    @app.handler("slow")
    async def slow(payload: dict) -> None:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.05)
        running["now"] -= 1

    jobs = [app.enqueue("slow").job for _ in range(30)]
    with app.worker(concurrency=1, async_concurrency=3, prefetch=20):
        wait_for(lambda: all(s is JobStatus.COMPLETED for s in statuses(app, jobs)), what="every job to complete")
    assert running["most"] == 3


@pytest.mark.parametrize("error", [ValueError("bad input"), SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError()])
def test_whatever_a_handler_coroutine_raises_fails_its_job_and_the_loop_goes_on(error: BaseException) -> None:
    app = make_app()
    hooked: list[tuple[int, str]] = []

    async def hook(job: Job, exc: BaseException) -> None:
        await asyncio.sleep(0)
        hooked.append((job.id, type(exc).__name__))

    @app.handler("breaks", max_attempts=1, on_failure=hook)
    async def breaks(payload: dict) -> None:
        await asyncio.sleep(0)
        raise error

    @app.handler("fine")
    async def fine(payload: dict) -> None:
        await asyncio.sleep(0)

    bad = app.enqueue("breaks").job
    with app.worker(concurrency=1, async_concurrency=4):
        wait_for(lambda: app.get(bad.id).status is JobStatus.DEAD, what="the failing job to be dead")
        good = app.enqueue("fine").job  # the loop still runs jobs after it
        wait_for(lambda: app.get(good.id).status is JobStatus.COMPLETED, what="the next job to complete")
    dead = app.get(bad.id)
    assert dead.last_error is not None and dead.last_error.startswith(type(error).__name__)
    wait_for(lambda: hooked == [(bad.id, type(error).__name__)], what="the async failure hook")


def test_a_timeout_cancels_the_task_and_fails_the_attempt_with_job_timeout() -> None:
    app = make_app()
    inside: list[str] = []

    @app.handler("hangs", timeout=0.2, max_attempts=1)
    async def hangs(payload: dict) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            inside.append("cancelled")
            raise

    job = app.enqueue("hangs").job
    with app.worker(concurrency=1, async_concurrency=2) as pool:
        wait_for(lambda: app.get(job.id).status is JobStatus.DEAD, what="the timed-out job to be dead")
        assert pool.stats.timed_out == 1 and pool.stats.dead == 1
    assert inside == ["cancelled"]
    assert app.get(job.id).last_error == "JobTimeout: timed out after 0.2 s"


def test_a_timed_out_handler_that_swallows_its_cancellation_still_fails_with_job_timeout() -> None:
    app = make_app()

    @app.handler("stubborn", timeout=0.2, max_attempts=1)
    async def stubborn(payload: dict) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return  # pretends it finished

    job = app.enqueue("stubborn").job
    with app.worker(concurrency=1, async_concurrency=2):
        wait_for(lambda: app.get(job.id).status is JobStatus.DEAD, what="the timed-out job to be dead")
    assert app.get(job.id).last_error == "JobTimeout: timed out after 0.2 s"


def test_an_operators_cancel_cancels_the_running_task_and_the_job_ends_cancelled() -> None:
    app = make_app()
    started = threading.Event()
    inside: list[str] = []

    @app.handler("long")
    async def long(payload: dict, ctx: JobContext) -> None:
        started.set()
        try:
            await ctx.asleep(30)
        except asyncio.CancelledError:
            inside.append("cancelled")
            raise

    job = app.enqueue("long").job
    with app.worker(concurrency=1, async_concurrency=2, lease_timeout=1.2, heartbeat_interval=0.1):
        assert started.wait(10)
        app.cancel(job.id)
        wait_for(lambda: app.get(job.id).status is JobStatus.CANCELLED, what="the job to end cancelled")
    assert inside == ["cancelled"]


def test_the_drain_deadline_cancels_the_task_and_releases_the_job_unrecorded() -> None:
    app = make_app()
    started = threading.Event()
    inside: list[str] = []

    @app.handler("long", max_attempts=3)
    async def long(payload: dict) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            inside.append("cancelled")
            raise

    job = app.enqueue("long").job
    pool = app.worker(concurrency=1, async_concurrency=2, drain_timeout=0.2)
    pool.start()
    assert started.wait(10)
    stats = pool.stop()
    wait_for(lambda: inside == ["cancelled"], what="the task to be cancelled")
    released = app.get(job.id)
    assert released.status is JobStatus.QUEUED and released.attempts == 0 and released.last_error is None
    assert stats.released == 1 and stats.failed == 0


def test_a_cancelled_error_the_handler_raises_itself_is_its_failure_not_the_pools_cancel() -> None:
    app = make_app()

    @app.handler("inner", max_attempts=1)
    async def inner(payload: dict) -> None:
        task = asyncio.ensure_future(asyncio.sleep(10))
        task.cancel()
        await task  # raises CancelledError into the handler: not the pool's doing

    job = app.enqueue("inner").job
    with app.worker(concurrency=1, async_concurrency=2):
        wait_for(lambda: app.get(job.id).status is JobStatus.DEAD, what="the job to fail")
    assert (app.get(job.id).last_error or "").startswith("CancelledError")


def test_a_handler_that_blocks_the_loop_is_logged_with_its_job_type(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(async_runner, "LOOP_LAG_WARNING", 0.1)
    app = make_app()

    @app.handler("hog")
    async def hog(payload: dict) -> None:
        time.sleep(0.6)  # noqa: ASYNC251 - blocks the loop on purpose

    job = app.enqueue("hog").job
    with caplog.at_level(logging.WARNING, logger="tether.worker"), app.worker(concurrency=1, async_concurrency=2):
        wait_for(lambda: app.get(job.id).status is JobStatus.COMPLETED, what="the job to complete")
    blocked = [r.getMessage() for r in caplog.records if "event loop of async handlers is blocked" in r.getMessage()]
    assert blocked and f"hog (job {job.id})" in blocked[0]


def test_ctx_asleep_returns_false_when_cancelled_and_aheartbeat_extends_the_lease() -> None:
    app = make_app()
    seen: dict[str, object] = {}

    @app.handler("beats")
    async def beats(payload: dict, ctx: JobContext) -> None:
        before = ctx.job.lease_expires_at
        await asyncio.sleep(0.05)
        await ctx.aheartbeat()
        seen["extended"] = ctx.job.lease_expires_at is not None and before is not None and ctx.job.lease_expires_at > before
        seen["slept"] = await ctx.asleep(0.01)
        ctx.cancel()
        seen["after_cancel"] = await ctx.asleep(10)

    job = app.enqueue("beats").job
    with app.worker(concurrency=1, async_concurrency=2):
        wait_for(lambda: app.get(job.id).status is not JobStatus.QUEUED and "after_cancel" in seen, what="the handler")
    assert seen == {"extended": True, "slept": True, "after_cancel": False}


def test_async_concurrency_is_checked() -> None:
    app = make_app()
    for bad in (0, -1, 1.5, "10", True):
        with pytest.raises(ValidationError) as info:
            app.worker(async_concurrency=bad)  # type: ignore[arg-type]
        assert info.value.field == "async_concurrency"


def test_generator_handlers_are_refused_and_coroutine_functions_accepted() -> None:
    app = make_app()

    async def agen(payload: dict):  # type: ignore[no-untyped-def]
        yield payload

    def gen(payload: dict):  # type: ignore[no-untyped-def]
        yield payload

    for func in (agen, gen):
        with pytest.raises(ValidationError) as info:
            app.register("x", func)
        assert info.value.field == "handler"
    assert "x" not in app.handlers

    async def coro(payload: dict) -> None:
        return None

    assert app.register("x", coro).is_async


@pytest.mark.postgres
def test_async_and_thread_handlers_drain_a_postgres_store_each_job_once() -> None:
    from collections import Counter

    from tests.postgres_fixtures import schema_name, temporary_app

    ran: Counter[int] = Counter()
    with temporary_app(schema_name("async_worker"), pool_size=4) as app:

        @app.handler("io")
        async def io(payload: dict) -> None:
            await asyncio.sleep(0.01)
            ran[payload["i"]] += 1

        @app.handler("cpu")
        def cpu(payload: dict) -> None:
            ran[payload["i"]] += 1

        from tether.entrypoints.requests import EnqueueRequest

        app.enqueue_many([EnqueueRequest("io", {"i": i}) for i in range(300)]
                         + [EnqueueRequest("cpu", {"i": 1000 + i}) for i in range(30)])
        with app.worker(concurrency=2, async_concurrency=50, max_wait=0.2) as pool:
            wait_for(lambda: app.counts()[JobStatus.COMPLETED] == 330, what="every job to complete")
        assert pool.stats.completed == 330
    assert len(ran) == 330 and set(ran.values()) == {1}
