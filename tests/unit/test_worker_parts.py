"""The worker pool's parts on their own, on memory + FakeClock: one heartbeat pass, the acquirer's
room arithmetic, the runner seam (the acquirer feeding a runner that is not the thread runner), and
one pass of the timeout watchdog.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

import pytest
import tether
import tether.entrypoints.worker as worker_package
from tether.adapters.clock import FakeClock
from tether.adapters.log_limits import RateLimitedLog
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.job import Job
from tether.domain.validation import prepare_job
from tether.entrypoints.context import JobContext
from tether.entrypoints.worker import acquirer as acquirer_module
from tether.entrypoints.worker.acquirer import Acquirer
from tether.entrypoints.worker.completions import CompletionBatcher
from tether.entrypoints.worker.heartbeats import Beat, Heartbeats
from tether.entrypoints.worker.held import HeldJob, HeldJobs
from tether.entrypoints.worker.outcomes import Outcomes
from tether.entrypoints.worker.runner import Runner
from tether.entrypoints.worker.stats import Counts, WorkerStats
from tether.entrypoints.worker.timeouts import TIMEOUT_GRACE_SECONDS, TimeoutPass, Timeouts

from tests.conftest import wait_for


def leased(repo: InMemoryJobRepository, clock: FakeClock, n: int) -> list[Job]:
    for i in range(n):
        repo.enqueue(prepare_job("t", {"i": i}, now=clock.now()), now=clock.now())
    return repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=n)


def held_entry(repo: InMemoryJobRepository, clock: FakeClock, job: Job) -> HeldJob:
    return HeldJob(job, JobContext(job, repository=repo, clock=clock, lease_timeout=60, worker_id="w"))


class RecordingRunner(Runner):
    """A runner that only records what it was given (a stand-in for a second kind of runner)."""

    def __init__(self, slots: int, handler_seconds: float | None = None) -> None:
        self.slots = slots
        self.handler_seconds = handler_seconds
        self.taken: list[HeldJob] = []
        self.returned = 0

    def free_slots(self) -> int:
        return self.slots - (len(self.taken) - self.returned)

    def submit(self, entries: Sequence[HeldJob]) -> None:
        self.taken.extend(entries)

    def busy(self) -> bool:
        return len(self.taken) > self.returned

    def release_unstarted(self, release: Callable[[HeldJob], None]) -> None:  # pragma: no cover
        raise AssertionError("not used here")


def make_acquirer(
    repo: InMemoryJobRepository, clock: FakeClock, runner: Runner, *, prefetch: int = 0
) -> tuple[Acquirer, HeldJobs, list[Job]]:
    held = HeldJobs()
    released: list[Job] = []
    acquirer = Acquirer(
        held=held, runner=runner, completions=CompletionBatcher(repo, clock), repository=repo,
        dispatcher=PollingDispatcher(repo, clock, poll_interval=0.05), clock=clock, queues=None, worker_id="w",
        lease_timeout=60.0, max_wait=0.05, prefetch=prefetch, ratelog=RateLimitedLog(acquirer_module.logger),
        release_unstarted=released.append,
    )
    held.wake = acquirer.wake
    return acquirer, held, released


def test_the_package_re_exports_what_was_imported_from_the_worker_module() -> None:
    for name in ("WorkerPool", "WorkerStats", "default_worker_id", "ACQUIRE_BACKOFF", "LEASE_COALESCE_SECONDS",
                 "PREFETCH_EMA_WEIGHT", "PREFETCH_HORIZON", "RUN_POLL_SECONDS", "WRITE_RETRY_SECONDS",
                 "TIMEOUT_CHECK_SECONDS", "TIMEOUT_GRACE_SECONDS"):
        assert name in worker_package.__all__ and getattr(worker_package, name) is not None
    assert tether.WorkerPool is worker_package.WorkerPool
    assert worker_package.WorkerStats is WorkerStats


def test_one_heartbeat_pass_extends_every_held_lease_and_cancels_a_lost_one() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    jobs = leased(repo, clock, 3)
    held = HeldJobs()
    entries = [held_entry(repo, clock, job) for job in jobs]
    with held.lock:
        held.add(entries)
    entries[2].token = "not-the-lease"  # its lease is someone else's now
    counts = Counts(held.lock)
    beats = Heartbeats(
        held=held, counts=counts, repository=repo, clock=clock, interval=1.0, lease_timeout=60.0,
        worker_id="w", ratelog=RateLimitedLog(acquirer_module.logger),
    )
    clock.advance(30)
    assert beats.beat_once() == Beat(extended=2, lost=1, failed=0)
    for entry in entries[:2]:
        assert entry.ctx.job.lease_expires_at == clock.now() + timedelta(seconds=60)
        assert not entry.ctx.cancelled
    assert entries[2].ctx.cancelled and entries[2].ctx.lease_lost and entries[2].lost_counted
    assert counts.snapshot(reaped=0).lease_lost == 1


def test_room_is_free_slots_plus_prefetch_within_the_cap_less_reservations(monkeypatch: pytest.MonkeyPatch) -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    runner = RecordingRunner(slots=4)
    acquirer, held, _ = make_acquirer(repo, clock, runner, prefetch=3)
    with held.lock:
        assert acquirer.free() == 4  # no handler returned yet: nothing leased ahead
        runner.handler_seconds = 0.001
        assert acquirer.free() == 4 + 3  # quick handlers: the whole prefetch
        monkeypatch.setattr(acquirer_module, "PREFETCH_HORIZON", 0.0)
        assert acquirer.free() == 4  # slow ones (beyond the horizon): none ahead
        held.in_flight = 7  # e.g. completions still being written: capped at 2 x slots
        assert acquirer.free() == 1


def test_the_acquirer_leases_for_any_runner_and_holds_what_it_hands_over() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    for i in range(5):
        repo.enqueue(prepare_job("t", {"i": i}, now=clock.now()), now=clock.now())
    runner = RecordingRunner(slots=2)
    acquirer, held, released = make_acquirer(repo, clock, runner)
    acquirer.start()
    try:
        wait_for(lambda: len(runner.taken) == 2, what="the runner's two slots filled")
        with held.lock:
            assert held.in_flight == 2 and set(held.by_id) == {e.job.id for e in runner.taken}
        assert [e.job.payload["i"] for e in runner.taken] == [0, 1]  # lease order
        finished = runner.taken[0]
        with held.lock:  # a runner's job leaves its slot and the book
            runner.returned += 1
            held.drop(finished)
            held.wake()
        wait_for(lambda: len(runner.taken) == 3, what="the freed slot refilled")
    finally:
        held.stopping.set()
        acquirer.interrupt()
        acquirer.join(5.0)
    assert not released


class RecordingSlots:
    """Stands in for the thread runner: records the handlers that passed their limit."""

    def __init__(self) -> None:
        self.timed_out: list[HeldJob] = []
        self.added = 0

    def time_out(self, entry: HeldJob) -> bool:
        self.timed_out.append(entry)
        return True

    def add_thread(self) -> None:
        self.added += 1


def test_one_timeout_pass_cancels_at_the_limit_and_writes_the_failure_at_the_hard_bound() -> None:
    repo, clock = InMemoryJobRepository(), FakeClock()
    jobs = leased(repo, clock, 3)
    held = HeldJobs()
    entries = [held_entry(repo, clock, job) for job in jobs]
    with held.lock:
        held.add(entries)
    counts = Counts(held.lock)
    completions = CompletionBatcher(repo, clock)
    outcomes = Outcomes(held=held, counts=counts, completions=completions, dispatcher=PollingDispatcher(repo, clock),
                        clock=clock, worker_id="w", ratelog=RateLimitedLog(acquirer_module.logger))
    watchdog = Timeouts(held=held, counts=counts, outcomes=outcomes, handlers={}, repository=repo, clock=clock,
                        retry_policy=tether.RetryPolicy(), worker_id="w")
    slots = watchdog.slots = RecordingSlots()
    try:
        watchdog.stop()  # no watchdog thread: the test makes the passes itself
        for entry in entries:
            watchdog.watch(entry, 10.0)
        start = entries[0].deadline - 10.0
        hard = 10.0 + 2 * TIMEOUT_GRACE_SECONDS
        assert outcomes.begin_finish(entries[1])  # returned in time: its thread writes its outcome
        assert watchdog.check_once(start + 9.9) == TimeoutPass(watched=2)
        assert watchdog.check_once(start + 10.1) == TimeoutPass(timed_out=2, watched=2)
        assert slots.timed_out == [entries[0], entries[2]] and slots.added == 2
        assert entries[0].ctx.cancelled and entries[0].timed_out and not entries[1].ctx.cancelled
        assert not outcomes.begin_finish(entries[2])  # returned late: only the timeout may be written
        assert watchdog.settle(entries[2], drop=False)  # ... by its thread, which then drops it itself
        assert repo.get(jobs[2].id).last_error == "JobTimeout: timed out after 10 s"
        assert watchdog.check_once(start + hard - 0.1) == TimeoutPass(watched=1)
        assert repo.get(jobs[0].id).status is tether.JobStatus.RUNNING  # its lease held until the hard bound
        assert watchdog.check_once(start + hard + 0.1) == TimeoutPass(expired=1, watched=0)
        failed = repo.get(jobs[0].id)
        assert (failed.status, failed.attempts, failed.last_error) == (
            tether.JobStatus.RETRYING, 1, "JobTimeout: timed out after 10 s"
        )
        assert entries[0].settled and not watchdog.settle(entries[0], drop=False)  # the thread finds it written
        with held.lock:
            assert set(held.by_id) == {jobs[1].id, jobs[2].id}  # the watchdog stopped holding job 0 only
        assert counts.snapshot(reaped=0).timed_out == 2 and counts.snapshot(reaped=0).failed == 2
    finally:
        completions.close()
