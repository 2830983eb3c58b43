"""Contract part: an operator's cancel (one job, or many by filter), the holder's snooze, and their races.

The rules (``shared/DESIGN.md``, job state machine): a queued or retrying job is ``cancelled`` at
once and for good (never leased, never reaped, purged like other finished jobs, its idempotency
key held until then); a running job gets a stored request that every outcome its holder writes,
and the reaper, turn into ``cancelled``; a cancel racing any of those writes ends as one of the
two orders, never neither; a finished job cannot be cancelled.  A snooze gives the job back
``queued``, due later, with the attempt given back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from tether.adapters.clock import FakeClock
from tether.domain import transitions
from tether.domain.errors import InvalidTransition, JobNotFound, LeaseLost, ValidationError
from tether.domain.job import Job, JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import MINUTE, ContractSupport

#: Holder outcomes, each as ``write(repository, job, token, now)``, and the error it stores.
OUTCOMES: dict[str, tuple[Callable[[JobRepository, Job, str, Any], Any], str | None]] = {
    "complete": (lambda r, j, t, now: r.complete(j.id, t, now=now), None),
    "fail": (lambda r, j, t, now: r.fail(j.id, t, now=now, error="ValueError: x", retry_at=now + timedelta(seconds=5)),
             "ValueError: x"),
    "fail_final": (lambda r, j, t, now: r.fail(j.id, t, now=now, error="ValueError: y", retry_at=None), "ValueError: y"),
    "dead_letter": (lambda r, j, t, now: r.dead_letter(j.id, t, now=now, error="PermanentError: z"), "PermanentError: z"),
    "release": (lambda r, j, t, now: r.release(j.id, t, now=now), None),
    "snooze": (lambda r, j, t, now: r.snooze(j.id, t, now=now, until=now + timedelta(seconds=30)), None),
    "complete_many": (lambda r, j, t, now: r.complete_many([(j.id, t)], now=now)[0], None),
    "complete_and_lease": (
        lambda r, j, t, now: r.complete_and_lease([(j.id, t)], now=now, queues=["nowhere"], worker_id="w",
                                                  lease_timeout=60, limit=1)[0][0],
        None,
    ),
}


class CancellationContract(ContractSupport):
    """``cancel``, ``cancel_many``, ``find_by_key``, ``snooze``, and cancels racing the other writes."""

    #: Jobs raced between a cancel and each other write (lower it for a slow backend).
    cancel_race_jobs: int = 20

    # -- a waiting job: cancelled at once ----------------------------------------------------
    def test_cancel_of_a_queued_job_is_immediate_and_final(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, idempotency_key="order-7")
        clock.advance(3)
        cancelled = repository.cancel(job.id, now=clock.now())
        assert cancelled.status is JobStatus.CANCELLED
        assert (cancelled.finished_at, cancelled.cancel_requested_at) == (clock.now(), clock.now())
        assert (cancelled.attempts, cancelled.scheduled_at, cancelled.last_error) == (0, job.scheduled_at, None)
        assert repository.get(job.id) == cancelled
        later = clock.now() + timedelta(days=1)
        assert repository.lease(queues=None, worker_id="w", now=later, lease_timeout=60, limit=5) == []
        assert repository.lease_job(job.id, worker_id="w", now=later, lease_timeout=60) is None
        assert repository.due_jobs(now=later, queues=None, limit=5) == []
        assert repository.reap(now=later) == []
        again = repository.enqueue(self.new_job(clock, idempotency_key="order-7"), now=clock.now())
        assert (again.created, again.job) == (False, cancelled)  # its key stays held until purge
        assert repository.find_by_key("order-7") == cancelled
        assert repository.purge(older_than=clock.now()) == 0
        assert repository.purge(older_than=clock.now() + timedelta(microseconds=1)) == 1
        with pytest.raises(JobNotFound):
            repository.get(job.id)
        assert repository.find_by_key("order-7") is None
        assert repository.enqueue(self.new_job(clock, idempotency_key="order-7"), now=clock.now()).created

    def test_cancel_of_a_retrying_job_is_immediate(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        leased = self.lease_one(repository, clock)
        repository.fail(job.id, self.token_of(leased), now=clock.now(), error="E: 1", retry_at=clock.now() + timedelta(minutes=5))
        cancelled = repository.cancel(job.id, now=clock.advance(1))
        assert cancelled.status is JobStatus.CANCELLED and cancelled.finished_at == clock.now()
        assert cancelled.attempts == 1 and cancelled.last_error == "E: 1"
        assert repository.lease(queues=None, worker_id="w", now=clock.now() + timedelta(hours=1), lease_timeout=60) == []

    # -- a running job: a request its holder's outcome write turns into cancelled ------------
    def test_cancel_of_a_running_job_stores_a_request_the_heartbeat_answers(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        self.add(repository, clock)
        leased = self.lease_one(repository, clock, lease_timeout=60)
        assert leased.cancel_requested_at is None
        beat = repository.heartbeat(leased.id, self.token_of(leased), now=clock.advance(1), lease_timeout=60)
        assert beat.cancel_requested_at is None
        asked = clock.advance(1)
        requested = repository.cancel(leased.id, now=asked)
        assert requested.status is JobStatus.RUNNING and requested.cancel_requested_at == asked
        assert requested.lease_token == leased.lease_token and requested.lease_expires_at == beat.lease_expires_at
        assert repository.cancel(leased.id, now=clock.advance(1)) == requested  # the first request stands
        beat = repository.heartbeat(leased.id, self.token_of(leased), now=clock.advance(1), lease_timeout=60)
        assert beat.cancel_requested_at == asked and beat.status is JobStatus.RUNNING
        assert beat.lease_expires_at == clock.now() + timedelta(seconds=60)
        assert repository.get(leased.id) == beat

    @pytest.mark.parametrize("outcome", sorted(OUTCOMES))
    def test_every_outcome_of_a_cancel_requested_job_records_cancelled(
        self, repository: JobRepository, clock: FakeClock, outcome: str
    ) -> None:
        job = self.add(repository, clock, max_attempts=3)
        leased = self.lease_one(repository, clock)
        asked = clock.advance(1)
        repository.cancel(job.id, now=asked)
        now = clock.advance(1)
        write, error = OUTCOMES[outcome]
        written = write(repository, leased, self.token_of(leased), now)
        assert isinstance(written, Job), written
        assert written.status is JobStatus.CANCELLED and written.finished_at == now and written.attempts == 1
        assert (written.lease_token, written.leased_by, written.leased_at, written.lease_expires_at) == (None,) * 4
        assert written.last_error == error and written.cancel_requested_at == asked
        assert written.scheduled_at == job.scheduled_at
        assert repository.get(job.id) == written
        assert repository.lease(queues=None, worker_id="w", now=now + timedelta(hours=1), lease_timeout=60) == []

    def test_a_batch_of_completions_cancels_only_the_requested_job(self, repository: JobRepository, clock: FakeClock) -> None:
        for n in range(4):
            self.add(repository, clock, {"n": n})
        leased = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=3)
        repository.cancel(leased[1].id, now=clock.advance(1))
        now = clock.advance(1)
        results, more = repository.complete_and_lease(
            [(j.id, self.token_of(j)) for j in leased], now=now, queues=None, worker_id="w", lease_timeout=60, limit=5
        )
        assert [r.status for r in results if isinstance(r, Job)] == [
            JobStatus.COMPLETED, JobStatus.CANCELLED, JobStatus.COMPLETED]
        assert len(more) == 1 and more[0].status is JobStatus.RUNNING and more[0].cancel_requested_at is None
        repository.cancel(more[0].id, now=now)
        (last,) = repository.complete_many([(more[0].id, self.token_of(more[0]))], now=clock.advance(1))
        assert isinstance(last, Job) and last.status is JobStatus.CANCELLED and last.finished_at == clock.now()

    def test_the_reaper_makes_a_cancel_requested_job_cancelled(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, max_attempts=3)
        other = self.add(repository, clock, max_attempts=3)
        leased = repository.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=60, limit=2)
        repository.cancel(job.id, now=clock.advance(10))
        now = clock.advance(50)
        reaped = {j.id: j for j in repository.reap(now=now)}
        assert set(reaped) == {job.id, other.id}
        assert reaped[other.id].status is JobStatus.RETRYING
        gone = reaped[job.id]
        expected = transitions.reap(next(j for j in leased if j.id == job.id), now=now, token=self.token_of(leased[0]))
        assert gone.status is JobStatus.CANCELLED and gone.finished_at == now and gone.attempts == 1
        assert gone.last_error == expected.last_error  # the reaper's own text, as for any expired lease
        assert repository.get(job.id) == gone
        assert repository.reap(now=now + timedelta(hours=1)) == []
        assert [j.id for j in repository.lease(queues=None, worker_id="w", now=now, lease_timeout=60, limit=5)] == [other.id]

    # -- what cannot be cancelled ------------------------------------------------------------
    @pytest.mark.parametrize("state", ["completed", "dead", "cancelled"])
    def test_a_finished_job_cannot_be_cancelled(self, repository: JobRepository, clock: FakeClock, state: str) -> None:
        job = self.add(repository, clock)
        if state == "cancelled":
            repository.cancel(job.id, now=clock.now())
        else:
            leased = self.lease_one(repository, clock)
            if state == "completed":
                repository.complete(job.id, self.token_of(leased), now=clock.now())
            else:
                repository.dead_letter(job.id, self.token_of(leased), now=clock.now(), error="E")
        before = repository.get(job.id)
        with pytest.raises(InvalidTransition) as info:
            repository.cancel(job.id, now=clock.advance(1))
        assert (info.value.job_id, info.value.status, info.value.action) == (job.id, state, "cancel")
        assert f"cannot cancel a job that is {state}" in str(info.value)
        assert repository.get(job.id) == before

    def test_cancel_of_an_unknown_job_raises_not_found(self, repository: JobRepository, clock: FakeClock) -> None:
        with pytest.raises(JobNotFound):
            repository.cancel(424242, now=clock.now())

    def test_retry_takes_a_cancelled_job_back(self, repository: JobRepository, clock: FakeClock) -> None:
        waiting = self.add(repository, clock, {"n": 1})
        running = self.add(repository, clock, {"n": 2})
        leased = repository.lease_job(running.id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert leased is not None
        repository.cancel(waiting.id, now=clock.now())
        repository.cancel(running.id, now=clock.now())
        repository.complete(running.id, self.token_of(leased), now=clock.advance(1))
        for job_id in (waiting.id, running.id):
            back = repository.retry_dead(job_id, now=clock.advance(1))
            assert back.status is JobStatus.QUEUED and back.attempts == 0 and back.scheduled_at == clock.now()
            assert back.finished_at is None and back.cancel_requested_at is None
        again = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=5)
        assert sorted(j.id for j in again) == [waiting.id, running.id]
        for job in again:
            assert repository.complete(job.id, self.token_of(job), now=clock.now()).status is JobStatus.COMPLETED

    # -- many at once ------------------------------------------------------------------------
    def test_cancel_many_by_filter_in_batches(self, repository: JobRepository, clock: FakeClock) -> None:
        jobs = [self.add(repository, clock, {"n": n}, queue="a" if n % 2 else "b",
                         job_type="emails.send" if n < 6 else "reports.build") for n in range(8)]
        running = repository.lease_job(jobs[1].id, worker_id="w", now=clock.now(), lease_timeout=60)
        done = repository.lease_job(jobs[3].id, worker_id="w", now=clock.now(), lease_timeout=60)
        assert running is not None and done is not None
        repository.complete(done.id, self.token_of(done), now=clock.now())
        now = clock.advance(1)
        first = repository.cancel_many(now=now, queues=["a"], limit=2)  # a: 1 (running), 3 (done), 5, 7
        assert [j.id for j in first] == [jobs[1].id, jobs[5].id]
        assert first[0].status is JobStatus.RUNNING and first[0].cancel_requested_at == now
        assert first[1].status is JobStatus.CANCELLED and first[1].finished_at == now
        rest = repository.cancel_many(now=now, queues=["a"], after_id=first[-1].id, limit=2)
        assert [j.id for j in rest] == [jobs[7].id]
        assert repository.cancel_many(now=now, queues=["a"]) == []  # a request already stored is not repeated
        by_type = repository.cancel_many(now=now, job_types=["reports.build"], statuses=[JobStatus.QUEUED])
        assert [j.id for j in by_type] == [jobs[6].id]
        assert [j.id for j in repository.cancel_many(now=now, statuses=["running"])] == []
        left = repository.cancel_many(now=now)
        assert [j.id for j in left] == [jobs[0].id, jobs[2].id, jobs[4].id]
        assert repository.get(jobs[3].id).status is JobStatus.COMPLETED
        counts = repository.count_by_status()
        assert (counts[JobStatus.CANCELLED], counts[JobStatus.RUNNING], counts[JobStatus.COMPLETED]) == (6, 1, 1)

    @pytest.mark.parametrize(
        ("arguments", "field"),
        [({"statuses": ["completed"]}, "statuses"), ({"statuses": ["bogus"]}, "statuses"), ({"statuses": []}, "statuses"),
         ({"limit": 0}, "limit")],
    )
    def test_cancel_many_refuses_bad_filters_and_writes_nothing(
        self, repository: JobRepository, clock: FakeClock, arguments: dict[str, Any], field: str
    ) -> None:
        job = self.add(repository, clock)
        with pytest.raises(ValidationError) as info:
            repository.cancel_many(now=clock.now(), **arguments)
        assert info.value.field == field
        assert repository.get(job.id) == job

    def test_find_by_key(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, idempotency_key="k-1")
        self.add(repository, clock)
        assert repository.find_by_key("k-1") == job
        assert repository.find_by_key("k-2") is None

    # -- snooze ------------------------------------------------------------------------------
    def test_snooze_gives_the_job_back_due_later_without_using_the_attempt(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        job = self.add(repository, clock, max_attempts=1)
        leased = self.lease_one(repository, clock)
        now = clock.advance(2)
        snoozed = repository.snooze(job.id, self.token_of(leased), now=now, until=now + timedelta(seconds=30))
        assert snoozed.status is JobStatus.QUEUED and snoozed.attempts == 0 and snoozed.last_error is None
        assert snoozed.scheduled_at == now + timedelta(seconds=30) and snoozed.finished_at is None
        assert (snoozed.lease_token, snoozed.leased_by, snoozed.leased_at, snoozed.lease_expires_at) == (None,) * 4
        assert repository.get(job.id) == snoozed
        with pytest.raises(LeaseLost):  # fenced like every holder write
            repository.snooze(job.id, self.token_of(leased), now=now, until=now)
        assert repository.get(job.id) == snoozed
        clock.set(now + timedelta(seconds=29.999999))
        assert repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60) == []
        again = self.lease_one(repository, clock.advance(0.000001) and clock)
        assert again.id == job.id and again.attempts == 1  # max_attempts 1: the snooze cost nothing

    def test_snooze_keeps_the_last_failure(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock, max_attempts=3)
        first = self.lease_one(repository, clock)
        repository.fail(job.id, self.token_of(first), now=clock.now(), error="E: first", retry_at=clock.now())
        second = self.lease_one(repository, clock)
        snoozed = repository.snooze(job.id, self.token_of(second), now=clock.now(), until=clock.now() + timedelta(minutes=1))
        assert snoozed.last_error == "E: first" and snoozed.attempts == 1

    # -- races: whichever commits first wins, never neither ----------------------------------
    def _race(self, first: Callable[[], None], second: Callable[[], None]) -> None:
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def run(work: Callable[[], None]) -> Callable[[], None]:
            def target() -> None:
                try:
                    start.wait()
                    work()
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            return target

        self.run_threads([run(first), run(second)])
        assert not errors, errors

    def _leased_jobs(self, repository: JobRepository, clock: FakeClock, lease_timeout: float = 15 * MINUTE) -> list[Job]:
        for n in range(self.cancel_race_jobs):
            self.add(repository, clock, {"n": n}, max_attempts=3)
        leased = repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=lease_timeout,
                                  limit=self.cancel_race_jobs)
        assert len(leased) == self.cancel_race_jobs
        return leased

    def _cancel_all(self, repository: JobRepository, ids: list[int], now: Any, answers: dict[int, Any]) -> Callable[[], None]:
        def cancel() -> None:
            for job_id in reversed(ids):
                try:
                    answers[job_id] = repository.cancel(job_id, now=now)
                except InvalidTransition as refused:
                    answers[job_id] = refused

        return cancel

    def test_cancel_racing_leases_ends_one_way_or_the_other(self, repository: JobRepository, clock: FakeClock) -> None:
        ids = [self.add(repository, clock, {"n": n}).id for n in range(self.cancel_race_jobs)]
        now = clock.now()
        answers: dict[int, Any] = {}
        leased: dict[int, Job] = {}

        def lease() -> None:
            while batch := repository.lease(queues=None, worker_id="w", now=now, lease_timeout=60, limit=3):
                leased.update((j.id, j) for j in batch)

        self._race(lease, self._cancel_all(repository, ids, now, answers))
        for job_id in ids:
            final, answer = repository.get(job_id), answers[job_id]
            if job_id in leased:  # leased first: the cancel stored a request on the running job
                assert final.status is JobStatus.RUNNING and final.cancel_requested_at == now, final
                assert isinstance(answer, Job) and answer.status is JobStatus.RUNNING
            else:  # cancelled first: never leased
                assert final.status is JobStatus.CANCELLED and final == answer, final

    @pytest.mark.parametrize("outcome", ["complete", "complete_many", "complete_and_lease", "fail"])
    def test_cancel_racing_an_outcome_write_ends_one_way_or_the_other(
        self, repository: JobRepository, clock: FakeClock, outcome: str
    ) -> None:
        leased = self._leased_jobs(repository, clock)
        ids = [j.id for j in leased]
        now = clock.advance(1)
        answers: dict[int, Any] = {}
        written: dict[int, Any] = {}

        def write() -> None:
            if outcome == "complete":
                for job in leased:
                    written[job.id] = repository.complete(job.id, self.token_of(job), now=now)
            elif outcome == "fail":
                for job in leased:
                    written[job.id] = repository.fail(job.id, self.token_of(job), now=now, error="E",
                                                      retry_at=now + timedelta(hours=1))
            else:
                for i in range(0, len(leased), 4):
                    chunk = [(j.id, self.token_of(j)) for j in leased[i:i + 4]]
                    if outcome == "complete_many":
                        results = repository.complete_many(chunk, now=now)
                    else:
                        results, more = repository.complete_and_lease(chunk, now=now, queues=None, worker_id="w",
                                                                      lease_timeout=60, limit=2)
                        assert more == []
                    written.update((job_id, result) for (job_id, _), result in zip(chunk, results))

        self._race(write, self._cancel_all(repository, ids, now, answers))
        for job_id in ids:
            final, answer, result = repository.get(job_id), answers[job_id], written[job_id]
            assert isinstance(result, Job), result  # the holder's write never fails for a cancel
            if outcome == "fail":  # retrying first and then cancelled, or cancelled by the failure itself
                assert final.status is JobStatus.CANCELLED and final.last_error == "E", final
                assert result.status in (JobStatus.RETRYING, JobStatus.CANCELLED)
                assert (answer.status is JobStatus.CANCELLED) == (result.status is JobStatus.RETRYING)
            elif isinstance(answer, InvalidTransition):  # the completion won
                assert answer.status == "completed" and final.status is JobStatus.COMPLETED == result.status
            else:  # the cancel won: its request turned the completion into cancelled
                assert answer.status is JobStatus.RUNNING and answer.cancel_requested_at == now
                assert final.status is JobStatus.CANCELLED and final == result

    def test_cancel_racing_heartbeats_always_leaves_the_request(self, repository: JobRepository, clock: FakeClock) -> None:
        leased = self._leased_jobs(repository, clock, lease_timeout=30)
        now = clock.advance(1)
        answers: dict[int, Any] = {}
        beats: dict[int, Job] = {}

        def heartbeat() -> None:
            for job in leased:
                beats[job.id] = repository.heartbeat(job.id, self.token_of(job), now=now, lease_timeout=60)

        self._race(heartbeat, self._cancel_all(repository, [j.id for j in leased], now, answers))
        for job in leased:
            final = repository.get(job.id)
            assert final.status is JobStatus.RUNNING and final.cancel_requested_at == now
            assert final.lease_expires_at == now + timedelta(seconds=60) and final.lease_token == job.lease_token
            assert beats[job.id].cancel_requested_at in (None, now)

    def test_cancel_racing_the_reaper_ends_cancelled(self, repository: JobRepository, clock: FakeClock) -> None:
        leased = self._leased_jobs(repository, clock, lease_timeout=60)
        now = clock.advance(61)
        answers: dict[int, Any] = {}
        reaped: dict[int, Job] = {}

        def reap() -> None:
            while batch := repository.reap(now=now, limit=3):
                reaped.update((j.id, j) for j in batch)

        self._race(reap, self._cancel_all(repository, [j.id for j in leased], now, answers))
        assert sorted(reaped) == sorted(j.id for j in leased)  # every expired lease taken back once
        for job in leased:
            final, answer = repository.get(job.id), answers[job.id]
            assert final.status is JobStatus.CANCELLED and final.finished_at == now, final  # never retrying for good
            assert isinstance(answer, Job)
            if answer.status is JobStatus.RUNNING:  # the request came first: the reaper wrote cancelled
                assert reaped[job.id].status is JobStatus.CANCELLED
            else:  # the reaper came first (retrying), then the cancel
                assert reaped[job.id].status is JobStatus.RETRYING and answer == final


__all__ = ["CancellationContract"]
