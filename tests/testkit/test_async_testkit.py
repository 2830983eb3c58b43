"""The test kit with asyncio: ``drain()`` runs ``async def`` handlers, ``await adrain()`` runs them on
the test's own loop, and the plugin's fixtures work in tests run by pytest-asyncio and by anyio."""

from __future__ import annotations

import asyncio
import threading

import pytest
from tether.domain.job import Job, JobStatus
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether
from tether.testing import adrain, drain


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def register(app: Tether, seen: list[object]) -> None:
    @app.handler("fetch", max_attempts=2)
    async def fetch(payload: dict, ctx: JobContext) -> None:
        await asyncio.sleep(0)
        seen.append((payload["n"], asyncio.get_running_loop(), ctx.attempt))
        if payload["n"] == 2 and ctx.attempt == 1:
            raise RuntimeError("first try fails")

    async def hook(job: Job, exc: BaseException) -> None:
        await asyncio.sleep(0)
        seen.append(("hook", job.id, job.status))

    @app.handler("plain", on_failure=hook, max_attempts=1)
    def plain(payload: dict) -> None:
        raise ValueError("plain fails")


def test_drain_runs_async_handlers_and_async_hooks(tether_app: Tether) -> None:
    seen: list[object] = []
    register(tether_app, seen)
    first = tether_app.enqueue("fetch", {"n": 1}).job
    second = tether_app.enqueue("fetch", {"n": 2}).job
    plain = tether_app.enqueue("plain").job
    report = drain(tether_app)
    assert [run.outcome.value for run in report] == ["completed", "retrying", "dead", "completed"]
    assert [s[0] for s in seen if s[0] != "hook"] == [1, 2, 2]
    assert ("hook", plain.id, JobStatus.DEAD) in seen
    assert tether_app.get(first.id).status is tether_app.get(second.id).status is JobStatus.COMPLETED


@pytest.mark.asyncio
async def test_adrain_runs_async_handlers_on_the_tests_loop_under_pytest_asyncio(tether_app: Tether) -> None:
    seen: list[object] = []
    register(tether_app, seen)
    await tether_app.aenqueue("fetch", {"n": 1})
    await tether_app.aenqueue("fetch", {"n": 2})
    report = await adrain(tether_app)
    assert [run.outcome.value for run in report] == ["completed", "retrying", "completed"]
    loop = asyncio.get_running_loop()
    assert all(s[1] is loop for s in seen)  # the test's own loop
    assert (await tether_app.acounts())[JobStatus.COMPLETED] == 2


@pytest.mark.asyncio
async def test_drain_called_from_an_async_test_still_runs_async_handlers(tether_app: Tether) -> None:
    seen: list[object] = []
    register(tether_app, seen)
    tether_app.enqueue("fetch", {"n": 1})
    report = drain(tether_app)  # on a loop of its own, on another thread
    assert [run.outcome.value for run in report] == ["completed"]
    assert seen[0][1] is not asyncio.get_running_loop()


@pytest.mark.anyio
async def test_the_fixtures_and_adrain_under_anyio(tether_app: Tether) -> None:
    seen: list[object] = []
    register(tether_app, seen)
    result = await tether_app.aenqueue("fetch", {"n": 1}, idempotency_key="once")
    again = await tether_app.aenqueue("fetch", {"n": 1}, idempotency_key="once")
    assert result.created and not again.created and again.job.id == result.job.id
    report = await adrain(tether_app)
    assert [run.outcome.value for run in report] == ["completed"]
    assert (await tether_app.aget(result.job.id)).status is JobStatus.COMPLETED


@pytest.mark.asyncio
async def test_adrain_keeps_the_loop_free_while_a_plain_handler_runs(tether_app: Tether) -> None:
    started, release = threading.Event(), threading.Event()

    @tether_app.handler("blocking")
    def blocking(payload: dict) -> None:
        started.set()
        release.wait(10)

    tether_app.enqueue("blocking")
    draining = asyncio.ensure_future(adrain(tether_app))
    while not started.is_set():
        await asyncio.sleep(0.01)  # the loop runs while the handler blocks its thread
    release.set()
    report = await draining
    assert [run.outcome.value for run in report] == ["completed"]
