"""Tether's two promises under real faults: no accepted job is lost, and a worker that lost its
lease never changes its job's state.

10,000 jobs on PostgreSQL (this run's own schema), dispatched through Redis Streams on a private
``redis-server``, run by 4 ``tether worker`` processes (tests/chaos/chaos_app.py: 4 threads each,
lease timeout 4 s, heartbeat every 1 s, reaper every 1 s; dispatcher block 0.2 s, claim_idle 2 s,
sweep every 1 s; retries 0.2 s doubling to 1 s).  A producer thread enqueues the jobs over about
:data:`ENQUEUE_SECONDS` while the test process, until every job has ended (at most
:data:`CHAOS_SECONDS`):

- SIGKILLs a random worker every :data:`KILL_EVERY` seconds and starts a replacement at once;
- terminates 1 or 2 random PostgreSQL backends of the workers every :data:`TERMINATE_EVERY`
  seconds (``pg_terminate_backend`` on the workers' own ``application_name``, nobody else's);
- restarts the Redis server empty (SIGKILL, down :data:`REDIS_DOWN` s, started again on its
  port) at each of :data:`REDIS_RESTARTS_AT`.

Designed outcomes (by ``n``, the job's number): ``n % 100 == 0`` raises PermanentError (dead
after one recorded execution, ``max_attempts`` 20); ``n % 100 == 1`` always raises (dead after
its 3 attempts, ``max_attempts`` 3); every other job returns (``max_attempts`` 20, more than the
faults can use up), so it ends completed.

After the chaos the survivors drain (at most :data:`DRAIN_SECONDS`) and stop gracefully.  Then:
10,000 jobs, each completed or dead as designed, none queued, running or retrying; per job, its
executions (recorded by the handler, committed before it returned) each under a lease token of
their own and at an attempt number of their own, never more executions than attempts; lease
tokens never shared between executions; exactly one terminal transition per job (a trigger logs
every update into completed or dead), made from ``running``, and for a completed job under the
lease of one of its recorded executions.  The counts go to the terminal summary (``chaos`` section).
"""

from __future__ import annotations

import collections
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tether import EnqueueRequest, JobStatus, Tether

from tests.chaos import ledger
from tests.chaos.faults import BackendTerminator, WorkerFleet, restart_redis, tail
from tests.conftest import DATABASE_URL, RUN_ID, service_unavailable
from tests.postgres_fixtures import schema_name, temporary_app
from tests.throwaway_redis import ThrowawayRedis, binaries_missing

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.chaos]

JOBS = 10_000
WORKERS = 4
#: The workers' settings (``tether worker`` options).
WORKER_OPTIONS = [
    "--concurrency", "4",
    "--lease-timeout", "4",
    "--heartbeat-interval", "1",
    "--reap-interval", "1",
    "--drain-timeout", "5",
    "--log-level", "WARNING",
]  # fmt: skip
#: The producer's dispatcher, like the workers' (chaos_app.REDIS_OPTIONS).
REDIS_OPTIONS = {"block": 0.2, "claim_idle": 2.0, "sweep_interval": 1.0}
ENQUEUE_SECONDS = 30.0  # the producer spreads the jobs over this long
ENQUEUE_BATCH = 50
KILL_EVERY = 4.0  # seconds between two worker SIGKILLs (the first after 3 s)
TERMINATE_EVERY = 1.0  # seconds between two rounds of backend terminations
TERMINATE_MOST = 2  # backends terminated per round, at most
REDIS_RESTARTS_AT = (6.0, 18.0)  # seconds into the chaos
REDIS_DOWN = 1.0  # seconds the killed Redis server stays down
CHAOS_SECONDS = 90.0  # the faults stop after this long even if jobs remain
DRAIN_SECONDS = 240.0  # then the survivors have this long to finish every job
STOP_SECONDS = 30.0  # for the graceful stop at the end
#: Designed outcome and max_attempts by ``n % 100``.
PERMANENT, ALWAYS = 0, 1
MAX_ATTEMPTS = {"ok": 20, "permanent": 20, "always": 3}
EXPECTED_STATUS = {"ok": "completed", "permanent": "dead", "always": "dead"}


def kind_of(n: int) -> str:
    return {PERMANENT: "permanent", ALWAYS: "always"}.get(n % 100, "ok")


@pytest.fixture
def redis_server() -> Iterator[ThrowawayRedis]:
    missing = binaries_missing()
    if missing:
        service_unavailable("redis-server", missing)
    server = ThrowawayRedis()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def app(redis_server: ThrowawayRedis) -> Iterator[Tether]:
    """The test's own application (the producer's, and the reader's of counts) on this run's
    schema, with the execution and outcome ledgers installed."""
    with temporary_app(
        schema_name("chaos"), redis_url=redis_server.url(), redis_options=dict(REDIS_OPTIONS), pool_size=4
    ) as application:
        repository: Any = application.repository
        ledger.install(repository.engine, repository.schema)
        yield application


