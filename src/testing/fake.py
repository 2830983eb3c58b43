"""An in-process :class:`tether.Tether` for unit tests: no database, no broker, a clock you move.

:func:`fake_app` wires the in-memory repository, a :class:`~tether.adapters.clock.FakeClock` and a
polling dispatcher into the very :class:`~tether.entrypoints.service.Tether` class production code
uses, so the code under test enqueues, validates and reads exactly as it would against PostgreSQL::

    from tether.testing import fake_app, drain, assert_enqueued

    app = fake_app()
    place_order(app, order)                      # the code under test
    assert_enqueued(app, "emails.order_confirmation", {"order_id": 7}, count=1)
    drain(app)                                   # run the due jobs inline
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import ValidationError
from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.service import Tether

#: Idle poll interval of the fake app's dispatcher, in seconds: short, so a real worker pool
#: started on a fake app (``app.worker().start()``) notices jobs made due by ``clock.advance``.
FAKE_POLL_INTERVAL = 0.05


def fake_app(
    clock: FakeClock | None = None,
    *,
    handlers: Mapping[str, HandlerSpec] | Iterable[HandlerSpec] | None = None,
    **tether_options: Any,
) -> Tether:
    """A :class:`~tether.entrypoints.service.Tether` on an empty in-memory store and a fake clock.

    Args:
        clock: the :class:`FakeClock` the app reads; default a new one at 2026-01-01T00:00:00Z.
            It is ``app.clock`` either way.
        handlers: registrations to copy from another app (``other_app.handlers``) or a list of
            :class:`~tether.entrypoints.handlers.HandlerSpec`; more can be added with
            ``@app.handler`` as usual.
        **tether_options: passed to :class:`Tether` (``retry_policy``, ``max_payload_bytes``,
            ``default_queue``, ``default_max_attempts``).

    Returns:
        the app; ``app.repository`` is an :class:`~tether.adapters.memory.InMemoryJobRepository`,
        ``app.dispatcher`` a :class:`~tether.adapters.polling.PollingDispatcher` polling every
        :data:`FAKE_POLL_INTERVAL` seconds when idle.

    Raises:
        ValidationError: ``clock`` is not a FakeClock, a handler entry is not a HandlerSpec, or a
            bad Tether option (the field is named).
        TypeError: an unknown keyword option.
    """
    if clock is None:
        clock = FakeClock()
    elif not isinstance(clock, FakeClock):
        raise ValidationError("clock", f"must be a tether.adapters.clock.FakeClock, got {type(clock).__name__}")
    repository = InMemoryJobRepository()
    dispatcher = PollingDispatcher(repository, clock, poll_interval=FAKE_POLL_INTERVAL, min_poll_interval=0.005)
    app = Tether(repository, dispatcher, clock, **tether_options)
    if handlers is not None:
        specs = list(handlers.values()) if isinstance(handlers, Mapping) else list(handlers)
        for i, spec in enumerate(specs):
            if not isinstance(spec, HandlerSpec):
                raise ValidationError(f"handlers[{i}]", f"must be a HandlerSpec (from app.handlers), got {type(spec).__name__}")
            app.register(spec.name, spec.func, queue=spec.queue, max_attempts=spec.max_attempts, on_failure=spec.on_failure)
    return app


__all__ = ["FAKE_POLL_INTERVAL", "fake_app"]
