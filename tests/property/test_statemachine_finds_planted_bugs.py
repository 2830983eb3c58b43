"""The state machine earns its keep: with its default budget it finds planted fencing bugs."""

from __future__ import annotations

from datetime import datetime

import attrs
import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.job import Job
from tether.testing.statemachine import RepositoryStateMachine, lockstep_machine

#: The machine's own budget (examples and steps), made deterministic and without the example
#: database, so the test shows what the default budget finds from scratch.  Shrinking is skipped:
#: finding the bug is the point here, and a minimal history would only cost time.
BUDGET = settings(
    RepositoryStateMachine.hypothesis_settings,
    derandomize=True,
    database=None,
    print_blob=False,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.generate],
)


class TokenBlindCompleteRepository(InMemoryJobRepository):
    """Planted bug: ``complete`` checks only that the job is running, not whose lease it is."""

    def complete(self, job_id: int, token: str, *, now: datetime) -> Job:
        current = self._jobs.get(job_id)
        if current is not None and current.lease_token is not None:
            token = current.lease_token
        return super().complete(job_id, token, now=now)


class JobHistoryFenceRepository(InMemoryJobRepository):
    """Planted bug: ``fail`` accepts any token the job was ever leased under, as a fence on
    (job id, worker name) would after a restart (case C03's trap)."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[int, set[str]] = {}

    def _store(self, job: Job) -> None:
        if job.lease_token is not None:
            self.history.setdefault(job.id, set()).add(job.lease_token)
        super()._store(job)

    def fail(self, job_id: int, token: str, *, now: datetime, error: str, retry_at: datetime | None) -> Job:
        current = self._jobs.get(job_id)
        if current is not None and current.lease_token is not None and token in self.history.get(job_id, set()):
            token = current.lease_token
        return super().fail(job_id, token, now=now, error=error, retry_at=retry_at)


class ReaperIgnoresExpiryRepository(InMemoryJobRepository):
    """Planted bug: the reaper takes back leases one minute early."""

    def reap(self, *, now: datetime, limit: int = 100) -> list[Job]:
        from datetime import timedelta

        return super().reap(now=now + timedelta(seconds=60), limit=limit)


class ResurrectingReaperRepository(InMemoryJobRepository):
    """Planted bug: the reaper forgets an operator's cancel, so a cancelled running job whose lease
    expired comes back as ``retrying`` (and runs again) instead of ending ``cancelled``."""

    def reap(self, *, now: datetime, limit: int = 100) -> list[Job]:
        with self._lock:
            for job_id in list(self._running):
                job = self._jobs[job_id]
                if job.cancel_requested_at is not None and job.lease_expired(now):
                    self._jobs[job_id] = attrs.evolve(job, cancel_requested_at=None)
            return super().reap(now=now, limit=limit)


class ReaperForgetsHistoryRepository(InMemoryJobRepository):
    """Planted bug: the reaper writes the state change but not the attempt it ends (as a reaper
    statement without the history append would)."""

    def reap(self, *, now: datetime, limit: int = 100) -> list[Job]:
        with self._lock:
            before = {job_id: self._jobs[job_id].history for job_id in self._running}
            reaped = [attrs.evolve(job, history=before[job.id]) for job in super().reap(now=now, limit=limit)]
            for job in reaped:
                self._jobs[job.id] = job
            return reaped


class RunningLimitBlindRepository(InMemoryJobRepository):
    """Planted bug: leases ignore a queue's running limit (pause still holds)."""

    def _room(self, queue: str, now: datetime) -> int | None:
        state = self._queue_states.get(queue)
        if state is None or state.max_running is None:
            return super()._room(queue, now)
        self._queue_states[queue] = attrs.evolve(state, max_running=None)
        try:
            return super()._room(queue, now)
        finally:
            self._queue_states[queue] = state


class KeyLimitBlindRepository(InMemoryJobRepository):
    """Planted bug: leases ignore a queue's per-key running limit (its other limits still hold)."""

    def _key_holds(self, queue: str, now: datetime) -> dict[str, int] | None:
        return None


@pytest.mark.parametrize(
    ("repository_class", "symptom"),
    [
        (TokenBlindCompleteRepository, ("complete with a stale token was accepted",)),
        (JobHistoryFenceRepository, ("fail with a stale token was accepted",)),
        # seen either when the reaper returns jobs the model keeps, or on the times it wrote
        (ReaperIgnoresExpiryRepository, ("the model expected ordinals", "(repository, model) differ")),
        (ResurrectingReaperRepository, ("(repository, model) differ",)),
        (ReaperForgetsHistoryRepository, ("'history'",)),
        (RunningLimitBlindRepository, ("the model's lease order says", "should raise", "the model says False")),
        (KeyLimitBlindRepository, ("the model's lease order says", "the model says False")),
    ],
    ids=["complete-ignores-token", "fail-fenced-on-job-history", "early-reaper", "reaper-resurrects-cancelled",
         "reaper-forgets-history", "lease-ignores-running-limit", "lease-ignores-per-key-limit"],
)
def test_state_machine_finds_the_planted_bug(
    repository_class: type[InMemoryJobRepository], symptom: tuple[str, ...]
) -> None:
    class Planted(RepositoryStateMachine):
        def make_repository(self) -> InMemoryJobRepository:
            return repository_class()

    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(Planted, settings=BUDGET)
    assert any(text in str(info.value) for text in symptom), str(info.value)


def test_the_correct_repository_passes_the_same_budget() -> None:
    run_state_machine_as_test(RepositoryStateMachine, settings=BUDGET)


@pytest.mark.parametrize(
    "repository_class",
    [TokenBlindCompleteRepository, ReaperIgnoresExpiryRepository, ResurrectingReaperRepository,
     ReaperForgetsHistoryRepository],
    ids=["complete-ignores-token", "early-reaper", "reaper-resurrects-cancelled", "reaper-forgets-history"],
)
def test_lockstep_machine_finds_a_repository_that_differs(repository_class: type[InMemoryJobRepository]) -> None:
    machine = lockstep_machine(InMemoryJobRepository, repository_class, name="PlantedLockstep")
    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(machine, settings=BUDGET)
    assert "!=" in str(info.value) or "differ" in str(info.value)
