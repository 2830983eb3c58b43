"""Observers of a worker pool, and the job fields of its log records, with real threads on the
in-memory repository: what each observer call sees, in which order, and that an observer's
error never changes a job."""

from __future__ import annotations

import logging
import re
import threading

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.polling import PollingDispatcher
from tether.domain.errors import PermanentError
from tether.domain.job import Job, JobStatus
from tether.domain.retry import RetryPolicy
from tether.domain.snooze import Snooze
from tether.entrypoints.execution import Execution, Outcome
from tether.entrypoints.job_logs import JOB_FIELDS, JobFieldsFilter, JobLogObserver
from tether.entrypoints.service import Tether
from tether.entrypoints.worker.observers import PoolView

FAST = RetryPolicy(base_seconds=0.05, cap_seconds=0.1, jitter=0)


def make_app() -> Tether:
    repo = InMemoryJobRepository()
    clock = SystemClock()
    return Tether(repo, PollingDispatcher(repo, clock, poll_interval=0.05), clock, retry_policy=FAST)


def run_until_idle(app: Tether, **kwargs: object) -> object:
    return app.worker(reap_interval=0.2, lease_timeout=10.0, **kwargs).run(  # type: ignore[arg-type]
        stop_when_idle=True, install_signal_handlers=False)


class Recorder:
    """Records every call, with the thread it came on."""

    def __init__(self) -> None:
        self.pools: list[PoolView] = []
        self.started: dict[int, str] = {}
        self.returned: dict[int, tuple[str, object, Outcome | None]] = {}
        self.finished: list[tuple[int, Outcome, float]] = []
        self.lock = threading.Lock()

    def pool_started(self, pool: PoolView) -> None:
        self.pools.append(pool)

    def job_started(self, job: Job, worker_id: str) -> object:
        with self.lock:
            self.started[job.id] = threading.current_thread().name
        return ("state", job.id)

    def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
        with self.lock:
            self.returned[job.id] = (threading.current_thread().name, state,
                                     None if execution is None else execution.outcome)

    def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
        with self.lock:
            self.finished.append((job.id, outcome, seconds))


def test_each_recorded_outcome_is_reported_once_with_its_time() -> None:
    app = make_app()

    @app.handler("ok")
    def ok(payload: dict) -> None:
        pass

    @app.handler("flaky", max_attempts=2)
    def flaky(payload: dict) -> None:
        raise ValueError("no")

    @app.handler("doomed")
    def doomed(payload: dict) -> None:
        raise PermanentError("never")

    snoozed_once: set[int] = set()

    @app.handler("sleepy")
    def sleepy(payload: dict) -> None:
        if payload["n"] not in snoozed_once:
            snoozed_once.add(payload["n"])
            raise Snooze(0.05)

    jobs = {name: app.enqueue(name, {"n": 1}).job.id for name in ("ok", "flaky", "doomed", "sleepy")}
    recorder = Recorder()
    pool = app.worker(reap_interval=0.2, lease_timeout=10.0, concurrency=2, observers=[recorder])
    pool.run(stop_when_idle=True, install_signal_handlers=False)

    assert recorder.pools == [pool]
    by_job: dict[int, list[Outcome]] = {}
    for job_id, outcome, seconds in recorder.finished:
        by_job.setdefault(job_id, []).append(outcome)
        assert 0 <= seconds < 5
    assert by_job == {
        jobs["ok"]: [Outcome.COMPLETED],
        jobs["flaky"]: [Outcome.RETRYING, Outcome.DEAD],
        jobs["doomed"]: [Outcome.DEAD],
        jobs["sleepy"]: [Outcome.SNOOZED, Outcome.COMPLETED],
    }
    for job_id, (thread, state, outcome) in recorder.returned.items():
        assert thread == recorder.started[job_id] and thread.startswith("tether-worker-")  # the handler's thread
        assert state == ("state", job_id)
    assert recorder.returned[jobs["doomed"]][2] is Outcome.DEAD


