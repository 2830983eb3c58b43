"""Handlers whose call would not run their body are refused at registration: async generator
functions and generator functions, on every registration path.  ``async def`` handlers (also
behind ``functools.partial``, ``functools.wraps`` or an async ``__call__``) run; a plain wrapper
that returns a coroutine has it run to its end, and one that returns a generator sends its job
to ``dead`` instead of recording it completed."""

from __future__ import annotations

import functools
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.entrypoints.execution import Outcome
from tether.entrypoints.handlers import make_spec
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
    pytest.param(stream_rows, "stream_rows is an async generator function", id="async-generator"),
    pytest.param(rows, "rows is a generator function", id="generator"),
    pytest.param(functools.partial(rows), "a generator function", id="partial-generator"),
]


@pytest.mark.parametrize(("func", "message"), UNRUNNABLE)
def test_register_refuses_it_naming_the_handler_and_registers_nothing(func: Any, message: str) -> None:
    app = fake_app()
    with pytest.raises(ValidationError) as caught:
        app.register("emails.send", func)
    assert caught.value.field == "handler"
    assert message in str(caught.value)
    assert dict(app.handlers) == {}


@pytest.mark.parametrize(("func", "message"), UNRUNNABLE[:2])
def test_the_decorator_forms_refuse_it(func: Any, message: str) -> None:
    app = fake_app()
    with pytest.raises(ValidationError, match="handler") as named:
        app.handler("emails.send")(func)
    assert message in str(named.value)
    with pytest.raises(ValidationError) as bare:
        app.handler(func)
    assert message in str(bare.value)
    assert dict(app.handlers) == {}


def test_make_spec_refuses_a_generator_function() -> None:
    with pytest.raises(ValidationError, match="generator function"):
        make_spec("rows", rows)


@pytest.mark.parametrize(
    "func",
    [
        pytest.param(send_email, id="async-def"),
        pytest.param(functools.partial(send_email), id="partial"),
        pytest.param(logged(send_email), id="wraps-decorated"),
        pytest.param(AsyncCallable(), id="async-__call__"),
    ],
)
def test_async_handlers_in_every_form_run_their_body(func: Any) -> None:
    app = fake_app()
    RAN.clear()
    app.register("emails.send", func)
    job = app.enqueue("emails.send", {"to": "a@b.c"}).job
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        report = drain(app)
    assert [run.outcome for run in report] == [Outcome.COMPLETED]
    assert app.get(job.id).status is JobStatus.COMPLETED
    assert RAN == [{"to": "a@b.c"}]


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


def test_drain_sends_a_wrapper_that_returns_a_generator_to_dead_without_running_its_body() -> None:
    """Registration cannot see through a plain function that calls a generator function: the
    generator it returns is closed unrun and the job is dead (not recorded completed)."""
    app = fake_app()
    RAN.clear()

    def wrapper(payload: Any) -> Any:
        return rows(payload)

    app.register("rows.export", wrapper)
    job = app.enqueue("rows.export", {"table": "t"}, max_attempts=3).job
    report = drain(app)

    assert [run.outcome for run in report] == [Outcome.DEAD]
    stored = app.get(job.id)
    assert stored.status is JobStatus.DEAD
    assert stored.attempts == 1
    assert stored.last_error is not None
    assert "handler 'rows.export' returned a generator instead of running" in stored.last_error
    assert RAN == []
