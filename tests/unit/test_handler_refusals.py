"""Handlers a thread cannot run are refused: coroutine functions (``async def``), async generator
functions and generator functions, on every registration path; a plain wrapper that returns a
coroutine anyway sends its job to ``dead`` instead of recording it completed."""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.entrypoints.execution import Outcome
from tether.entrypoints.handlers import HandlerSpec, make_spec
from tether.testing import drain, fake_app

RAN: list[Any] = []


async def send_email(payload: Any) -> None:
    RAN.append(payload)


async def stream_rows(payload: Any) -> AsyncIterator[int]:
    RAN.append(payload)
    yield 1


def rows(payload: Any) -> Iterator[int]:
    RAN.append(payload)
    yield 1


def logged(func: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that keeps ``__wrapped__`` (as ``functools.wraps`` does)."""

    @functools.wraps(func)
    def wrapper(*args: Any) -> Any:
        return func(*args)

    return wrapper


class AsyncCallable:
    async def __call__(self, payload: Any) -> None:
        RAN.append(payload)


UNRUNNABLE = [
    pytest.param(send_email, "send_email is a coroutine function (async def)", id="async-def"),
    pytest.param(stream_rows, "stream_rows is an async generator function", id="async-generator"),
    pytest.param(rows, "rows is a generator function", id="generator"),
    pytest.param(functools.partial(send_email), "a coroutine function", id="partial"),
    pytest.param(logged(send_email), "send_email is a coroutine function", id="wraps-decorated"),
    pytest.param(AsyncCallable(), "a coroutine function", id="async-__call__"),
]


@pytest.mark.parametrize(("func", "message"), UNRUNNABLE)
def test_register_refuses_it_naming_the_handler_and_registers_nothing(func: Any, message: str) -> None:
    app = fake_app()
    with pytest.raises(ValidationError) as caught:
        app.register("emails.send", func)
    assert caught.value.field == "handler"
    assert message in str(caught.value)
    assert dict(app.handlers) == {}


@pytest.mark.parametrize(("func", "message"), UNRUNNABLE[:3])
def test_the_decorator_forms_refuse_it(func: Any, message: str) -> None:
    app = fake_app()
    with pytest.raises(ValidationError, match="handler") as named:
        app.handler("emails.send")(func)
    assert message in str(named.value)
    with pytest.raises(ValidationError) as bare:
        app.handler(func)
    assert message in str(bare.value)
    assert dict(app.handlers) == {}


def test_a_handler_spec_built_directly_or_by_make_spec_is_refused() -> None:
    with pytest.raises(ValidationError, match="coroutine function"):
        HandlerSpec(name="emails.send", func=send_email, takes_context=False)
    with pytest.raises(ValidationError, match="generator function"):
        make_spec("rows", rows)


def test_plain_functions_and_callables_still_register() -> None:
    class Sync:
        def __call__(self, payload: Any) -> None:
            RAN.append(payload)

    app = fake_app()
    app.register("a", lambda payload: None)
    app.register("b", Sync())
    app.register("c", functools.partial(lambda payload, ctx: None))
    assert sorted(app.handlers) == ["a", "b", "c"]
    assert app.handlers["c"].takes_context


def test_drain_sends_a_wrapper_that_returns_a_coroutine_to_dead_without_running_its_body() -> None:
    """Registration cannot see through a plain function that calls an ``async def``: the
    coroutine it returns is closed unrun and the job is dead (not recorded completed, as before)."""
    app = fake_app()
    RAN.clear()

    def wrapper(payload: Any) -> Any:
        return send_email(payload)

    app.register("emails.send", wrapper)
    job = app.enqueue("emails.send", {"to": "a@b.c"}, max_attempts=3).job
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited": it was closed
        report = drain(app)

    assert [run.outcome for run in report] == [Outcome.DEAD]
    stored = app.get(job.id)
    assert stored.status is JobStatus.DEAD
    assert stored.attempts == 1
    assert stored.last_error is not None
    assert "handler 'emails.send' returned a coroutine instead of running" in stored.last_error
    assert RAN == []


def test_a_coroutine_function_never_reaches_a_worker() -> None:
    """Before, ``async def`` handlers were recorded completed by workers and drain alike without
    their body running; now no such handler can be registered, so nothing is ever leased for it."""
    app = fake_app()
    with pytest.raises(ValidationError):
        app.handler("emails.send")(send_email)
    app.enqueue("emails.send", {"to": "a@b.c"})
    report = drain(app)
    assert list(report) == [] and [j.job_type for j in report.pending] == ["emails.send"]
    asyncio.run(send_email("direct"))  # the function itself is untouched by the refusal
    assert RAN[-1] == "direct"