def test_an_observer_that_raises_changes_no_job_and_the_next_observer_still_hears() -> None:
    app = make_app()

    @app.handler("ok")
    def ok(payload: dict) -> None:
        pass

    class Broken:
        def pool_started(self, pool: PoolView) -> None:
            raise RuntimeError("broken observer")

        def job_started(self, job: Job, worker_id: str) -> object:
            raise RuntimeError("broken observer")

        def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
            raise RuntimeError("broken observer")

        def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
            raise RuntimeError("broken observer")

    recorder = Recorder()
    ids = [app.enqueue("ok", {"n": n}).job.id for n in range(5)]
    stats = run_until_idle(app, observers=[Broken(), recorder])
    assert [app.get(i).status for i in ids] == [JobStatus.COMPLETED] * 5
    assert stats.completed == 5  # type: ignore[attr-defined]
    assert sorted(job_id for job_id, _, _ in recorder.finished) == ids


def test_a_lone_observer_that_raises_changes_no_job_and_hears_each_job() -> None:
    app = make_app()

    @app.handler("ok")
    def ok(payload: dict) -> None:
        pass

    class Failing(Recorder):
        """Raises in job_started for even jobs (then its handler_returned is not called), and
        in handler_returned and job_finished for every job, after recording it."""

        def job_started(self, job: Job, worker_id: str) -> object:
            state = super().job_started(job, worker_id)
            if job.id % 2 == 0:
                raise RuntimeError("broken observer")
            return state

        def handler_returned(self, job: Job, state: object, execution: Execution | None) -> None:
            super().handler_returned(job, state, execution)
            raise RuntimeError("broken observer")

        def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
            super().job_finished(job, outcome, seconds)
            raise RuntimeError("broken observer")

    lone = Failing()
    ids = [app.enqueue("ok", {"n": n}).job.id for n in range(6)]
    stats = run_until_idle(app, observers=[lone])
    assert [app.get(i).status for i in ids] == [JobStatus.COMPLETED] * 6 and stats.completed == 6  # type: ignore[attr-defined]
    assert sorted(lone.started) == ids and sorted(job_id for job_id, _, _ in lone.finished) == ids
    assert sorted(lone.returned) == [i for i in ids if i % 2]
    assert all(state == ("state", job_id) for job_id, (_, state, _) in lone.returned.items())


