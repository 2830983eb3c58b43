"""Handler registrations: which function runs a job type, with which defaults and failure hook.

A handler is ``handler(payload)`` or ``handler(payload, ctx)``; which one is decided once, at
registration, from :func:`inspect.signature`: a function that can take two positional arguments
(or ``*args``) gets the :class:`~tether.entrypoints.context.JobContext` as its second argument.

Handlers are plain functions run on threads.  A coroutine function (``async def``), an async
generator function or a generator function is refused at registration (:func:`refuse_unrunnable`):
calling one only builds a coroutine or generator object, so its body would never run while the
job was recorded ``completed``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import attrs
from tether.domain.errors import ValidationError
from tether.domain.job import Job
from tether.domain.validation import validate_job_type, validate_max_attempts, validate_queue, validate_seconds

#: ``on_failure(job, exc)``: ``job`` as persisted after the failed attempt (``retrying`` or ``dead``).
FailureHook = Callable[[Job, BaseException], Any]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@attrs.frozen
class HandlerSpec:
    """One registered handler.

    Attributes:
        name: the job type it runs.
        func: the function.
        takes_context: True when ``func`` is called as ``func(payload, ctx)``.
        queue: default queue for enqueues of this job type, or None (the app's default).
        max_attempts: default ``max_attempts`` for enqueues of this job type, or None.
        on_failure: hook run after each failed attempt is persisted, or None.
        timeout: seconds its handler may run before the attempt times out (see
            :mod:`tether.entrypoints.worker.timeouts`), or None for the worker's ``job_timeout``.
    """

    name: str
    func: Callable[..., Any]
    takes_context: bool
    queue: str | None = None
    max_attempts: int | None = None
    on_failure: FailureHook | None = None
    timeout: float | None = None

    def __attrs_post_init__(self) -> None:
        refuse_unrunnable(self.func)


#: What :func:`refuse_unrunnable` says of each kind of function a thread cannot run to its end.
_UNRUNNABLE = (
    (inspect.iscoroutinefunction, "a coroutine function (async def)"),
    (inspect.isasyncgenfunction, "an async generator function"),
    (inspect.isgeneratorfunction, "a generator function"),
)


def refuse_unrunnable(func: object) -> None:
    """Refuse a handler whose call would not run its body: a coroutine function (``async def``),
    an async generator function or a generator function, also behind ``functools.partial``, a
    ``functools.wraps`` decorator (``__wrapped__``) or an object's ``__call__``.

    Raises:
        ValidationError (field ``handler``): naming the function and what it is.
    """
    candidates: list[object] = [func]
    try:
        unwrapped = inspect.unwrap(func)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a __wrapped__ cycle: judge the outer function alone
        unwrapped = func
    if unwrapped is not func:
        candidates.append(unwrapped)
    if not inspect.isroutine(func):  # an instance: judge its class's __call__
        candidates.append(inspect.getattr_static(type(func), "__call__", None))
    for candidate in candidates:
        for test, what in _UNRUNNABLE:
            if test(candidate):
                name = getattr(func, "__qualname__", None) or repr(func)
                raise ValidationError(
                    "handler",
                    f"{name} is {what}; handlers run on threads and must be plain functions (its body "
                    "would never run): wrap it, e.g. def handler(payload): asyncio.run(work(payload))",
                )


def takes_context(func: Callable[..., Any]) -> bool:
    """Whether ``func`` is called ``func(payload, ctx)`` (True) or ``func(payload)`` (False).

    Raises:
        ValidationError (field ``handler``): ``func`` cannot take a payload as its one positional
            argument, or requires more than two positional arguments, or keyword-only arguments
            without defaults.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ValidationError("handler", f"cannot read the signature of {func!r}: {exc}") from None
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in _POSITIONAL]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    var_positional = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    kw_required = [
        p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    ]
    name = getattr(func, "__qualname__", repr(func))
    if kw_required:
        raise ValidationError("handler", f"{name} has required keyword-only arguments {kw_required}; a handler takes (payload) or (payload, ctx)")
    if len(required) > 2:
        raise ValidationError("handler", f"{name} requires {len(required)} positional arguments; a handler takes (payload) or (payload, ctx)")
    if not positional and not var_positional:
        raise ValidationError("handler", f"{name} takes no positional argument; a handler takes (payload) or (payload, ctx)")
    return len(positional) >= 2 or var_positional


def make_spec(
    name: object,
    func: object,
    *,
    queue: object = None,
    max_attempts: object = None,
    on_failure: object = None,
    timeout: object = None,
) -> HandlerSpec:
    """Validate one registration and return its :class:`HandlerSpec`.

    Raises:
        ValidationError: naming ``job_type``, ``handler`` (not callable, a signature that is not
            ``(payload)`` or ``(payload, ctx)``, or a coroutine, async generator or generator
            function: :func:`refuse_unrunnable`), ``queue``, ``max_attempts``, ``on_failure`` or
            ``timeout`` (not a finite number of seconds > 0).
    """
    job_type = validate_job_type(name)
    if not callable(func):
        raise ValidationError("handler", f"must be callable, got {type(func).__name__}")
    refuse_unrunnable(func)
    context = takes_context(func)
    if queue is not None:
        queue = validate_queue(queue)
    if max_attempts is not None:
        max_attempts = validate_max_attempts(max_attempts)
    if on_failure is not None and not callable(on_failure):
        raise ValidationError("on_failure", f"must be callable as on_failure(job, exc), got {type(on_failure).__name__}")
    if timeout is not None:
        timeout = validate_seconds(timeout, "timeout", allow_zero=False)
    return HandlerSpec(
        name=job_type,
        func=func,
        takes_context=context,
        queue=queue,  # type: ignore[arg-type]
        max_attempts=max_attempts,  # type: ignore[arg-type]
        on_failure=on_failure,  # type: ignore[arg-type]
        timeout=timeout,  # type: ignore[arg-type]
    )


__all__ = ["FailureHook", "HandlerSpec", "make_spec", "refuse_unrunnable", "takes_context"]
