"""The async API contract: ``await app.aenqueue(...)`` and its siblings answer exactly as the sync
calls do, on any store (:class:`AsyncApiContract`).

An adapter's test module subclasses it and supplies ``app_factory``: a callable returning a new
:class:`~tether.entrypoints.service.Tether` on an empty store each time (the suite closes them).
The same scripted steps (enqueues with and without keys, bulk enqueues, reads, counts, cancel,
retry, and bad input of every kind) run through the sync API on one app and through the async API
on another; every answer, and every error's type, field and text, must be the same.  Times are
left out of the comparison (each app reads its own clock).  Transactions, successive event loops
and where notifications run are checked too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from tether.domain.job import EnqueueResult, Job, JobStatus
from tether.entrypoints.requests import EnqueueRequest
from tether.entrypoints.service import Tether

AppFactory = Callable[[], Tether]

#: (method, args, kwargs): run as ``app.<method>`` and as ``await app.a<method>``.
STEPS: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]] = (
    ("enqueue", ("emails.send", {"to": "a"}), {}),
    ("enqueue", ("emails.send", {"to": "b"}), {"queue": "mail", "priority": 5, "idempotency_key": "k1"}),
    ("enqueue", ("emails.send", {"to": "c"}), {"idempotency_key": "k1"}),
    ("enqueue", ("later", None), {"delay": 60, "max_attempts": 3}),
    ("enqueue_many", ([EnqueueRequest("bulk", {"i": 1}), EnqueueRequest("bulk", {"i": 2}, idempotency_key="k2"),
                       EnqueueRequest("bulk", idempotency_key="k1")],), {}),
    ("get", (1,), {}),
    ("get", (999,), {}),
    ("get", (0,), {}),
    ("list", (), {"status": "queued", "limit": 3}),
    ("list", (), {"queue": "mail"}),
    ("list", (), {"status": "nope"}),
    ("list", (), {"limit": -1}),
    ("counts", (), {}),
    ("counts", (), {"queue": "mail"}),
    ("counts", (), {"queue": "not a queue!"}),
    ("find_by_key", ("k2",), {}),
    ("find_by_key", ("missing",), {}),
    ("cancel", (1,), {}),
    ("cancel", (1,), {}),
    ("cancel", (999,), {}),
    ("retry", (1,), {}),
    ("retry", (2,), {}),
    ("retry", ("x",), {}),
    ("enqueue", ("", None), {}),
    ("enqueue", ("x", {"f": float("nan")}), {}),
    ("enqueue", ("x", None), {"priority": 2**40}),
    ("enqueue", ("x", None), {"delay": 1, "run_at": "now"}),
    ("enqueue", ("x", None), {"connection": object()}),
    ("enqueue_many", ([EnqueueRequest("ok"), EnqueueRequest("bad", priority="high")],), {}),  # type: ignore[arg-type]
    ("enqueue_many", (["not a request"],), {}),
    ("enqueue_many", ([],), {}),
    ("counts", (), {}),
    ("list", (), {"limit": 100}),
)


def shape(answer: Any) -> Any:
    """An answer without its times (each app reads its own clock)."""
    if isinstance(answer, Job):
        return (answer.id, answer.job_type, answer.queue, answer.priority, answer.status.value, answer.attempts,
                answer.max_attempts, answer.payload, answer.idempotency_key, answer.last_error, answer.lease_token,
                answer.cancel_requested_at is None, answer.leased_by)
    if isinstance(answer, EnqueueResult):
        return ("result", shape(answer.job), answer.created)
    if isinstance(answer, list):
        return [shape(item) for item in answer]
    if isinstance(answer, dict):
        return {(k.value if isinstance(k, JobStatus) else k): v for k, v in answer.items()}
    return answer


def error_shape(error: BaseException) -> tuple[str, object, str]:
    return (type(error).__name__, getattr(error, "field", None), str(error))


def run_sync(app: Tether, steps: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
    answers: list[Any] = []
    for method, args, kwargs in steps:
        try:
            answers.append(shape(getattr(app, method)(*args, **kwargs)))
        except Exception as error:  # noqa: BLE001 - the error is the answer
            answers.append(error_shape(error))
    return answers


async def run_async(app: Tether, steps: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
    answers: list[Any] = []
    for method, args, kwargs in steps:
        try:
            answers.append(shape(await getattr(app, f"a{method}")(*args, **kwargs)))
        except Exception as error:  # noqa: BLE001 - the error is the answer
            answers.append(error_shape(error))
    return answers


class AsyncApiContract:
    """The async API answers as the sync API does (see the module docstring)."""

    @pytest.fixture
    def apps(self, app_factory: AppFactory) -> Any:
        made: list[Tether] = []

        def make() -> Tether:
            app = app_factory()
            made.append(app)
            return app

        yield make
        for app in made:
            app.close()

    def test_the_async_api_answers_as_the_sync_api(self, apps: AppFactory) -> None:
        sync_answers = run_sync(apps(), STEPS)
        async_answers = asyncio.run(run_async(apps(), STEPS))
        for step, expected, got in zip(STEPS, sync_answers, async_answers, strict=True):
            assert got == expected, f"{step[0]}{step[1]} {step[2]}"

    def test_a_transaction_commits_at_the_end_and_leaves_nothing_when_it_raises(self, apps: AppFactory) -> None:
        app = apps()

        class Undo(Exception):
            pass

        async def scenario() -> tuple[dict[JobStatus, int], dict[JobStatus, int], list[int]]:
            with pytest.raises(Undo):
                async with app.atransaction() as tx:
                    await app.aenqueue("a", connection=tx)
                    await app.aenqueue_many([EnqueueRequest("b"), EnqueueRequest("c")], connection=tx)
                    raise Undo
            after_rollback = await app.acounts()
            async with app.atransaction() as tx:
                first = await app.aenqueue("a", idempotency_key="t1", connection=tx)
                again = await app.aenqueue("a", idempotency_key="t1", connection=tx)
                assert first.created and not again.created and again.job.id == first.job.id
                await app.aenqueue_many([EnqueueRequest("b")], connection=tx)
            return after_rollback, await app.acounts(), [job.id for job in await app.alist()]

        after_rollback, after_commit, ids = asyncio.run(scenario())
        assert after_rollback[JobStatus.QUEUED] == 0
        assert after_commit[JobStatus.QUEUED] == 2 and len(ids) == 2

    def test_one_app_serves_successive_event_loops(self, apps: AppFactory) -> None:
        app = apps()

        async def once(n: int) -> int:
            result = await app.aenqueue("loop", {"n": n})
            assert (await app.aget(result.job.id)).payload == {"n": n}
            return result.job.id

        ids = [asyncio.run(once(n)) for n in range(3)]
        assert len(set(ids)) == 3
        loop = asyncio.new_event_loop()  # a loop closed by hand, as test frameworks do
        try:
            ids.append(loop.run_until_complete(once(3)))
        finally:
            loop.close()
        assert asyncio.run(app.acounts())[JobStatus.QUEUED] == 4

    def test_a_blocking_dispatcher_hears_of_a_job_after_commit_and_never_on_the_loop(self, apps: AppFactory) -> None:
        app = apps()
        heard: list[tuple[list[int], bool, str]] = []
        notify = app.dispatcher.notify
        done = threading.Event()

        def recording(jobs: Sequence[Job]) -> None:
            try:
                asyncio.get_running_loop()
                on_loop = True
            except RuntimeError:
                on_loop = False
            heard.append(([job.id for job in jobs], on_loop, threading.current_thread().name))
            notify(jobs)
            done.set()

        app.dispatcher.notify = recording  # type: ignore[method-assign]
        app.dispatcher.notify_blocks = True  # type: ignore[attr-defined]  # as Redis Streams' XADD does

        async def scenario() -> tuple[int, int]:
            async with app.atransaction() as tx:
                job = (await app.aenqueue("n", connection=tx)).job
                await asyncio.sleep(0.05)
                assert heard == []  # not before the commit
            for _ in range(1000):  # the transaction's notification first (10 s at most)
                if heard:
                    break
                await asyncio.sleep(0.01)
            done.clear()
            plain = (await app.aenqueue("plain")).job  # no caller's transaction: its own write
            return job.id, plain.id

        job_id, plain_id = asyncio.run(scenario())
        assert done.wait(10)
        assert [ids for ids, _, _ in heard] == [[job_id], [plain_id]]
        assert [on_loop for _, on_loop, _ in heard] == [False, False]

    def test_concurrent_aenqueues_each_store_one_job(self, apps: AppFactory) -> None:
        app = apps()

        async def scenario() -> list[EnqueueResult]:
            keyed = [app.aenqueue("k", idempotency_key="same") for _ in range(10)]
            plain = [app.aenqueue("p", {"i": i}) for i in range(40)]
            return list(await asyncio.gather(*keyed, *plain))

        results = asyncio.run(scenario())
        assert sum(r.created for r in results[:10]) == 1 and len({r.job.id for r in results[:10]}) == 1
        assert len({r.job.id for r in results[10:]}) == 40
        assert asyncio.run(app.acounts())[JobStatus.QUEUED] == 41

    def test_aenqueue_keeps_a_concurrency_key_in_and_out_of_a_transaction(self, apps: AppFactory) -> None:
        app = apps()

        async def scenario() -> list[str | None]:
            plain = await app.aenqueue("k", concurrency_key="customer-1")
            async with app.atransaction() as tx:
                joined = await app.aenqueue("k", concurrency_key="customer-2", connection=tx)
            unkeyed = await app.aenqueue("k")
            return [(await app.aget(r.job.id)).concurrency_key for r in (plain, joined, unkeyed)]

        assert asyncio.run(scenario()) == ["customer-1", "customer-2", None]


__all__ = ["STEPS", "AsyncApiContract", "error_shape", "run_async", "run_sync", "shape"]
