"""The seam through which a tracer watches ``enqueue``: :class:`SendObserver`.

:class:`~tether.entrypoints.service.Tether` has ``send_observer = None`` by default, and then
``enqueue`` makes no call here at all.  With one set (``tether.tracing.instrument(app)`` sets
OpenTelemetry's), each ``enqueue``/``enqueue_many`` runs its write inside
:meth:`SendObserver.send`: the observer may give each job headers (the trace context) before it
is stored, and learns the stored jobs afterwards.  An error of the write propagates out of the
block, so the observer sees it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from tether.domain.job import EnqueueResult, NewJob


class Sending(Protocol):
    """One enqueue under way, as :meth:`SendObserver.send` hands it out.

    Attributes:
        jobs: the jobs to store, in the order given (each maybe with headers added).
    """

    jobs: Sequence[NewJob]

    def stored(self, results: Sequence[EnqueueResult]) -> None:
        """The write returned these results (input order)."""
        ...


class SendObserver(Protocol):
    """Watches each enqueue (see the module docstring)."""

    def send(self, new_jobs: Sequence[NewJob]) -> AbstractContextManager[Sending]:
        """The block in which ``new_jobs`` (validated, one or more) are written."""
        ...


__all__ = ["SendObserver", "Sending"]
