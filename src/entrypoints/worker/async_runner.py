"""Running ``async def`` handlers on an event loop owned by the pool: :class:`AsyncRunner`.

One thread, ``tether-async``, runs the loop; up to ``async_concurrency`` handler coroutines run on
it at once, each as its own task, beside the pool's handler threads.  Everything else a job goes
through is the pool's, unchanged: the lease (the acquirer), the heartbeats (the heartbeat thread
extends every held lease, so a busy loop never costs a lease), the batched completions and the
fence of every write (:class:`~tether.entrypoints.worker.outcomes.Outcomes`).

- **Success** is written on the loop: the completion only goes to the batcher.  Every other
  outcome (a failure, a snooze, a timeout, a release) is written on one of a few
  ``tether-async-write`` threads, so no database round trip ever runs on the loop; the job's slot
  stays taken until its write returned, as on a thread.  An async ``on_failure`` hook runs on the
  loop.
- **Cancellation is a real stop**: when the job's context is cancelled (the drain deadline at
  shutdown, the handler's time limit, an operator's cancel seen on a heartbeat, a lost lease), the
  task is cancelled and the handler sees :class:`asyncio.CancelledError` at its next ``await``.
  The runner remembers that it cancelled the task, so it tells its own cancellation apart from a
  ``CancelledError`` the handler raised itself (which, like any exception, fails the attempt).
  After a time limit the attempt fails with :class:`~tether.domain.errors.JobTimeout`, whatever
  the handler did after it; after an operator's cancel the job ends ``cancelled``; a job released
  at shutdown or whose lease was lost gets nothing written.
- **Watched as on a thread**: each task runs in a context of its own (``contextvars``), in which
  the job's log scope is entered and the observers' ``job_started`` is called before the task
  starts and ``handler_returned`` once its outcome is decided (see :mod:`.observers`): a tracer's
  span is current in that coroutine only, however many run on the loop at once.
- **Nothing a handler raises stops the loop**: every exception, ``BaseException`` included
  (``SystemExit``, ``KeyboardInterrupt``), is caught in the task and is that job's failure.
- **A handler that blocks the loop** is found by the ``tether-async-watch`` thread: a ticker on the
  loop marks the time every :data:`LAG_CHECK_SECONDS`; when a mark is late by more than
  :data:`LOOP_LAG_WARNING` seconds while a handler's task is the one running, that task is named
  in a warning (job type and id), at most once a minute per job type.  (A late mark with no task
  running means the process is short of CPU, not a blocking handler: logged at DEBUG only.)
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tether.adapters.log_limits import RateLimitedLog
from tether.domain.errors import JobTimeout
from tether.domain.retry import RetryPolicy
from tether.entrypoints.execution import Execution, Outcome, execute_job, finish_job, record_failure, run_to_end
from tether.entrypoints.handlers import HandlerSpec
from tether.entrypoints.job_logs import enter_job, leave_job
from tether.entrypoints.worker.completions import CompletionBatcher
from tether.entrypoints.worker.held import HeldJob, HeldJobs
from tether.entrypoints.worker.observers import Observers
from tether.entrypoints.worker.outcomes import Outcomes
from tether.entrypoints.worker.runner import PREFETCH_EMA_WEIGHT, Runner
from tether.entrypoints.worker.stats import Counts
from tether.ports.clock import Clock
from tether.ports.repository import JobRepository

logger = logging.getLogger("tether.worker")

#: Seconds between two marks of the loop's ticker (the lag watch compares against them).
LAG_CHECK_SECONDS = 0.1
#: Seconds the loop may be held by one step of a handler before a warning names the handler.
LOOP_LAG_WARNING = 0.25
#: Threads writing the outcomes other than completions (failures, snoozes, timeouts, releases).
WRITE_THREADS = 4
#: Seconds a failure write waits for an async ``on_failure`` hook to end on the loop.
HOOK_WAIT_SECONDS = 60.0


class _Run:
    """One job on the loop: its entry, handler, task, and why the runner cancelled it (if it did)."""

    __slots__ = (
        "cancelled_by_pool", "context", "entry", "observed", "on_cancel", "spec", "started", "task", "timed_out", "timer",
    )

    def __init__(self, entry: HeldJob, spec: HandlerSpec, context: contextvars.Context) -> None:
        self.entry = entry
        self.spec = spec
        #: the task's context: the job's log scope, and what observers made current (a span)
        self.context = context
        self.observed: object = None  # what the observers' job_started returned
        self.task: asyncio.Task[BaseException | None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.on_cancel: Callable[[], None] | None = None
        self.cancelled_by_pool = False
        self.timed_out: float | None = None  # the limit that passed, in seconds
        self.started = time.monotonic()


class AsyncRunner(Runner):
    """Up to ``concurrency`` ``async def`` handlers at once on the pool's event loop (a :class:`Runner`).

    Args:
        held: the pool's held jobs.
        outcomes: how outcomes are written and recorded.
        completions: the pool's batcher (poked when the last busy handler returned).
        handlers: job type -> :class:`HandlerSpec` (read at each job).
        repository, clock, retry_policy: as for :func:`~tether.entrypoints.execution.execute_job`.
        concurrency: handlers running at once (``async_concurrency``, checked by the pool).
        worker_id: for logs and error texts.
        job_timeout: the limit of handlers registered without one, in seconds, or None.
        counts: the pool's counters (``timed_out``).
        ratelog: the pool's rate-limited log (loop-lag warnings).
        observer: told of each job as on a thread (see :mod:`.observers`), or None: no call.
    """

    def __init__(
        self,
        *,
        held: HeldJobs,
        outcomes: Outcomes,
        completions: CompletionBatcher,
        handlers: Mapping[str, HandlerSpec],
        repository: JobRepository,
        clock: Clock,
        retry_policy: RetryPolicy,
        concurrency: int,
        worker_id: str,
        counts: Counts,
        job_timeout: float | None = None,
        ratelog: RateLimitedLog | None = None,
        observer: Observers | None = None,
    ) -> None:
        self.slots = concurrency
        self.handler_seconds: float | None = None
        self._observer = observer
        self._held = held
        self._lock = held.lock
        self._outcomes = outcomes
        self._completions = completions
        self._handlers = handlers
        self._repository = repository
        self._clock = clock
        self._retry_policy = retry_policy
        self._worker_id = worker_id
        self._job_timeout = job_timeout
        self._counts = counts
        self._ratelog = ratelog if ratelog is not None else RateLimitedLog(logger)
        self._active = 0  # under the pool's lock: jobs handed over whose handler has not returned
        self._waiting: deque[HeldJob] = deque()  # handed over, not started (under _waiting_lock)
        self._waiting_lock = threading.Lock()
        self._running = 0  # on the loop: jobs started and not ended
        self._stopping = False  # on the loop: stop once nothing runs
        self._tick_at = time.monotonic()
        self._stop_watch = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._writers = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="tether-async-write")
        self._thread = threading.Thread(target=self._run_loop, name="tether-async", daemon=True)
        self._watch = threading.Thread(target=self._watch_lag, name="tether-async-watch", daemon=True)

    # -- Runner ------------------------------------------------------------------------------
    def free_slots(self) -> int:
        return self.slots - self._active

    def submit(self, entries: Sequence[HeldJob]) -> None:
        self._active += len(entries)
        with self._waiting_lock:
            self._waiting.extend(entries)
        self._loop.call_soon_threadsafe(self._pump)

    def busy(self) -> bool:
        return self._active > 0

    def release_unstarted(self, release: Callable[[HeldJob], None]) -> None:
        with self._waiting_lock:
            unstarted = list(self._waiting)
            self._waiting.clear()
        for entry in unstarted:
            release(entry)
            self._finish(entry)

    # -- the loop's thread -------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop's thread and the lag watch."""
        self._thread.start()
        self._watch.start()

    def stop(self) -> None:
        """Let the loop end once no handler runs on it (after the drain released what was left)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop_when_idle)

    def join(self, deadline: float) -> None:
        """Wait for the loop's thread until ``deadline`` (``time.monotonic()``); then stop the loop
        even with a handler that ignores its cancellation still on it (its job was released)."""
        self._thread.join(max(deadline - time.monotonic(), 0.0))
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(1.0)
        self._stop_watch.set()
        self._writers.shutdown(wait=False)

    def _run_loop(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        ticker = loop.create_task(self._tick(), name="tether-loop-ticker")
        try:
            loop.run_forever()
        finally:
            ticker.cancel()
            left = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=1.0))
            loop.close()

    def _stop_when_idle(self) -> None:
        self._stopping = True
        if self._running == 0:
            self._loop.stop()

    async def _tick(self) -> None:
        while True:
            self._tick_at = time.monotonic()
            await asyncio.sleep(LAG_CHECK_SECONDS)

    def _watch_lag(self) -> None:
        reported_at = None  # the tick of the stall reported already
        while not self._stop_watch.wait(LAG_CHECK_SECONDS):
            tick = self._tick_at
            lag = time.monotonic() - tick - LAG_CHECK_SECONDS
            if lag <= LOOP_LAG_WARNING or tick == reported_at or self._loop.is_closed():
                continue
            reported_at = tick
            task = asyncio.current_task(self._loop)
            if task is None or task.get_name() == "tether-loop-ticker":
                # The loop is between tasks: the process is short of CPU or of the GIL, not blocked by a handler.
                logger.debug("worker %s: the event loop is %.2f s late, in no handler", self._worker_id, lag)
                continue
            name = task.get_name()
            self._ratelog(
                f"loop-lag:{name.split(' ')[0]}", logging.WARNING,
                "worker %s: the event loop of async handlers is blocked for %.2f s so far by %s; an async handler "
                "must not block (await, or move blocking work to asyncio.to_thread)", self._worker_id, lag, name,
            )

    # -- jobs, on the loop -------------------------------------------------------------------
    def _pump(self) -> None:
        while self._running < self.slots:
            with self._waiting_lock:
                if not self._waiting:
                    return
                entry = self._waiting.popleft()
            self._running += 1
            self._launch(entry)

    def _launch(self, entry: HeldJob) -> None:
        if entry.released:  # released at shutdown before it started
            self._ended(entry, None)
            return
        spec = self._handlers.get(entry.job.job_type)
        if spec is None or not spec.is_async or entry.ctx.cancel_requested:
            # Not a coroutine to run here (its handler went, or its cancel came before it
            # started): the step a thread would take, on a write thread.
            future = self._loop.run_in_executor(self._writers, self._execute, entry)
            future.add_done_callback(lambda _: self._ended(entry, None))
            return
        # The task runs in a context of its own: its log records are about this job, and what the
        # observers make current (a tracer's span) is current in the coroutine and in nothing else.
        context = contextvars.copy_context()
        context.run(enter_job, entry.job, self._worker_id)
        run = _Run(entry, spec, context)
        observer = self._observer
        if observer is not None:
            run.observed = context.run(observer.job_started, entry.job, self._worker_id)
        entry.started = run.started = time.monotonic()  # what observers measure the handler's duration from
        run.task = self._loop.create_task(self._call(run), name=f"{spec.name} (job {entry.job.id})", context=context)
        run.task.add_done_callback(lambda task: self._task_done(run, task))
        timeout = spec.timeout if spec.timeout is not None else self._job_timeout
        if timeout is not None:
            run.timer = self._loop.call_later(timeout, self._time_out, run, timeout)
        loop = self._loop

        def on_cancel() -> None:  # from whichever thread cancels the context
            loop.call_soon_threadsafe(self._cancel, run)

        run.on_cancel = on_cancel
        entry.ctx.add_cancel_callback(on_cancel)

    async def _call(self, run: _Run) -> BaseException | None:
        """Run the handler; whatever it raises is returned, never raised, so it cannot reach the loop."""
        try:
            spec, entry = run.spec, run.entry
            if spec.takes_context:
                await spec.func(entry.job.payload, entry.ctx)
            else:
                await spec.func(entry.job.payload)
        except BaseException as exc:  # noqa: BLE001 - any exception is the job's failure, never the loop's
            return exc
        return None

    def _cancel(self, run: _Run) -> None:
        if run.task is not None and not run.task.done():
            run.cancelled_by_pool = True
            run.task.cancel()

    def _time_out(self, run: _Run, seconds: float) -> None:
        if run.task is None or run.task.done():
            return
        run.timed_out = seconds
        self._counts.count("timed_out")
        logger.warning("worker %s: job %s (%s) passed its %g s limit; its task is cancelled", self._worker_id,
                       run.entry.job.id, run.spec.name, seconds)
        run.entry.ctx.cancel()  # cancels the task through the context's callback

    def _task_done(self, run: _Run, task: asyncio.Task[BaseException | None]) -> None:
        if run.timer is not None:
            run.timer.cancel()
        if run.on_cancel is not None:
            run.entry.ctx.remove_cancel_callback(run.on_cancel)
        raised = asyncio.CancelledError() if task.cancelled() else task.result()
        seconds = time.monotonic() - run.started
        mean = self.handler_seconds
        self.handler_seconds = seconds if mean is None else mean + PREFETCH_EMA_WEIGHT * (seconds - mean)
        if raised is None and run.timed_out is None and not run.cancelled_by_pool:
            try:  # a completion only goes to the batcher: no round trip on the loop
                run.context.run(self._record, run, raised)
            finally:
                self._ended(run.entry, None)
            return
        future = self._loop.run_in_executor(self._writers, run.context.run, self._record, run, raised)
        future.add_done_callback(lambda _: self._ended(run.entry, None))

    def _ended(self, entry: HeldJob, _: object) -> None:
        """The job's handler returned and its outcome was written or handed to the batcher."""
        self._running -= 1
        if entry.deferred:  # the slot is free; the job stays held until its completion is written
            with self._lock:
                self._active -= 1
                all_idle = self._active == 0
                self._held.wake()
            if all_idle:
                self._completions.poke()
        else:
            self._finish(entry)
        if self._stopping and self._running == 0:
            self._loop.stop()
            return
        self._pump()

    # -- outcomes (on the loop for a completion, else on a write thread) ----------------------
    def _record(self, run: _Run, raised: BaseException | None) -> None:
        """In the task's context (:attr:`_Run.context`), once the task is done: decide and write
        the outcome, tell the observers the handler returned (as a thread does after
        ``execute_job``), then record it."""
        entry = run.entry
        try:
            result: Execution | None = None
            try:
                result = self._outcome(run, raised)
            finally:
                if self._observer is not None:
                    self._observer.handler_returned(entry.job, run.observed, result)
            if result is not None:
                self._outcomes.record(entry, result)
        except BaseException:  # one job never breaks the runner
            logger.exception("worker %s: unexpected error while writing the outcome of job %s", self._worker_id,
                             entry.job.id)

    def _outcome(self, run: _Run, raised: BaseException | None) -> Execution | None:
        entry = run.entry
        common: dict[str, Any] = {
            "repository": self._repository, "clock": self._clock, "retry_policy": self._retry_policy,
            "writer": self._outcomes.writer(entry), "worker_id": self._worker_id, "run_coroutine": self._on_loop,
        }
        if run.timed_out is not None:  # whatever the handler did after its limit
            if not common["writer"].begin_finish():
                return Execution(entry.job, Outcome.NOT_RECORDED, exception=JobTimeout(run.timed_out))
            return record_failure(entry.job, entry.ctx, run.spec, JobTimeout(run.timed_out), **common)
        return finish_job(entry.job, entry.ctx, run.spec, raised, **common)

    def _execute(self, entry: HeldJob) -> None:
        """On a write thread: the step a handler thread takes (``ThreadRunner._process``), for a
        job that is no coroutine to run here."""
        scope = enter_job(entry.job, self._worker_id)
        try:
            observer = self._observer
            state = None if observer is None else observer.job_started(entry.job, self._worker_id)
            entry.started = time.monotonic()
            returned: Execution | None = None
            try:
                result = returned = execute_job(
                    entry.job, entry.ctx, handlers=self._handlers, repository=self._repository, clock=self._clock,
                    retry_policy=self._retry_policy, writer=self._outcomes.writer(entry), worker_id=self._worker_id,
                    run_coroutine=self._on_loop,
                )
            finally:
                if observer is not None:
                    observer.handler_returned(entry.job, state, returned)
            self._outcomes.record(entry, result)
        except BaseException:  # one job never breaks the runner
            logger.exception("worker %s: unexpected error while processing job %s", self._worker_id, entry.job.id)
        finally:
            leave_job(scope)

    def _on_loop(self, awaitable: Awaitable[Any]) -> Any:
        """From a write thread: run an async hook (or handler) on the pool's loop and wait for it."""

        async def wait() -> Any:
            return await awaitable

        if self._loop.is_closed() or not self._thread.is_alive():
            return run_to_end(awaitable)
        return asyncio.run_coroutine_threadsafe(wait(), self._loop).result(HOOK_WAIT_SECONDS)

    def _finish(self, entry: HeldJob) -> None:
        """The job is done with (outcome written, given up, or not to be written): its slot is
        free and it is no longer held."""
        with self._lock:
            self._held.drop(entry)
            self._active -= 1
            all_idle = self._active == 0
            self._held.wake()
        if all_idle:
            self._completions.poke()


__all__ = ["HOOK_WAIT_SECONDS", "LAG_CHECK_SECONDS", "LOOP_LAG_WARNING", "WRITE_THREADS", "AsyncRunner"]
