"""The worker pool's completion batcher: the successes of several handler threads in one write.

A handler thread whose job returned calls :meth:`CompletionBatcher.complete` and blocks; one
flusher thread takes every completion waiting at that moment (up to ``max_batch``) and writes
them with a single :meth:`~tether.ports.repository.JobRepository.complete_many` call (one round
trip on PostgreSQL).  While a flush is on the wire the next completions pile up, so the batch
size follows the load by itself: one job alone is written at once, thousands per second go out
in batches, and no timer ever holds a completion back.

What each caller still gets (issue 3, "fenced completion in batches"):

- every item is its own compare-and-set on (id, ``running``, lease token) inside ``complete_many``;
- the caller learns *its own* outcome: the completed :class:`Job`, or :class:`LeaseLost` raised
  in its thread when its token no longer held the job (the other items are unaffected);
- :meth:`complete` returns only after the write returned, so a job counts as finished only once
  its completion is stored;
- an error of the whole call (``StorageUnavailable`` after the repository's own retries, or a bug)
  is raised in every caller of that batch, which retries or gives up under its own rules exactly
  as it would for a single ``complete``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tether.domain.errors import LeaseLost
from tether.domain.job import Job
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")

#: Most completions written by one ``complete_many`` call.
DEFAULT_MAX_BATCH = 100


class _Pending:
    __slots__ = ("job_id", "token", "done", "job", "error")

    def __init__(self, job_id: int, token: str) -> None:
        self.job_id = job_id
        self.token = token
        self.done = threading.Event()
        self.job: Job | None = None
        self.error: BaseException | None = None


class CompletionBatcher:
    """Collects completions from handler threads and flushes them in batches on one thread.

    Args:
        repository: where completions are written (``complete_many``).
        clock: ``now`` of each flush (every item of a batch gets the same ``finished_at``).
        max_batch: most items per ``complete_many`` call (>= 1).
        name: the flusher thread's name.

    Call :meth:`start` before use and :meth:`close` at the end; after :meth:`close`,
    :meth:`complete` writes directly (one ``complete`` call in the caller's thread).
    """

    def __init__(
        self, repository: JobRepository, clock: Clock, *, max_batch: int = DEFAULT_MAX_BATCH, name: str = "tether-complete"
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._repository = repository
        self._clock = clock
        self._max_batch = max_batch
        self._name = name
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        many = getattr(repository, "complete_many", None)
        self._complete_many: Callable[..., list[Job | LeaseLost]] = many if many is not None else self._one_by_one
        #: (flushes, items) written so far: items / flushes is the mean batch size.
        self.flushes = 0
        self.items = 0

    def _one_by_one(self, items: list[tuple[int, str]], *, now: object) -> list[Job | LeaseLost]:
        # A repository written against the port before complete_many existed.
        results: list[Job | LeaseLost] = []
        for job_id, token in items:
            try:
                results.append(self._repository.complete(job_id, token, now=now))  # type: ignore[arg-type]
            except LeaseLost as lost:
                results.append(lost)
        return results

    def start(self) -> None:
        """Start the flusher thread (a daemon)."""
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def complete(self, job_id: int, token: str) -> Job:
        """Write this completion with the next batch and wait for it.

        Returns:
            the job as completed.

        Raises:
            LeaseLost: ``token`` no longer holds the job; nothing was written for it.
            StorageUnavailable: the batch could not be written (the caller decides about retries).
        """
        with self._cond:
            if self._closed:
                return self._repository.complete(job_id, token, now=self._clock.now())
            pending = _Pending(job_id, token)
            self._pending.append(pending)
            if len(self._pending) == 1:
                self._cond.notify()
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.job is not None
        return pending.job

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is waiting, stop the flusher thread (waiting up to ``timeout`` s).  Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
            self._flush(batch)

    def _flush(self, batch: list[_Pending]) -> None:
        try:
            results = self._complete_many([(p.job_id, p.token) for p in batch], now=self._clock.now())
            if len(results) != len(batch):  # pragma: no cover - an adapter bug; never guess who landed
                raise RuntimeError(f"complete_many answered {len(results)} results for {len(batch)} items")
        except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets the error
            for p in batch:
                p.error = exc
                p.done.set()
            return
        self.flushes += 1
        self.items += len(batch)
        for p, result in zip(batch, results):
            if isinstance(result, LeaseLost):
                p.error = result
            else:
                p.job = result
            p.done.set()


__all__ = ["DEFAULT_MAX_BATCH", "CompletionBatcher"]
