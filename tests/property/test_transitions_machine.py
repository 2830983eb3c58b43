"""A Hypothesis state machine over the pure functions of tether.domain.transitions.

The model is a few plain fields per job (status, attempts, current token, expiry, whether a
cancellation was requested), written from the design's table, not from the code under test.
Invariants: attempts never exceed max_attempts; completed, dead and cancelled jobs absorb every
move but a manual retry of a dead or cancelled job; once a cancellation is requested every
outcome of the running job is cancelled; a write with a token that does not hold the job raises
LeaseLost and the stored job stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tether.domain import transitions
from tether.domain.errors import InvalidTransition, LeaseLost
from tether.domain.job import Job, JobStatus
from tether.domain.lease import new_lease_token
from tether.domain.validation import prepare_job

START = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT = 30.0
HOLDER_MOVES = ("complete", "fail_retry", "fail_final", "dead_letter", "heartbeat", "release", "snooze")
FINISHED = ("completed", "dead", "cancelled")


@dataclass
class Expect:
    status: str
    attempts: int
    max_attempts: int
    scheduled_at: datetime
    token: str | None = None
    expires: datetime | None = None
    requested: bool = False


class TransitionsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = START
        self.jobs: dict[int, Job] = {}
        self.model: dict[int, Expect] = {}
        self.tokens: dict[int, list[str]] = {}

    # -- helpers -----------------------------------------------------------------------------
    def _holder_move(self, move: str, job: Job, token: str) -> Job:
        if move == "complete":
            return transitions.complete(job, token=token, now=self.now)
        if move == "fail_retry":
            return transitions.fail(job, token=token, now=self.now, error="E", retry_at=self.now + timedelta(seconds=2))
        if move == "fail_final":
            return transitions.fail(job, token=token, now=self.now, error="E", retry_at=None)
        if move == "dead_letter":
            return transitions.dead_letter(job, token=token, now=self.now, error="E")
        if move == "heartbeat":
            return transitions.heartbeat(job, token=token, now=self.now, lease_timeout=TIMEOUT)
        if move == "snooze":
            return transitions.snooze(job, token=token, now=self.now, until=self.now + timedelta(seconds=7))
        assert move == "release"
        return transitions.release(job, token=token, now=self.now)

    def _expect_after(self, move: str, e: Expect) -> Expect:
        if e.requested and move != "heartbeat":
            return Expect("cancelled", e.attempts, e.max_attempts, e.scheduled_at, requested=True)
        if move == "complete":
            return Expect("completed", e.attempts, e.max_attempts, e.scheduled_at)
        if move == "fail_retry" and e.attempts < e.max_attempts:
            return Expect("retrying", e.attempts, e.max_attempts, self.now + timedelta(seconds=2))
        if move in ("fail_retry", "fail_final", "dead_letter"):
            return Expect("dead", e.attempts, e.max_attempts, e.scheduled_at)
        if move == "heartbeat":
            assert e.expires is not None
            return Expect("running", e.attempts, e.max_attempts, e.scheduled_at, e.token,
                          max(e.expires, self.now + timedelta(seconds=TIMEOUT)), e.requested)
        if move == "snooze":
            return Expect("queued", e.attempts - 1, e.max_attempts, self.now + timedelta(seconds=7))
        return Expect("queued", e.attempts - 1, e.max_attempts, self.now)

    # -- rules -------------------------------------------------------------------------------
    @rule(max_attempts=st.integers(1, 4), delay=st.sampled_from([0, 0, 5, 60]))
    def create(self, max_attempts: int, delay: int) -> None:
        new = prepare_job("t", {}, now=self.now, delay=delay, max_attempts=max_attempts)
        job_id = len(self.jobs) + 1
        self.jobs[job_id] = transitions.create(new, job_id=job_id, now=self.now)
        self.model[job_id] = Expect("queued", 0, max_attempts, self.now + timedelta(seconds=delay))
        self.tokens[job_id] = []

    @rule(seconds=st.sampled_from([1, 10, 29, 31, 61]))
    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def lease(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        e = self.model[job_id]
        token = new_lease_token()
        leasable = e.status in ("queued", "retrying") and e.scheduled_at <= self.now and e.attempts < e.max_attempts
        if not leasable:
            with pytest.raises(InvalidTransition):
                transitions.lease(self.jobs[job_id], now=self.now, token=token, worker_id="w", lease_timeout=TIMEOUT)
            return
        self.jobs[job_id] = transitions.lease(self.jobs[job_id], now=self.now, token=token, worker_id="w", lease_timeout=TIMEOUT)
        self.model[job_id] = Expect("running", e.attempts + 1, e.max_attempts, e.scheduled_at, token,
                                    self.now + timedelta(seconds=TIMEOUT))
        self.tokens[job_id].append(token)

    @precondition(lambda self: any(e.status == "running" for e in self.model.values()))
    @rule(data=st.data(), move=st.sampled_from(HOLDER_MOVES))
    def holder(self, data: st.DataObject, move: str) -> None:
        job_id = data.draw(st.sampled_from(sorted(i for i, e in self.model.items() if e.status == "running")))
        e = self.model[job_id]
        assert e.token is not None
        self.jobs[job_id] = self._holder_move(move, self.jobs[job_id], e.token)
        self.model[job_id] = self._expect_after(move, e)

    @precondition(lambda self: any(self.tokens.values()))
    @rule(data=st.data(), move=st.sampled_from(HOLDER_MOVES + ("reap",)))
    def stale_token(self, data: st.DataObject, move: str) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        current = self.model[job_id].token
        candidates = [t for ts in self.tokens.values() for t in ts if t != current] + [new_lease_token()]
        token = data.draw(st.sampled_from(candidates))
        before = self.jobs[job_id]
        with pytest.raises(LeaseLost):
            if move == "reap":
                transitions.reap(before, now=self.now + timedelta(days=1), token=token)
            else:
                self._holder_move(move, before, token)
        assert self.jobs[job_id] == before

    @precondition(lambda self: any(e.status == "running" for e in self.model.values()))
    @rule(data=st.data())
    def reap(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(i for i, e in self.model.items() if e.status == "running")))
        e = self.model[job_id]
        assert e.token is not None and e.expires is not None
        if e.expires > self.now:
            with pytest.raises(InvalidTransition):
                transitions.reap(self.jobs[job_id], now=self.now, token=e.token)
            return
        self.jobs[job_id] = transitions.reap(self.jobs[job_id], now=self.now, token=e.token)
        if e.requested:
            self.model[job_id] = Expect("cancelled", e.attempts, e.max_attempts, e.scheduled_at, requested=True)
        elif e.attempts < e.max_attempts:
            self.model[job_id] = Expect("retrying", e.attempts, e.max_attempts, self.now)
        else:
            self.model[job_id] = Expect("dead", e.attempts, e.max_attempts, e.scheduled_at)

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def retry_dead(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        e = self.model[job_id]
        if e.status not in ("dead", "cancelled"):
            with pytest.raises(InvalidTransition):
                transitions.retry_dead(self.jobs[job_id], now=self.now)
            return
        self.jobs[job_id] = transitions.retry_dead(self.jobs[job_id], now=self.now)
        self.model[job_id] = Expect("queued", 0, e.max_attempts, self.now)

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.jobs)))
        e = self.model[job_id]
        if e.status in FINISHED:
            with pytest.raises(InvalidTransition):
                transitions.cancel(self.jobs[job_id], now=self.now)
            return
        self.jobs[job_id] = transitions.cancel(self.jobs[job_id], now=self.now)
        if e.status == "running":
            self.model[job_id] = Expect("running", e.attempts, e.max_attempts, e.scheduled_at, e.token, e.expires, True)
        else:
            self.model[job_id] = Expect("cancelled", e.attempts, e.max_attempts, e.scheduled_at, requested=True)

    @precondition(lambda self: any(e.status in FINISHED for e in self.model.values()))
    @rule(data=st.data())
    def terminal_absorbs(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(i for i, e in self.model.items() if e.status in FINISHED)))
        job = self.jobs[job_id]
        last = (self.tokens[job_id] or [new_lease_token()])[-1]  # a job cancelled while queued never had one
        moves: list[Any] = [
            lambda: transitions.lease(job, now=self.now + timedelta(days=1), token=new_lease_token(), worker_id="w",
                                      lease_timeout=TIMEOUT),
            lambda: transitions.reap(job, now=self.now + timedelta(days=1), token=last),
            lambda: transitions.cancel(job, now=self.now),
        ] + [lambda m=m: self._holder_move(m, job, last) for m in HOLDER_MOVES]
        if job.status is JobStatus.COMPLETED:
            moves.append(lambda: transitions.retry_dead(job, now=self.now))
        for move in moves:
            with pytest.raises((InvalidTransition, LeaseLost)):
                move()

    # -- invariants --------------------------------------------------------------------------
    @invariant()
    def agrees_with_the_model(self) -> None:
        for job_id, job in self.jobs.items():
            e = self.model[job_id]
            got = (job.status.value, job.attempts, job.max_attempts, job.scheduled_at, job.lease_token, job.lease_expires_at)
            assert got == (e.status, e.attempts, e.max_attempts, e.scheduled_at, e.token, e.expires), f"job {job_id}"
            assert 0 <= job.attempts <= job.max_attempts
            assert (job.finished_at is not None) == job.status.is_terminal
            assert (job.cancel_requested_at is not None) == e.requested
            assert job.cancel_requested_at is None or job.status in (JobStatus.RUNNING, JobStatus.CANCELLED)


TransitionsMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestTransitionsMachine = TransitionsMachine.TestCase
