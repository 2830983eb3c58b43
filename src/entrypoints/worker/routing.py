"""One :class:`~tether.entrypoints.worker.runner.Runner` over a pool's two runners: each job goes to
the runner of its handler's kind (:class:`RunnerByKind`).

``async def`` handlers run on the pool's event loop
(:class:`~tether.entrypoints.worker.async_runner.AsyncRunner`), everything else on its threads
(:class:`~tether.entrypoints.worker.runner.ThreadRunner`: plain handlers, and jobs this process has
no handler for, which are handed back).  The acquirer sees the sum of the two: its free slots are
the free threads plus the free async slots.  The lease itself does not filter by job type, so a
lease may bring more jobs of one kind than that kind has free slots; they wait for a slot, held
and heartbeated like prefetched jobs, and the held jobs stay capped by the acquirer as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.worker.async_runner import AsyncRunner
from tether.entrypoints.worker.held import HeldJob
from tether.entrypoints.worker.runner import Runner, ThreadRunner


class RunnerByKind(Runner):
    """The pool's runner when it has ``async def`` handlers: routes each job by its handler's kind.

    Args:
        threads: the pool's handler threads.
        loop: the pool's event loop runner.
        handlers: job type -> :class:`HandlerSpec` (read at each job).
    """

    def __init__(self, threads: ThreadRunner, loop: AsyncRunner, handlers: Mapping[str, HandlerSpec]) -> None:
        self.threads = threads
        self.loop = loop
        self._handlers = handlers
        self.slots = threads.slots + loop.slots

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
            spec = self._handlers.get(entry.job.job_type)
            (to_loop if spec is not None and spec.is_async else to_threads).append(entry)
        if to_loop:
            self.loop.submit(to_loop)
        if to_threads:
            self.threads.submit(to_threads)

    def busy(self) -> bool:
        return self.threads.busy() or self.loop.busy()

    def release_unstarted(self, release: Callable[[HeldJob], None]) -> None:
        self.loop.release_unstarted(release)
        self.threads.release_unstarted(release)


__all__ = ["RunnerByKind"]
