"""Contract part: the attempt history every outcome write appends to (``Job.history``).

The rules (:mod:`tether.domain.history`): each write that ends an attempt (complete, the batch
completions, fail, dead-letter, release, snooze, the reaper) appends one entry — attempt number,
worker, lease start, end, outcome, error — in the same write; a heartbeat, an operator's cancel,
a manual retry and a refused write append nothing; the newest
:data:`~tether.domain.history.HISTORY_LIMIT` entries are kept, each error cut to
:data:`~tether.domain.history.HISTORY_ERROR_CHARS` characters; no lease token appears in it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from tether.adapters.clock import FakeClock
from tether.domain import transitions
from tether.domain.errors import LeaseLost
from tether.domain.history import HISTORY_ERROR_CHARS, HISTORY_LIMIT, Attempt, AttemptOutcome, attempt_error
from tether.domain.job import Job, JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport

#: The error of a time limit's failure, as a worker writes it.
TIMEOUT = "JobTimeout: timed out after 30 s"

#: Each holder write as ``write(repository, job, token, now)``, with the outcome its entry records
#: (on a job with attempts left) and its error.
WRITES: dict[str, tuple[Callable[[JobRepository, Job, str, datetime], Any], AttemptOutcome, str | None]] = {
    "complete": (lambda r, j, t, now: r.complete(j.id, t, now=now), AttemptOutcome.COMPLETED, None),
    "complete_many": (lambda r, j, t, now: r.complete_many([(j.id, t)], now=now)[0], AttemptOutcome.COMPLETED, None),
    "complete_and_lease": (
        lambda r, j, t, now: r.complete_and_lease(
            [(j.id, t)], now=now, queues=["elsewhere"], worker_id="w-9", lease_timeout=60, limit=1)[0][0],
        AttemptOutcome.COMPLETED, None,
    ),
    "fail": (
        lambda r, j, t, now: r.fail(j.id, t, now=now, error="ValueError: x", retry_at=now + timedelta(seconds=5)),
        AttemptOutcome.FAILED, "ValueError: x",
    ),
    "fail_permanent": (
        lambda r, j, t, now: r.fail(j.id, t, now=now, error="PermanentError: y", retry_at=None),
        AttemptOutcome.DEAD, "PermanentError: y",
    ),
    "dead_letter": (
        lambda r, j, t, now: r.dead_letter(j.id, t, now=now, error="PermanentError: z"), AttemptOutcome.DEAD,
        "PermanentError: z",
    ),
    "time_out": (
        lambda r, j, t, now: r.fail(j.id, t, now=now, error=TIMEOUT, retry_at=now + timedelta(seconds=5)),
        AttemptOutcome.TIMED_OUT, TIMEOUT,
    ),
    "release": (lambda r, j, t, now: r.release(j.id, t, now=now), AttemptOutcome.RELEASED, None),
    "snooze": (
        lambda r, j, t, now: r.snooze(j.id, t, now=now, until=now + timedelta(seconds=30)), AttemptOutcome.SNOOZED, None
    ),
}


class HistoryContract(ContractSupport):
    """``Job.history`` as each write of the port leaves it."""

    def _running(self, repository: JobRepository, clock: FakeClock, **options: Any) -> tuple[Job, datetime]:
        """A job leased by ``w-1`` one second after its enqueue; the lease time."""
        self.add(repository, clock, **options)
        clock.advance(1)
        return self.lease_one(repository, clock), clock.now()

    def test_a_new_job_has_no_history(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        assert job.history == ()
        assert repository.get(job.id).history == ()
        leased = self.lease_one(repository, clock)
        assert leased.history == ()
        assert repository.heartbeat(job.id, self.token_of(leased), now=clock.advance(1), lease_timeout=60).history == ()

    @pytest.mark.parametrize("write", list(WRITES))
    def test_each_outcome_write_appends_its_attempt(self, repository: JobRepository, clock: FakeClock, write: str) -> None:
        call, outcome, error = WRITES[write]
        leased, started = self._running(repository, clock, max_attempts=3)
        ended = clock.advance(4)
        written = call(repository, leased, self.token_of(leased), ended)
        expected = (Attempt(1, "w-1", started, ended, outcome, error),)
        assert written.history == expected
        assert repository.get(leased.id).history == expected

    @pytest.mark.parametrize(("write", "outcome"), [
        ("fail", AttemptOutcome.DEAD), ("time_out", AttemptOutcome.TIMED_OUT), ("complete", AttemptOutcome.COMPLETED),
    ])
    def test_a_failure_on_the_last_attempt_is_dead_and_a_timeout_stays_timed_out(
        self, repository: JobRepository, clock: FakeClock, write: str, outcome: AttemptOutcome
    ) -> None:
        call, _, error = WRITES[write]
        leased, started = self._running(repository, clock, max_attempts=1)
        ended = clock.advance(2)
        written = call(repository, leased, self.token_of(leased), ended)
        assert written.status is (JobStatus.COMPLETED if write == "complete" else JobStatus.DEAD)
        assert written.history == (Attempt(1, "w-1", started, ended, outcome, error),)

    @pytest.mark.parametrize("write", list(WRITES))
    def test_a_cancelled_attempt_records_cancelled_whatever_ended_it(
        self, repository: JobRepository, clock: FakeClock, write: str
    ) -> None:
        call, _, error = WRITES[write]
        leased, started = self._running(repository, clock)
        repository.cancel(leased.id, now=clock.advance(1))
        ended = clock.advance(1)
        written = call(repository, leased, self.token_of(leased), ended)
        assert written.status is JobStatus.CANCELLED
        assert written.history == (Attempt(1, "w-1", started, ended, AttemptOutcome.CANCELLED, error),)

    @pytest.mark.parametrize("cancelled", [False, True])
    def test_the_reaper_records_a_lost_lease_with_its_error(
        self, repository: JobRepository, clock: FakeClock, cancelled: bool
    ) -> None:
        leased, started = self._running(repository, clock, max_attempts=2)
        if cancelled:
            repository.cancel(leased.id, now=clock.now())
        ended = clock.advance(self.lease_timeout + 1)
        (reaped,) = repository.reap(now=ended)
        outcome = AttemptOutcome.CANCELLED if cancelled else AttemptOutcome.LEASE_LOST
        expected = (Attempt(1, "w-1", started, ended, outcome, transitions.reap_error(leased)),)
        assert reaped.history == expected
        assert repository.get(leased.id).history == expected
        assert reaped.last_error == transitions.reap_error(leased)

    def test_attempts_add_up_in_order_across_workers_and_outcomes(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        """A release gives its attempt back, so the next lease has the same number; a manual retry
        keeps the history and counts from 1 again."""
        job = self.add(repository, clock, max_attempts=3)
        entries: list[Attempt] = []

        def attempt(worker: str, end: Callable[[Job, str, datetime], Any], outcome: AttemptOutcome, error: str | None) -> None:
            started = clock.advance(1)
            leased = self.lease_one(repository, clock, worker_id=worker)
            ended = clock.advance(2)
            end(leased, self.token_of(leased), ended)
            entries.append(Attempt(leased.attempts, worker, started, ended, outcome, error))

        attempt("w-1", lambda j, t, now: repository.release(j.id, t, now=now), AttemptOutcome.RELEASED, None)
        attempt("w-2", lambda j, t, now: repository.fail(j.id, t, now=now, error="E: 1", retry_at=now),
                AttemptOutcome.FAILED, "E: 1")
        started = clock.advance(1)
        lost = self.lease_one(repository, clock, worker_id="w-3")
        ended = clock.advance(self.lease_timeout)
        repository.reap(now=ended)
        entries.append(Attempt(2, "w-3", started, ended, AttemptOutcome.LEASE_LOST, transitions.reap_error(lost)))
        attempt("w-1", lambda j, t, now: repository.dead_letter(j.id, t, now=now, error="PermanentError: no"),
                AttemptOutcome.DEAD, "PermanentError: no")
        assert [e.number for e in entries] == [1, 1, 2, 3]
        assert repository.get(job.id).history == tuple(entries)

        retried = repository.retry_dead(job.id, now=clock.advance(1))
        assert retried.history == tuple(entries)
        attempt("w-2", lambda j, t, now: repository.complete(j.id, t, now=now), AttemptOutcome.COMPLETED, None)
        assert entries[-1].number == 1
        assert repository.get(job.id).history == tuple(entries)

    @pytest.mark.parametrize("write", ["complete", "complete_many", "complete_and_lease"])
    def test_a_manual_retry_keeps_the_attempt_a_cancelled_completion_ended(
        self, repository: JobRepository, clock: FakeClock, write: str
    ) -> None:
        """A job cancelled while it ran and then completed by its holder is ``cancelled`` with that
        attempt last in its history; a manual retry keeps the entry, and the retried job holds no
        lease (nor a trace of one)."""
        leased, started = self._running(repository, clock)
        repository.cancel(leased.id, now=clock.advance(1))
        ended = clock.advance(1)
        WRITES[write][0](repository, leased, self.token_of(leased), ended)
        expected = (Attempt(1, "w-1", started, ended, AttemptOutcome.CANCELLED, None),)
        retried = repository.retry_dead(leased.id, now=clock.advance(1))
        assert retried.history == expected
        assert (retried.leased_by, retried.leased_at, retried.lease_expires_at) == (None, None, None)
        again = repository.get(leased.id)
        assert again.history == expected and again.leased_by is None and again.leased_at is None
        relet = self.lease_one(repository, clock, worker_id="w-2")
        done = repository.complete(relet.id, self.token_of(relet), now=clock.advance(1))
        assert [(a.number, a.worker_id, a.outcome) for a in done.history] == [
            (1, "w-1", AttemptOutcome.CANCELLED), (1, "w-2", AttemptOutcome.COMPLETED)
        ]
        assert repository.get(leased.id).history == done.history

    def test_cancels_and_refused_writes_append_nothing(self, repository: JobRepository, clock: FakeClock) -> None:
        queued = self.add(repository, clock)
        assert repository.cancel(queued.id, now=clock.advance(1)).history == ()
        leased, started = self._running(repository, clock, max_attempts=3)
        token = self.token_of(leased)
        done = repository.complete(leased.id, token, now=clock.advance(1))
        for name, (call, _, _) in WRITES.items():
            try:
                result = call(repository, leased, token, clock.advance(1))
            except LeaseLost:
                continue
            assert isinstance(result, LeaseLost), f"{name} with a stale token was accepted: {result}"
        assert repository.get(leased.id).history == done.history
        assert len(done.history) == 1 and done.history[0].started_at == started

    @pytest.mark.parametrize("last", ["complete", "complete_many", "complete_and_lease", "fail", "reap"])
    def test_only_the_newest_attempts_are_kept(self, repository: JobRepository, clock: FakeClock, last: str) -> None:
        job = self.add(repository, clock, max_attempts=2)
        ends = []
        for _ in range(HISTORY_LIMIT + 2):  # releases give their attempt back: one job, many attempts
            leased = self.lease_one(repository, clock)
            ends.append(clock.advance(1))
            repository.release(job.id, self.token_of(leased), now=clock.now())
        leased = self.lease_one(repository, clock, worker_id="w-last")
        if last == "reap":
            ended = clock.advance(self.lease_timeout)
            repository.reap(now=ended)
        else:
            ended = clock.advance(1)
            WRITES[last][0](repository, leased, self.token_of(leased), ended)
        history = repository.get(job.id).history
        assert len(history) == HISTORY_LIMIT
        assert [a.ended_at for a in history] == [*ends[-(HISTORY_LIMIT - 1):], ended]
        assert {a.outcome for a in history[:-1]} == {AttemptOutcome.RELEASED}
        assert history[-1].worker_id == "w-last"

    def test_an_attempts_error_is_bounded_and_the_token_never_kept(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        leased, _ = self._running(repository, clock, max_attempts=3)
        token = self.token_of(leased)
        error = "ValueError: " + "x" * 10_000
        written = repository.fail(leased.id, token, now=clock.advance(1), error=error, retry_at=clock.now())
        (entry,) = written.history
        assert entry.error == attempt_error(written.last_error or "")
        assert entry.error is not None and len(entry.error) == HISTORY_ERROR_CHARS
        assert entry.error.endswith(f"[truncated from {len(written.last_error or '')} chars]")
        assert token not in repr(repository.get(leased.id).history)


__all__ = ["TIMEOUT", "WRITES", "HistoryContract"]
