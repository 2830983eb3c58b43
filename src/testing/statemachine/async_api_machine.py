"""A state machine that drives one app's steps through the sync or the async API at random and
checks every answer against the same step through the sync API on a twin app.

:class:`AsyncApiStateMachine` holds two :class:`~tether.entrypoints.service.Tether` apps on
empty stores (from :meth:`AsyncApiStateMachine.make_app`).  Every rule (enqueue with and without
an idempotency key, enqueue_many, get, list, counts, find_by_key, cancel, retry, and a
transaction that commits or rolls back) runs on the reference app through the sync API and on the
subject app through the API Hypothesis picks (``app.enqueue`` or ``await app.aenqueue``); the
answers, or the errors' type, field and text, must be equal (times left out: see
:func:`~tether.testing.contract.async_api.shape`).  Reads on the subject also run through the
other API and must agree.  The async calls of one history share one event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule
from tether.entrypoints.requests import EnqueueRequest
from tether.entrypoints.service import Tether
from tether.testing.contract.async_api import error_shape, shape
from tether.testing.statemachine.base import KEYS, QUEUES, MachineBase

apis = st.sampled_from(("sync", "async"))
job_ids = st.integers(0, 8)
keys = st.one_of(st.none(), st.sampled_from(KEYS))
statuses = st.sampled_from((None, "queued", "cancelled", "dead", "nope"))


class _Undo(Exception):
    """Raised inside a transaction to roll it back."""


class AsyncApiStateMachine(MachineBase):
    """Mixed sync/async steps on one app against sync steps on a twin (see the module docstring).

    Override :meth:`make_app` (a new app on an empty store each call) and, if needed,
    :meth:`close_app`.
    """

    def make_app(self) -> Tether:
        import tether

        return tether.connect("memory://", clock=self.make_clock())

    def close_app(self, app: Tether) -> None:
        app.close()

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.reference = self.make_app()
        self.subject = self.make_app()

    def teardown(self) -> None:
        try:
            self.close_app(self.subject)
            self.close_app(self.reference)
        finally:
            self.runner.close()

    # -- calling ---------------------------------------------------------------------------
    def _sync(self, app: Tether, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            return shape(getattr(app, method)(*args, **kwargs))
        except Exception as error:  # noqa: BLE001 - the error is the answer
            return error_shape(error)

    def _async(self, app: Tether, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        async def call() -> Any:
            return await getattr(app, f"a{method}")(*args, **kwargs)

        try:
            return shape(self.runner.run(call()))
        except Exception as error:  # noqa: BLE001 - the error is the answer
            return error_shape(error)

    def _step(self, api: str, method: str, *args: Any, read: bool = False, **kwargs: Any) -> None:
        expected = self._sync(self.reference, method, args, kwargs)
        run = self._async if api == "async" else self._sync
        got = run(self.subject, method, args, kwargs)
        assert got == expected, f"{api} {method}{args} {kwargs}: {got!r} != sync {expected!r}"
        if read:
            other = self._sync if api == "async" else self._async
            again = other(self.subject, method, args, kwargs)
            assert again == got, f"{method}{args} {kwargs}: sync and async answers differ: {again!r} != {got!r}"

    # -- rules -----------------------------------------------------------------------------
    @rule(api=apis, queue=st.sampled_from(QUEUES), key=keys, priority=st.sampled_from([0, 5]),
          payload=st.integers(0, 3))
    def enqueue(self, api: str, queue: str, key: str | None, priority: int, payload: int) -> None:
        self._step(api, "enqueue", "machine.job", {"n": payload}, queue=queue, priority=priority,
                   idempotency_key=key)

    @rule(api=apis, batch=st.lists(st.tuples(st.sampled_from(QUEUES), keys), max_size=3))
    def enqueue_many(self, api: str, batch: list[tuple[str, str | None]]) -> None:
        requests = [EnqueueRequest("machine.bulk", {"i": i}, queue=queue, idempotency_key=key)
                    for i, (queue, key) in enumerate(batch)]
        self._step(api, "enqueue_many", requests)

    @rule(api=apis, job_id=job_ids)
    def get(self, api: str, job_id: int) -> None:
        self._step(api, "get", job_id, read=True)

    @rule(api=apis, status=statuses, queue=st.sampled_from((None, *QUEUES)), limit=st.sampled_from([100, 2, -1]))
    def list_jobs(self, api: str, status: str | None, queue: str | None, limit: int) -> None:
        self._step(api, "list", status=status, queue=queue, limit=limit, read=True)

    @rule(api=apis, queue=st.sampled_from((None, *QUEUES)))
    def counts(self, api: str, queue: str | None) -> None:
        self._step(api, "counts", queue=queue, read=True)

    @rule(api=apis, key=st.sampled_from((*KEYS, "missing")))
    def find_by_key(self, api: str, key: str) -> None:
        self._step(api, "find_by_key", key, read=True)

    @rule(api=apis, job_id=job_ids)
    def cancel(self, api: str, job_id: int) -> None:
        self._step(api, "cancel", job_id)

    @rule(api=apis, job_id=job_ids)
    def retry(self, api: str, job_id: int) -> None:
        self._step(api, "retry", job_id)

    @rule(api=apis, keys_=st.lists(keys, min_size=1, max_size=3), commit=st.booleans())
    def transaction(self, api: str, keys_: list[str | None], commit: bool) -> None:
        expected = self._sync_transaction(self.reference, keys_, commit)
        if api == "async":
            got = self.runner.run(self._async_transaction(self.subject, keys_, commit))
        else:
            got = self._sync_transaction(self.subject, keys_, commit)
        assert got == expected, f"{api} transaction {keys_} commit={commit}: {got!r} != sync {expected!r}"

    def _sync_transaction(self, app: Tether, keys_: list[str | None], commit: bool) -> list[Any]:
        answers: list[Any] = []
        try:
            with app.transaction() as tx:
                for key in keys_:
                    answers.append(shape(app.enqueue("machine.tx", idempotency_key=key, connection=tx)))
                if not commit:
                    raise _Undo
        except _Undo:
            answers.append("rolled back")
        return answers

    async def _async_transaction(self, app: Tether, keys_: list[str | None], commit: bool) -> list[Any]:
        answers: list[Any] = []
        try:
            async with app.atransaction() as tx:
                for key in keys_:
                    answers.append(shape(await app.aenqueue("machine.tx", idempotency_key=key, connection=tx)))
                if not commit:
                    raise _Undo
        except _Undo:
            answers.append("rolled back")
        return answers
