"""The pure state machine: each legal move, and every illegal one refused without a new job."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from tether.domain import transitions
from tether.domain.errors import InvalidTransition, LeaseLost
from tether.domain.job import Job, JobStatus
from tether.domain.lease import new_lease_token
from tether.domain.retry import RetryPolicy
from tether.domain.validation import prepare_job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def queued(max_attempts: int = 3, delay: float = 0) -> Job:
    return transitions.create(prepare_job("t", {"n": 1}, now=T0, delay=delay, max_attempts=max_attempts), job_id=7, now=T0)


def running(max_attempts: int = 3, token: str = "a" * 32, now: datetime = T0, timeout: float = 60) -> Job:
    return transitions.lease(queued(max_attempts), now=now, token=token, worker_id="w", lease_timeout=timeout)


def test_create() -> None:
    job = queued(delay=5)
    assert (job.id, job.status, job.attempts, job.max_attempts) == (7, JobStatus.QUEUED, 0, 3)
    assert job.scheduled_at == at(5) and job.created_at == T0 and job.payload == {"n": 1}


def test_lease_counts_the_attempt_and_sets_the_lease() -> None:
    job = running(now=at(1), timeout=90)
    assert job.status is JobStatus.RUNNING and job.attempts == 1
    assert (job.lease_token, job.leased_by, job.leased_at, job.lease_expires_at) == ("a" * 32, "w", at(1), at(91))


def test_lease_refuses_not_due_running_finished_and_spent_jobs() -> None:
    with pytest.raises(InvalidTransition):
        transitions.lease(queued(delay=10), now=at(9), token="t", worker_id="w", lease_timeout=60)
    transitions.lease(queued(delay=10), now=at(10), token="t", worker_id="w", lease_timeout=60)  # due at exactly 10 s
    with pytest.raises(InvalidTransition):
        transitions.lease(running(), now=T0, token="t", worker_id="w", lease_timeout=60)
    done = transitions.complete(running(), token="a" * 32, now=T0)
    with pytest.raises(InvalidTransition):
        transitions.lease(done, now=T0, token="t", worker_id="w", lease_timeout=60)
    spent = transitions.reap(running(max_attempts=1), now=at(60), token="a" * 32)
    assert spent.status is JobStatus.DEAD


def test_complete() -> None:
    job = transitions.complete(running(), token="a" * 32, now=at(3))
    assert job.status is JobStatus.COMPLETED and job.finished_at == at(3) and job.attempts == 1
    assert (job.lease_token, job.leased_by, job.leased_at, job.lease_expires_at) == (None, None, None, None)


def test_fail_retries_while_attempts_remain() -> None:
    job = transitions.fail(running(), token="a" * 32, now=at(3), error="E: x", retry_at=at(4))
    assert job.status is JobStatus.RETRYING and job.scheduled_at == at(4) and job.last_error == "E: x"
    assert job.lease_token is None and job.finished_at is None


def test_fail_goes_dead_when_attempts_are_used_up_or_no_retry() -> None:
    spent = transitions.fail(running(max_attempts=1), token="a" * 32, now=at(3), error="E", retry_at=at(4))
    assert spent.status is JobStatus.DEAD and spent.finished_at == at(3)
    permanent = transitions.fail(running(), token="a" * 32, now=at(3), error="E", retry_at=None)
    assert permanent.status is JobStatus.DEAD


def test_fail_sanitizes_the_error() -> None:
    job = transitions.fail(running(), token="a" * 32, now=T0, error="bad\x00byte", retry_at=at(1))
    assert job.last_error == "bad\\x00byte"


def test_dead_letter() -> None:
    job = transitions.dead_letter(running(max_attempts=5), token="a" * 32, now=at(2), error="gone")
    assert job.status is JobStatus.DEAD and job.attempts == 1 and job.last_error == "gone"


def test_heartbeat_extends_and_never_shortens() -> None:
    job = running(timeout=60)
    longer = transitions.heartbeat(job, token="a" * 32, now=at(30), lease_timeout=60)
    assert longer.lease_expires_at == at(90)
    same = transitions.heartbeat(longer, token="a" * 32, now=at(31), lease_timeout=10)
    assert same.lease_expires_at == at(90)


def test_release_gives_the_attempt_back() -> None:
    job = transitions.release(running(max_attempts=1), token="a" * 32, now=at(5))
    assert job.status is JobStatus.QUEUED and job.attempts == 0 and job.scheduled_at == at(5)
    assert job.lease_token is None and job.last_error is None
    again = transitions.lease(job, now=at(5), token="b" * 32, worker_id="w", lease_timeout=60)
    assert again.attempts == 1


def test_release_keeps_the_last_real_failure_and_writes_no_note_of_its_own() -> None:
    failed = transitions.fail(running(), token="a" * 32, now=at(1), error="ValueError: one", retry_at=at(2))
    second = transitions.lease(failed, now=at(2), token="b" * 32, worker_id="w", lease_timeout=60)
    released = transitions.release(second, token="b" * 32, now=at(3))
    assert released.last_error == "ValueError: one"
    third = transitions.lease(released, now=at(3), token="c" * 32, worker_id="w", lease_timeout=60)
    assert transitions.complete(third, token="c" * 32, now=at(4)).last_error == "ValueError: one"


def test_reap_only_after_expiry() -> None:
    job = running(timeout=60)
    with pytest.raises(InvalidTransition):
        transitions.reap(job, now=at(59.999), token="a" * 32)
    back = transitions.reap(job, now=at(60), token="a" * 32)
    assert back.status is JobStatus.RETRYING and back.scheduled_at == at(60) and back.attempts == 1
    assert back.last_error == (
        "LeaseExpired: lease of worker w expired at 2026-01-01T00:01:00.000000+00:00 without a heartbeat; "
        "the worker was lost (attempt 1 of 3)"
    )


def test_reap_of_the_last_attempt_is_dead() -> None:
    job = transitions.reap(running(max_attempts=1), now=at(60), token="a" * 32)
    assert job.status is JobStatus.DEAD and job.finished_at == at(60)
    assert job.last_error is not None and "attempt 1 of 1" in job.last_error


def test_retry_dead() -> None:
    dead = transitions.dead_letter(running(), token="a" * 32, now=at(1), error="E")
    back = transitions.retry_dead(dead, now=at(2))
    assert back.status is JobStatus.QUEUED and back.attempts == 0 and back.scheduled_at == at(2)
    assert back.finished_at is None and back.last_error == "E"


HOLDER_WRITES: dict[str, Callable[[Job, str], Job]] = {
    "complete": lambda j, t: transitions.complete(j, token=t, now=at(1)),
    "fail": lambda j, t: transitions.fail(j, token=t, now=at(1), error="E", retry_at=at(2)),
    "dead_letter": lambda j, t: transitions.dead_letter(j, token=t, now=at(1), error="E"),
    "heartbeat": lambda j, t: transitions.heartbeat(j, token=t, now=at(1), lease_timeout=60),
    "release": lambda j, t: transitions.release(j, token=t, now=at(1)),
    "snooze": lambda j, t: transitions.snooze(j, token=t, now=at(1), until=at(30)),
    "reap": lambda j, t: transitions.reap(j, now=at(10_000), token=t),
}


@pytest.mark.parametrize("write", sorted(HOLDER_WRITES))
def test_holder_writes_with_another_token_raise_lease_lost(write: str) -> None:
    job = running()
    with pytest.raises(LeaseLost) as info:
        HOLDER_WRITES[write](job, "b" * 32)
    assert info.value.job_id == 7


@pytest.mark.parametrize("write", sorted(HOLDER_WRITES))
@pytest.mark.parametrize("state", ["queued", "retrying", "completed", "dead", "cancelled"])
def test_holder_writes_on_a_job_not_running_raise_lease_lost(write: str, state: str) -> None:
    job = running()
    if state == "queued":
        job = transitions.release(job, token="a" * 32, now=T0)
    elif state == "retrying":
        job = transitions.fail(job, token="a" * 32, now=T0, error="E", retry_at=at(1))
    elif state == "completed":
        job = transitions.complete(job, token="a" * 32, now=T0)
    elif state == "cancelled":
        job = transitions.complete(transitions.cancel(job, now=T0), token="a" * 32, now=T0)
    else:
        job = transitions.dead_letter(job, token="a" * 32, now=T0, error="E")
    with pytest.raises(LeaseLost):
        HOLDER_WRITES[write](job, "a" * 32)


@pytest.mark.parametrize("state", ["queued", "running", "retrying", "completed"])
def test_retry_dead_refuses_jobs_that_are_neither_dead_nor_cancelled(state: str) -> None:
    job = running()
    if state == "queued":
        job = queued()
    elif state == "retrying":
        job = transitions.fail(job, token="a" * 32, now=T0, error="E", retry_at=at(1))
    elif state == "completed":
        job = transitions.complete(job, token="a" * 32, now=T0)
    with pytest.raises(InvalidTransition) as info:
        transitions.retry_dead(job, now=at(2))
    assert info.value.action == "retry" and info.value.status == state


def test_next_retry_at_follows_policy_and_attempts() -> None:
    policy = RetryPolicy()
    first = running()
    assert transitions.next_retry_at(first, now=at(10), policy=policy, r=0.0) == at(11)
    assert transitions.next_retry_at(first, now=at(10), policy=policy, r=1.0) == at(11.25)  # jitter 0.25
    assert transitions.next_retry_at(first, now=at(10), policy=policy, r=0.0, permanent=True) is None
    assert transitions.next_retry_at(running(max_attempts=1), now=at(10), policy=policy, r=0.0) is None


def test_c15_attempts_never_exceed_max_attempts() -> None:
    # C15b/e: fail, reap, fail with max_attempts=3 ends dead at attempts 3; no lease after that.
    job = running(max_attempts=3)
    job = transitions.fail(job, token="a" * 32, now=T0, error="E", retry_at=at(1))
    job = transitions.lease(job, now=at(1), token="b" * 32, worker_id="w", lease_timeout=60)
    job = transitions.reap(job, now=at(61), token="b" * 32)
    assert (job.status, job.attempts) == (JobStatus.RETRYING, 2)
    job = transitions.lease(job, now=at(61), token="c" * 32, worker_id="w", lease_timeout=60)
    job = transitions.fail(job, token="c" * 32, now=at(62), error="E", retry_at=at(63))
    assert (job.status, job.attempts) == (JobStatus.DEAD, 3)
    with pytest.raises(InvalidTransition):
        transitions.lease(job, now=at(1000), token=new_lease_token(), worker_id="w", lease_timeout=60)


# -- cancellation ----------------------------------------------------------------------------
def retrying() -> Job:
    return transitions.fail(running(), token="a" * 32, now=T0, error="ValueError: x", retry_at=at(50))


@pytest.mark.parametrize("make", [queued, retrying], ids=["queued", "retrying"])
def test_cancel_of_a_waiting_job_is_immediate(make: Callable[[], Job]) -> None:
    before = make()
    job = transitions.cancel(before, now=at(5))
    assert job.status is JobStatus.CANCELLED and job.status.is_terminal
    assert (job.finished_at, job.cancel_requested_at) == (at(5), at(5))
    assert (job.attempts, job.scheduled_at, job.last_error) == (before.attempts, before.scheduled_at, before.last_error)
    with pytest.raises(InvalidTransition):  # never leased again
        transitions.lease(job, now=at(10_000), token="b" * 32, worker_id="w", lease_timeout=60)


def test_cancel_of_a_running_job_stores_the_request_and_keeps_the_first() -> None:
    job = transitions.cancel(running(), now=at(5))
    assert job.status is JobStatus.RUNNING and job.cancel_requested_at == at(5) and job.lease_token == "a" * 32
    assert transitions.cancel(job, now=at(9)) == job  # a second request changes nothing
    beat = transitions.heartbeat(job, token="a" * 32, now=at(6), lease_timeout=60)
    assert beat.cancel_requested_at == at(5) and beat.status is JobStatus.RUNNING  # the heartbeat's answer carries it


@pytest.mark.parametrize("state", ["completed", "dead", "cancelled"])
def test_cancel_of_a_finished_job_raises_naming_its_status(state: str) -> None:
    job = {
        "completed": lambda: transitions.complete(running(), token="a" * 32, now=T0),
        "dead": lambda: transitions.dead_letter(running(), token="a" * 32, now=T0, error="E"),
        "cancelled": lambda: transitions.cancel(queued(), now=T0),
    }[state]()
    with pytest.raises(InvalidTransition) as info:
        transitions.cancel(job, now=at(1))
    assert (info.value.status, info.value.action) == (state, "cancel")
    assert f"cannot cancel a job that is {state}" in str(info.value)


@pytest.mark.parametrize(
    ("write", "error"),
    [("complete", None), ("fail", "E"), ("dead_letter", "E"), ("release", None), ("snooze", None)],
)
def test_every_holder_outcome_of_a_cancel_requested_job_is_cancelled(write: str, error: str | None) -> None:
    requested = transitions.cancel(running(), now=at(0.5))
    job = HOLDER_WRITES[write](requested, "a" * 32)
    assert job.status is JobStatus.CANCELLED and job.finished_at == at(1) and job.attempts == 1
    assert (job.lease_token, job.leased_by, job.leased_at, job.lease_expires_at) == (None, None, None, None)
    assert job.last_error == error and job.scheduled_at == requested.scheduled_at
    assert job.cancel_requested_at == at(0.5)


def test_the_reaper_makes_a_cancel_requested_job_cancelled_never_retrying() -> None:
    requested = transitions.cancel(running(max_attempts=3), now=at(1))
    job = transitions.reap(requested, now=at(60), token="a" * 32)
    assert job.status is JobStatus.CANCELLED and job.finished_at == at(60) and job.attempts == 1
    assert job.last_error == transitions.reap_error(requested)


def test_retry_takes_a_cancelled_job_back_without_its_request() -> None:
    cancelled = transitions.complete(transitions.cancel(running(), now=at(1)), token="a" * 32, now=at(2))
    back = transitions.retry_dead(cancelled, now=at(3))
    assert back.status is JobStatus.QUEUED and back.attempts == 0 and back.scheduled_at == at(3)
    assert back.finished_at is None and back.cancel_requested_at is None
    again = transitions.lease(back, now=at(3), token="b" * 32, worker_id="w", lease_timeout=60)
    assert transitions.complete(again, token="b" * 32, now=at(4)).status is JobStatus.COMPLETED


# -- snooze ----------------------------------------------------------------------------------
def test_snooze_gives_the_attempt_back_and_is_due_later() -> None:
    failed_once = transitions.lease(retrying(), now=at(50), token="b" * 32, worker_id="w", lease_timeout=60)
    job = transitions.snooze(failed_once, token="b" * 32, now=at(51), until=at(81))
    assert job.status is JobStatus.QUEUED and job.attempts == 1 and job.scheduled_at == at(81)
    assert job.last_error == "ValueError: x" and job.finished_at is None  # not a failure
    assert (job.lease_token, job.leased_by, job.leased_at, job.lease_expires_at) == (None, None, None, None)
    assert not job.is_due(at(80.999)) and job.is_due(at(81))


def test_snooze_validates_its_delay_naming_the_field() -> None:
    from tether.domain.errors import ValidationError
    from tether.domain.snooze import Snooze
    from tether.domain.validation import SNOOZE_MAX_SECONDS

    assert Snooze(0).seconds == 0.0 and Snooze(timedelta(minutes=2)).seconds == 120.0
    assert Snooze(SNOOZE_MAX_SECONDS).seconds == SNOOZE_MAX_SECONDS
    for bad in (-1, float("nan"), float("inf"), SNOOZE_MAX_SECONDS + 1, "5", True, None):
        with pytest.raises(ValidationError) as info:
            Snooze(bad)  # type: ignore[arg-type]
        assert info.value.field == "seconds"