def test_app_observers_come_before_the_pools_own() -> None:
    app = make_app()

    @app.handler("ok")
    def ok(payload: dict) -> None:
        pass

    order: list[str] = []

    class Named(Recorder):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def job_finished(self, job: Job, outcome: Outcome, seconds: float) -> None:
            order.append(self.name)

    app.observers.append(Named("app"))
    app.enqueue("ok")
    run_until_idle(app, observers=[Named("pool")])
    assert order == ["app", "pool"]


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(JobFieldsFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def capture() -> object:
    handler = Capture()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def test_records_about_a_job_carry_its_fields_the_handlers_own_included(capture: Capture) -> None:
    app = make_app()
    own = logging.getLogger("myapp.jobs")

    @app.handler("flaky", max_attempts=2)
    def flaky(payload: dict) -> None:
        own.info("working on %s", payload["n"])
        raise ValueError("no")

    job = app.enqueue("flaky", {"n": 7}).job
    pool = app.worker(reap_interval=0.2, lease_timeout=10.0, worker_id="w-logs")
    pool.run(stop_when_idle=True, install_signal_handlers=False)

    mine = [r for r in capture.records if r.name == "myapp.jobs"]
    assert [(r.job_id, r.job_type, r.queue, r.attempt, r.worker_id) for r in mine] == [  # type: ignore[attr-defined]
        (job.id, "flaky", "default", 1, "w-logs"), (job.id, "flaky", "default", 2, "w-logs")]
    retry_line = next(r for r in capture.records if r.name == "tether.worker" and "retrying at" in r.getMessage())
    dead_line = next(r for r in capture.records if r.name == "tether.worker" and "is dead" in r.getMessage())
    assert (retry_line.job_id, retry_line.attempt) == (job.id, 1)  # type: ignore[attr-defined]
    assert (dead_line.job_id, dead_line.attempt, dead_line.worker_id) == (job.id, 2, "w-logs")  # type: ignore[attr-defined]
    start_line = next(r for r in capture.records if "starting" in r.getMessage())
    assert not hasattr(start_line, "job_id")  # a record about no job has no job fields


def test_job_lines_are_opt_in_and_carry_outcome_and_duration(capture: Capture) -> None:
    app = make_app()

    @app.handler("ok")
    def ok(payload: dict) -> None:
        pass

    app.enqueue("ok")
    run_until_idle(app, worker_id="w-quiet")
    assert not [r for r in capture.records if r.name == "tether.jobs"]  # off by default

    job = app.enqueue("ok").job
    run_until_idle(app, worker_id="w-lines", observers=[JobLogObserver()])
    lines = [r for r in capture.records if r.name == "tether.jobs"]
    assert [r.getMessage().split(" in ")[0] for r in lines] == [f"job {job.id} (ok) started, attempt 1/3",
                                                                 f"job {job.id} (ok) completed"]
    assert all(r.levelno == logging.INFO for r in lines)
    for record in lines:
        assert {name: getattr(record, name) for name in JOB_FIELDS} == {
            "job_id": job.id, "job_type": "ok", "queue": "default", "attempt": 1, "worker_id": "w-lines"}
    assert lines[1].outcome == "completed" and lines[1].duration_seconds >= 0  # type: ignore[attr-defined]


def test_a_failed_attempts_line_says_how_long_it_ran_not_when_it_is_retried(capture: Capture) -> None:
    app = make_app()
    calls: list[int] = []

    @app.handler("flaky")
    def flaky(payload: dict) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("not yet")

    job = app.enqueue("flaky").job
    run_until_idle(app, worker_id="w-flaky", observers=[JobLogObserver()])
    lines = [r for r in capture.records if r.name == "tether.jobs" and "started" not in r.getMessage()]
    assert [r.outcome for r in lines] == ["retrying", "completed"]  # type: ignore[attr-defined]
    failed, completed = (r.getMessage() for r in lines)
    assert re.fullmatch(rf"job {job.id} \(flaky\) failed after [0-9.<> ]+ (ms|s), retrying", failed), failed
    assert re.fullmatch(rf"job {job.id} \(flaky\) completed in [0-9.<> ]+ (ms|s)", completed), completed
    assert "retrying in" not in failed  # the number is the attempt's, not the backoff


def test_the_reapers_line_about_a_job_carries_its_fields(capture: Capture) -> None:
    from tether.adapters.clock import FakeClock
    from tether.entrypoints.maintenance import Reaper

    repo = InMemoryJobRepository()
    clock = FakeClock()
    app = Tether(repo, PollingDispatcher(repo, clock), clock)
    job = app.enqueue("slow", queue="reports").job
    repo.lease(queues=None, worker_id="gone", now=clock.now(), lease_timeout=1, limit=1)
    clock.advance(2)
    assert [j.id for j in Reaper(repo, clock, None).run_once()] == [job.id]
    [line] = [r for r in capture.records if r.name == "tether.maintenance" and "reaped job" in r.getMessage()]
    assert {name: getattr(line, name) for name in JOB_FIELDS} == {
        "job_id": job.id, "job_type": "slow", "queue": "reports", "attempt": 1, "worker_id": None}


def test_an_async_handler_is_reported_with_its_own_duration() -> None:
    """The duration of an ``async def`` handler runs from its task's start on the pool's loop
    (before, it was measured from 0.0 of the monotonic clock: about the machine's uptime)."""
    import asyncio

    app = make_app()
    recorder = Recorder()

    @app.handler("slow.async")
    async def slow(payload: dict) -> None:
        await asyncio.sleep(0.05)

    @app.handler("fails.async", max_attempts=1)
    async def fails(payload: dict) -> None:
        await asyncio.sleep(0.05)
        raise ValueError("no")

    done = app.enqueue("slow.async").job.id
    dead = app.enqueue("fails.async").job.id
    run_until_idle(app, observers=[recorder])

    seconds = {job_id: (outcome, s) for job_id, outcome, s in recorder.finished}
    assert seconds[done][0] is Outcome.COMPLETED and seconds[dead][0] is Outcome.DEAD
    for job_id in (done, dead):
        assert 0.04 <= seconds[job_id][1] < 30, seconds