class Producer:
    """Enqueues the :data:`JOBS` jobs in batches, spread over :data:`ENQUEUE_SECONDS`."""

    def __init__(self, app: Tether) -> None:
        self.app = app
        self.kinds: dict[int, str] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def _run(self) -> None:
        pause = ENQUEUE_SECONDS * ENQUEUE_BATCH / JOBS
        for first in range(0, JOBS, ENQUEUE_BATCH):
            if self._stop.wait(pause):
                return
            numbers = range(first, min(first + ENQUEUE_BATCH, JOBS))
            requests = [
                EnqueueRequest("chaos.work", {"n": n, "kind": kind_of(n)}, max_attempts=MAX_ATTEMPTS[kind_of(n)]) for n in numbers
            ]
            try:
                results = self.app.enqueue_many(requests)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
            for n, result in zip(numbers, results, strict=True):
                self.kinds[result.job.id] = kind_of(n)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def unfinished(app: Tether) -> dict[str, int]:
    """Jobs not completed or dead, by status (statuses with none left out)."""
    counts = app.counts()
    return {s.value: n for s, n in counts.items() if s not in (JobStatus.COMPLETED, JobStatus.DEAD) and n}


def left_over(app: Tether, most: int = 20) -> str:
    """The first unfinished jobs, one per line."""
    lines = []
    for status in (JobStatus.QUEUED, JobStatus.RETRYING, JobStatus.RUNNING):
        for job in app.list(status=status, limit=most):
            lines.append(
                f"  job {job.id} {job.status.value} attempts {job.attempts}/{job.max_attempts} "
                f"scheduled {job.scheduled_at:%H:%M:%S.%f} lease until {job.lease_expires_at} by {job.leased_by} "
                f"last error {job.last_error!r:.120}"
            )
    return "\n".join(lines[:most])


