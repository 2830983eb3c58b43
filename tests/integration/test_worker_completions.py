"""The worker pool's completion batcher: several threads' completions in one ``complete_many``,
each thread learning its own outcome only after the write returned."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import datetime

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.domain.errors import LeaseLost, StorageUnavailable
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job
from tether.entrypoints.worker.completions import CompletionBatcher


class GatedRepository(InMemoryJobRepository):
    """Records each complete_many batch; the first one waits at a gate so the others pile up."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_next = 0

    def complete_many(self, items: Sequence[tuple[int, str]], *, now: datetime) -> list[Job | LeaseLost]:
        self.entered.set()
        self.gate.wait(20)
        if self.fail_next:
            self.fail_next -= 1
            raise StorageUnavailable("connection reset")
        self.batches.append([job_id for job_id, _ in items])
        return super().complete_many(items, now=now)


def _leased(repo: InMemoryJobRepository, clock: FakeClock, n: int) -> list[Job]:
    for i in range(n):
        repo.enqueue(prepare_job("t", {"i": i}, now=clock.now()), now=clock.now())
    return repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=n)


def test_waiting_completions_go_out_in_one_batch_and_each_caller_gets_its_own_outcome() -> None:
    repo, clock = GatedRepository(), FakeClock()
    jobs = _leased(repo, clock, 6)
    stale = jobs[3]
    clock.advance(61)
    repo.reap(now=clock.now())  # every lease expired ...
    fresh = {j.id: j for j in repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=6)}
    tokens = {j.id: fresh[j.id].lease_token for j in jobs}
    tokens[stale.id] = stale.lease_token  # ... and job 3's caller still holds its old token
    batcher = CompletionBatcher(repo, clock, max_batch=100)
    batcher.start()
    outcomes: dict[int, object] = {}

    def finish(job_id: int) -> None:
        try:
            outcomes[job_id] = batcher.complete(job_id, tokens[job_id])  # type: ignore[arg-type]
        except LeaseLost as lost:
            outcomes[job_id] = lost

    first = threading.Thread(target=finish, args=(jobs[0].id,))
    first.start()
    assert repo.entered.wait(10)  # the first flush is on the wire (held at the gate) ...
    others = [threading.Thread(target=finish, args=(j.id,)) for j in jobs[1:]]
    for t in others:
        t.start()
    for _ in range(200):  # ... while the five others queue up behind it
        if len(batcher._pending) == 5:
            break
        threading.Event().wait(0.01)
    assert len(batcher._pending) == 5
    assert outcomes == {}  # nobody has an answer before its write returned
    repo.gate.set()
    for t in [first, *others]:
        t.join(10)
    batcher.close()
    assert repo.batches == [[jobs[0].id], [j.id for j in jobs[1:]]]
    assert isinstance(outcomes[stale.id], LeaseLost)
    assert repo.get(stale.id).status is JobStatus.RUNNING  # the stale write changed nothing
    assert repo.get(stale.id).lease_token == fresh[stale.id].lease_token
    for job in jobs:
        if job.id != stale.id:
            result = outcomes[job.id]
            assert isinstance(result, Job) and result.status is JobStatus.COMPLETED
            assert repo.get(job.id).status is JobStatus.COMPLETED


def test_a_batch_that_fails_raises_in_every_caller_and_a_retry_completes() -> None:
    repo, clock = GatedRepository(), FakeClock()
    repo.gate.set()
    repo.fail_next = 1
    job = _leased(repo, clock, 1)[0]
    batcher = CompletionBatcher(repo, clock)
    batcher.start()
    with pytest.raises(StorageUnavailable):
        batcher.complete(job.id, job.lease_token)  # type: ignore[arg-type]
    assert repo.get(job.id).status is JobStatus.RUNNING
    assert batcher.complete(job.id, job.lease_token).status is JobStatus.COMPLETED  # type: ignore[arg-type]
    batcher.close()
    # after close, completions are written directly
    other = _leased(repo, clock, 1)[0]
    assert batcher.complete(other.id, other.lease_token).status is JobStatus.COMPLETED  # type: ignore[arg-type]


def test_in_a_pool_a_job_stays_in_flight_and_heartbeated_until_its_batched_completion_returned() -> None:
    from tether.adapters.clock import SystemClock
    from tether.adapters.polling import PollingDispatcher
    from tether.entrypoints.service import Tether

    repo = GatedRepository()
    clock = SystemClock()
    app = Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock)
    ran = threading.Event()
    app.handler("t")(lambda payload: ran.set())
    job = app.enqueue("t", {}).job
    pool = app.worker(concurrency=2, lease_timeout=1.0, heartbeat_interval=0.1, reap_interval=0.2)
    pool.start()
    try:
        assert ran.wait(10) and repo.entered.wait(10)  # the handler returned; its completion waits at the gate
        first_expiry = repo.get(job.id).lease_expires_at
        assert first_expiry is not None
        deadline = time.monotonic() + 10
        while repo.get(job.id).lease_expires_at == first_expiry and time.monotonic() < deadline:
            time.sleep(0.02)
        held = repo.get(job.id)
        assert held.status is JobStatus.RUNNING and held.lease_expires_at > first_expiry  # heartbeated while waiting
        time.sleep(1.2)  # longer than lease_timeout: only the heartbeats keep the reaper away
        assert repo.get(job.id).status is JobStatus.RUNNING
        assert pool.in_flight == 1 and pool.stats.completed == 0  # not finished before its write returned
        repo.gate.set()
        deadline = time.monotonic() + 10
        while pool.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pool.in_flight == 0
        assert (pool.stats.completed, pool.stats.lease_lost, pool.stats.reaped) == (1, 0, 0)
        assert repo.get(job.id).status is JobStatus.COMPLETED and repo.get(job.id).attempts == 1
    finally:
        repo.gate.set()
        pool.stop()
        app.close()


def test_a_batch_retried_after_a_storage_error_is_logged_once_with_its_count(caplog: pytest.LogCaptureFixture) -> None:
    """One completion whose batch hit StorageUnavailable before its give-up time: sent again, and
    the warning counts it as "1 job(s)", never "1 jobs"."""
    repo, clock = GatedRepository(), FakeClock()
    repo.gate.set()
    repo.fail_next = 1
    job = _leased(repo, clock, 1)[0]
    batcher = CompletionBatcher(repo, clock, retry_delays=(0.01, 0.01))
    answered = threading.Event()
    answers: list[object] = []

    def done(result: object) -> None:
        answers.append(result)
        answered.set()

    batcher.start()
    with caplog.at_level("WARNING", logger="tether"):
        assert batcher.submit(job.id, job.lease_token, done, give_up_at=time.monotonic() + 30)  # type: ignore[arg-type]
        assert answered.wait(10)
    batcher.close()
    assert isinstance(answers[0], Job) and answers[0].status is JobStatus.COMPLETED
    warnings = [r.getMessage() for r in caplog.records if "completions of" in r.getMessage()]
    assert warnings == ["completions of 1 job(s) failed (StorageUnavailable: connection reset); retrying"]
