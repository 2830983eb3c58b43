"""One :class:`~tether.entrypoints.worker.runner.Runner` over a pool's two runners: each job goes to
the runner of its handler's kind (:class:`RunnerByKind`).

``async def`` handlers run on the pool's event loop
(:class:`~tether.entrypoints.worker.async_runner.AsyncRunner`), everything else on its threads
(:class:`~tether.entrypoints.worker.runner.ThreadRunner`: plain handlers, and jobs this process has
no handler for, which are handed back).  The acquirer sees the sum of the two: its free slots are
the free threads plus the free async slots.  With a dispatcher that leases by job type, the
acquirer asks each kind's job types (:meth:`RunnerByKind.job_types`) for that kind's room, so
the pool never holds more jobs of a kind than that kind has slots (see
:class:`~tether.entrypoints.worker.acquirer.Acquirer`); with one that does not (Redis Streams), a
lease may bring more jobs of one kind than that kind has free slots, and they wait for a slot,
held and heartbeated like prefetched jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.worker.async_runner import AsyncRunner
from tether.entrypoints.worker.held import HeldJob, HeldJobsByKind
from tether.entrypoints.worker.runner import Runner, ThreadRunner


class RunnerByKind(Runner):
    """The pool's runner when it has ``async def`` handlers: routes each job by its handler's kind.

    Args:
        threads: the pool's handler threads.
        loop: the pool's event loop runner.
        handlers: job type -> :class:`HandlerSpec` (read at each job).
        held: the pool's held jobs, counted by kind here as they are handed over (None: not counted).
    """

    def __init__(
        self, threads: ThreadRunner, loop: AsyncRunner, handlers: Mapping[str, HandlerSpec],
        held: HeldJobsByKind | None = None,
    ) -> None:
        self.threads = threads
        self.loop = loop
        self._handlers = handlers
        self._held = held
        self.slots = threads.slots + loop.slots
        self._types: tuple[int, list[str], list[str]] = (-1, [], [])

    def job_types(self) -> tuple[list[str], list[str]]:
        """The job types of the threads' handlers and of the loop's (``async def``), each sorted;
        read again whenever the number of handlers changed (later registrations count)."""
        count, threads, loop = self._types
        if count != len(self._handlers):
            threads, loop = [], []
            for job_type, spec in list(self._handlers.items()):
                (loop if spec.is_async else threads).append(job_type)
            threads.sort()
            loop.sort()
            self._types = (len(self._handlers), threads, loop)
        return threads, loop

    def runs_on_loop(self, job_type: str) -> bool:
        """True when a job of ``job_type`` goes to the loop (its handler is ``async def``)."""
        spec = self._handlers.get(job_type)
        return spec is not None and spec.is_async

    @property
    def handler_seconds(self) -> float | None:  # type: ignore[override]
        """The recent mean handler time of the loop's handlers, else of the threads' (read
        often, under the pool's lock: it only steers prefetching)."""
        seconds = self.loop.handler_seconds
        return seconds if seconds is not None else self.threads.handler_seconds

    def free_slots(self) -> int:
        return self.threads.free_slots() + self.loop.free_slots()

    def submit(self, entries: Sequence[HeldJob]) -> None:
        to_loop: list[HeldJob] = []
        to_threads: list[HeldJob] = []
        for entry in entries:
            (to_loop if self.runs_on_loop(entry.job.job_type) else to_threads).append(entry)
        if to_loop:
            for entry in to_loop:
                entry.on_loop = True
            if self._held is not None:
                self._held.on_loop += len(to_loop)
            self.loop.submit(to_loop)
        if to_threads:
            self.threads.submit(to_threads)

    def busy(self) -> bool:
        return self.threads.busy() or self.loop.busy()

    def release_unstarted(self, release: Callable[[HeldJob], None]) -> None:
        self.loop.release_unstarted(release)
        self.threads.release_unstarted(release)


__all__ = ["RunnerByKind"]