class Summary:
    """A pytest plugin that prints the chaos counts in the terminal summary."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.section("chaos")
        for line in self.lines:
            terminalreporter.write_line(line)


def report(config: pytest.Config, *lines: str) -> None:
    """Show ``lines`` in the ``chaos`` section of the terminal summary (and in the captured output)."""
    summary = config.pluginmanager.get_plugin("tether-chaos-summary")
    if summary is None:
        summary = Summary()
        config.pluginmanager.register(summary, "tether-chaos-summary")
    summary.lines.extend(lines)
    print(*lines, sep="\n")


@pytest.mark.timeout(CHAOS_SECONDS + DRAIN_SECONDS + 120)
def test_every_job_ends_once_as_designed_under_kills_terminations_and_redis_restarts(
    app: Tether, redis_server: ThrowawayRedis, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    repository: Any = app.repository
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    app_name = f"tether-chaos-{RUN_ID}-{os.getpid()}"
    env = {
        "TETHER_CHAOS_DATABASE_URL": DATABASE_URL,
        "TETHER_CHAOS_SCHEMA": repository.schema,
        "TETHER_CHAOS_REDIS_URL": redis_server.url(),
        "TETHER_CHAOS_APP_NAME": app_name,
    }
    fleet = WorkerFleet(WORKERS, env, WORKER_OPTIONS, tmp_path, rng)
    terminator = BackendTerminator(DATABASE_URL, app_name, rng)
    producer = Producer(app)
    redis_restarts = 0
    began = time.monotonic()
    try:
        fleet.start()
        producer.start()
        next_kill, next_terminate = 3.0, TERMINATE_EVERY
        restarts_due = list(REDIS_RESTARTS_AT)
        while True:
            elapsed = time.monotonic() - began
            if elapsed >= CHAOS_SECONDS or (producer.done and not unfinished(app) and len(producer.kinds) == JOBS):
                break
            fleet.replace_exited()
            if restarts_due and elapsed >= restarts_due[0]:
                restarts_due.pop(0)
                restart_redis(redis_server, REDIS_DOWN)
                redis_restarts += 1
            if elapsed >= next_kill:
                fleet.kill_random()
                next_kill += KILL_EVERY
            if elapsed >= next_terminate:
                terminator.terminate_random(TERMINATE_MOST)
                next_terminate += TERMINATE_EVERY
            time.sleep(0.1)
        chaos_seconds = time.monotonic() - began
        producer.stop()
        assert producer.errors == [], f"enqueue failed: {producer.errors!r}"
        assert len(producer.kinds) == JOBS, f"only {len(producer.kinds)} jobs enqueued"

        drain_deadline = time.monotonic() + DRAIN_SECONDS
        while unfinished(app) and time.monotonic() < drain_deadline:
            fleet.replace_exited()
            time.sleep(0.5)
        left = unfinished(app)
        assert not left, (
            f"{sum(left.values())} job(s) not finished {DRAIN_SECONDS:.0f} s after the chaos stopped: {left}\n"
            f"{left_over(app)}\nseed {seed}; last worker log:\n{tail(fleet.workers[-1].log)}"
        )
        wall_seconds = time.monotonic() - began
        exits = fleet.stop(STOP_SECONDS)
    finally:
        producer.stop()
        fleet.kill_all()
        terminator.close()

    jobs = ledger.read_jobs(repository.engine, repository.schema)
    completed = [j for j in jobs.values() if j.status == "completed"]
    lease_losses = sum(j.attempts - 1 for j in completed if j.kind == "ok")
    duplicates = sum(len(j.executions) - 1 for j in jobs.values() if j.kind != "always" and len(j.executions) > 1)
    double_outcomes = sum(1 for j in jobs.values() if len(j.outcomes) > 1)
    statuses = collections.Counter((j.kind, j.status) for j in jobs.values())
    report(
        request.config,
        f"chaos: {len(jobs)} jobs ({statuses['ok', 'completed']} completed, "
        f"{statuses['permanent', 'dead'] + statuses['always', 'dead']} dead as designed) "
        f"in {wall_seconds:.1f} s ({chaos_seconds:.1f} s of chaos); seed {seed}",
        f"chaos: {fleet.killed} worker SIGKILLs, {terminator.terminated} backends terminated, "
        f"{redis_restarts} Redis restarts; {lease_losses} lease losses (attempts beyond the first of completed jobs), "
        f"{duplicates} duplicate executions, {double_outcomes} double outcomes",
    )

    # the faults happened
    assert fleet.killed >= 3 and terminator.terminated >= 5 and redis_restarts == len(REDIS_RESTARTS_AT), (
        fleet.killed, terminator.terminated, redis_restarts,
    )  # fmt: skip
    assert fleet.unexpected == [], f"workers that exited by themselves: {fleet.unexpected}"
    assert set(exits.values()) == {0}, f"exit codes of the graceful stop by worker: {exits}"

    # none lost, each as designed
    assert set(jobs) == set(producer.kinds) and len(jobs) == JOBS
    wrong = [j for j in jobs.values() if j.status != EXPECTED_STATUS[j.kind]]
    assert wrong == [], f"{len(wrong)} job(s) did not end as designed, e.g. {wrong[:5]}"
    assert [j for j in jobs.values() if j.kind == "always" and j.attempts != 3] == []
    assert [j for j in jobs.values() if j.kind == "permanent" and "designed permanent" not in (j.last_error or "")] == []

    # every execution under a lease of its own, never more executions than attempts
    unrun = [j for j in jobs.values() if not j.executions]
    assert unrun == [], f"{len(unrun)} job(s) ended without a recorded execution, e.g. {unrun[:5]}"
    over = [j for j in jobs.values() if len(j.executions) > j.attempts or j.attempts > j.max_attempts]
    assert over == [], f"{len(over)} job(s) ran more often than their attempts, e.g. {over[:5]}"
    shared = [j for j in jobs.values() if len(j.tokens) != len(j.executions)]
    assert shared == [], f"{len(shared)} job(s) ran twice under one lease token, e.g. {shared[:5]}"
    reused = [j for j in jobs.values() if len({a for _, a in j.executions}) != len(j.executions)]
    assert reused == [], f"{len(reused)} job(s) ran twice at one attempt number, e.g. {reused[:5]}"
    tokens = collections.Counter(token for j in jobs.values() for token in j.tokens)
    assert [t for t, n in tokens.items() if n > 1] == [], "a lease token was used by two jobs"

    # exactly one terminal transition per job, out of running, by the lease holder
    not_once = [j for j in jobs.values() if len(j.outcomes) != 1]
    assert not_once == [], f"{len(not_once)} job(s) without exactly one terminal transition, e.g. {not_once[:5]}"
    not_running = [j for j in jobs.values() if j.outcomes[0].old_status != "running"]
    assert not_running == [], f"terminal transitions not out of running, e.g. {not_running[:5]}"
    unfenced = [j for j in completed if j.outcomes[0].old_token not in j.tokens]
    assert unfenced == [], f"{len(unfenced)} completion(s) under a lease with no recorded execution, e.g. {unfenced[:5]}"
