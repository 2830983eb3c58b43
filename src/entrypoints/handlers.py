"""Handler registrations: which function runs a job type, with which defaults and failure hook.

A handler is ``handler(payload)`` or ``handler(payload, ctx)``; which one is decided once, at
registration, from :func:`inspect.signature`: a function that can take two positional arguments
(or ``*args``) gets the :class:`~tether.entrypoints.context.JobContext` as its second argument.

A handler may be a coroutine function (``async def``): the worker pool runs it on its event loop
(:mod:`tether.entrypoints.worker.async_runner`), up to ``async_concurrency`` at once.  Generator
and async generator functions are refused: their body would never run.  An ``on_failure`` hook
may be a coroutine function too.
"""

from __future__ import annotations

import functools
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
        is_async: True when ``func`` is a coroutine function (``async def``).
    """

    name: str
    func: Callable[..., Any]
    takes_context: bool
    queue: str | None = None
    max_attempts: int | None = None
    on_failure: FailureHook | None = None
    timeout: float | None = None
    is_async: bool = False


def is_coroutine_handler(func: Callable[..., Any]) -> bool:
    """Whether ``func`` is an ``async def`` handler (a coroutine function, or a callable object
    whose ``__call__`` is one).

    Raises:
        ValidationError (field ``handler``): ``func`` is a generator or async generator function,
            whose body a call would never run.
    """
    name = getattr(func, "__qualname__", None) or repr(func)
    targets = _call_targets(func)
    for target in targets:
        if inspect.isasyncgenfunction(target) or inspect.isgeneratorfunction(target):
            kind = "an async generator" if inspect.isasyncgenfunction(target) else "a generator"
            raise ValidationError("handler", f"{name} is {kind} function; a handler is a plain or async def function")
    return any(inspect.iscoroutinefunction(target) for target in targets)


def _call_targets(func: object) -> list[object]:
    """What a call of ``func`` runs: itself, the functions behind ``functools.partial`` and
    ``functools.wraps`` (``__wrapped__``), and a callable object's ``__call__``."""
    targets: list[object] = []
    current: object = func
    for _ in range(16):  # a bound on partial/wraps chains (and on a __wrapped__ cycle)
        targets.append(current)
        if isinstance(current, functools.partial):
            current = current.func
        elif getattr(current, "__wrapped__", None) is not None:
            current = current.__wrapped__  # type: ignore[attr-defined]
        elif not inspect.isroutine(current) and not isinstance(current, type):
            call = inspect.getattr_static(type(current), "__call__", None)
            if call is None or call in targets:
                break
            current = call
        else:
            break
    return targets


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
        ValidationError: naming ``job_type``, ``handler``, ``queue``, ``max_attempts``,
            ``on_failure`` or ``timeout`` (not a finite number of seconds > 0).
    """
    job_type = validate_job_type(name)
    if not callable(func):
        raise ValidationError("handler", f"must be callable, got {type(func).__name__}")
    context = takes_context(func)
    is_async = is_coroutine_handler(func)
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
        is_async=is_async,
    )


__all__ = ["FailureHook", "HandlerSpec", "is_coroutine_handler", "make_spec", "takes_context"]
