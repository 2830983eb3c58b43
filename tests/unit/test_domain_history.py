"""The attempt history rules of the pure domain: which entry each move appends, the bound, the error cut."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest
from tether.domain import transitions
from tether.domain.history import (
    HISTORY_ERROR_CHARS,
    HISTORY_LIMIT,
    Attempt,
    AttemptOutcome,
    after_retry,
    attempt_error,
    failure_outcomes,
    with_attempt,
)
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def running(max_attempts: int = 3, **changes: object) -> Job:
    job = transitions.create(prepare_job("a.b", {}, now=T0, max_attempts=max_attempts), job_id=1, now=T0)
    job = transitions.lease(job, now=T0, token="t" * 32, worker_id="w-1", lease_timeout=60)
    return attrs.evolve(job, **changes) if changes else job


def entry(outcome: AttemptOutcome, error: str | None = None, ended: float = 5) -> Attempt:
    return Attempt(1, "w-1", T0, T0 + timedelta(seconds=ended), outcome, error)


LATER = T0 + timedelta(seconds=5)


@pytest.mark.parametrize(("move", "expected"), [
    (lambda j: transitions.complete(j, token="t" * 32, now=LATER), entry(AttemptOutcome.COMPLETED)),
    (lambda j: transitions.fail(j, token="t" * 32, now=LATER, error="E: 1", retry_at=LATER),
     entry(AttemptOutcome.FAILED, "E: 1")),
    (lambda j: transitions.fail(j, token="t" * 32, now=LATER, error="E: 1", retry_at=None),
     entry(AttemptOutcome.DEAD, "E: 1")),
    (lambda j: transitions.dead_letter(j, token="t" * 32, now=LATER, error="P: 2"), entry(AttemptOutcome.DEAD, "P: 2")),
    (lambda j: transitions.fail(j, token="t" * 32, now=LATER, error="JobTimeout: timed out after 3 s", retry_at=LATER),
     entry(AttemptOutcome.TIMED_OUT, "JobTimeout: timed out after 3 s")),
    (lambda j: transitions.release(j, token="t" * 32, now=LATER), entry(AttemptOutcome.RELEASED)),
    (lambda j: transitions.snooze(j, token="t" * 32, now=LATER, until=LATER + timedelta(hours=1)),
     entry(AttemptOutcome.SNOOZED)),
    (lambda j: transitions.reap(j, now=T0 + timedelta(seconds=60), token="t" * 32),
     entry(AttemptOutcome.LEASE_LOST, transitions.reap_error(running()), ended=60)),
])
def test_each_move_out_of_running_appends_one_entry(move, expected: Attempt) -> None:
    assert move(running()).history == (expected,)


def test_a_cancelled_attempt_is_cancelled_whatever_ended_it_and_a_heartbeat_appends_nothing() -> None:
    job = transitions.cancel(running(), now=T0)
    assert transitions.heartbeat(job, token="t" * 32, now=LATER, lease_timeout=60).history == ()
    assert transitions.complete(job, token="t" * 32, now=LATER).history == (entry(AttemptOutcome.CANCELLED),)
    failed = transitions.fail(job, token="t" * 32, now=LATER, error="E: 1", retry_at=LATER)
    assert failed.history == (entry(AttemptOutcome.CANCELLED, "E: 1"),)
    assert transitions.cancel(transitions.create(prepare_job("a.b", {}, now=T0), job_id=2, now=T0), now=T0).history == ()


def test_the_history_keeps_the_newest_entries() -> None:
    history: tuple[Attempt, ...] = ()
    for n in range(HISTORY_LIMIT + 3):
        history = with_attempt(history, entry(AttemptOutcome.RELEASED, ended=n))
    assert len(history) == HISTORY_LIMIT
    assert history[0].ended_at == T0 + timedelta(seconds=3)
    full = running(history=history)
    assert transitions.complete(full, token="t" * 32, now=LATER).history == (*history[1:], entry(AttemptOutcome.COMPLETED))


def test_an_entrys_error_is_cut_and_timeouts_are_told_by_their_text() -> None:
    long = attempt_error("E: " + "x" * 5_000)
    assert len(long) == HISTORY_ERROR_CHARS and long.endswith("[truncated from 5003 chars]")
    assert attempt_error("a\x00b") == "a\\x00b"
    assert failure_outcomes("JobTimeout: timed out after 1 s") == (AttemptOutcome.TIMED_OUT, AttemptOutcome.TIMED_OUT)
    assert failure_outcomes("ValueError: JobTimeout:") == (AttemptOutcome.FAILED, AttemptOutcome.DEAD)


def test_the_longest_reaper_error_fits_an_entry_uncut() -> None:
    """The PostgreSQL reaper writes the reaper's text into the entry as SQL renders it, uncut: it
    must never need the cut (a worker id is at most 200 characters, attempts at most 10,000)."""
    job = running(leased_by="w" * 200, attempts=10_000, max_attempts=10_000)
    assert len(transitions.reap_error(job)) < HISTORY_ERROR_CHARS
    assert job.status is JobStatus.RUNNING


def numbered(*entries: tuple[int, AttemptOutcome]) -> tuple[Attempt, ...]:
    return tuple(Attempt(n, "w-1", T0, T0 + timedelta(seconds=k), outcome, None) for k, (n, outcome) in enumerate(entries))


@pytest.mark.parametrize(("history", "marks"), [
    ((), ()),
    (((1, AttemptOutcome.FAILED), (2, AttemptOutcome.COMPLETED)), (False, False)),
    (((1, AttemptOutcome.SNOOZED), (1, AttemptOutcome.RELEASED), (1, AttemptOutcome.COMPLETED)), (False, False, False)),
    (((1, AttemptOutcome.DEAD), (1, AttemptOutcome.COMPLETED)), (False, True)),  # a dead job retried by hand
    (((1, AttemptOutcome.CANCELLED), (1, AttemptOutcome.FAILED), (2, AttemptOutcome.DEAD), (1, AttemptOutcome.COMPLETED)),
     (False, True, False, True)),
    (((3, AttemptOutcome.LEASE_LOST), (1, AttemptOutcome.COMPLETED)), (False, True)),
])
def test_after_retry_marks_where_the_attempts_count_from_1_again(
    history: tuple[tuple[int, AttemptOutcome], ...], marks: tuple[bool, ...]
) -> None:
    assert after_retry(numbered(*history)) == marks
