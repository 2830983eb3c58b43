"""Tether's two promises under real faults: no accepted job is lost, and a worker that lost its
lease never changes its job's state.

10,000 jobs on PostgreSQL (this run's own schema), dispatched through Redis Streams on a private
``redis-server``, run by 4 ``tether worker`` processes (tests/chaos/chaos_app.py: 4 threads each,
lease timeout 4 s, heartbeat every 1 s, reaper every 1 s; dispatcher block 0.2 s, claim_idle 2 s,
sweep every 1 s; retries 0.2 s doubling to 1 s).  A producer thread enqueues the jobs in waves
(1,000, then 500 at a time, each 0.5 s after the previous one is no longer queued: the workers
alternate between draining a backlog straight from the database and waiting on the streams),
while the test process, from the moment every worker's pool runs until every job has ended and
the Redis restarts are done (at most :data:`CHAOS_SECONDS`):

- SIGKILLs a random worker every :data:`KILL_EVERY` seconds and starts a replacement at once
  (a kill waits until every worker's pool has started: starting a worker takes about 1.5 s of
  CPU, 10-20 s on a crowded machine, and a process killed while it imports holds no lease);
- SIGSTOPs a random worker (one holding leases) for :data:`PAUSE_FOR` seconds every
  :data:`PAUSE_EVERY` seconds, then SIGCONTs it: its leases expire meanwhile, the reaper hands its jobs to others, and whatever it
  writes once it runs again must be refused by the fence (its log counts the refusals);
- terminates 1 or 2 random PostgreSQL backends of the workers every :data:`TERMINATE_EVERY`
  seconds (``pg_terminate_backend`` on the workers' own ``application_name``, nobody else's);
- restarts the Redis server empty (SIGKILL, down :data:`REDIS_DOWN` s, started again on its
  port) at each of :data:`REDIS_RESTARTS_AT`: the producer pauses until workers are blocked
  reading the streams (:data:`REDIS_RESTART_WAIT` s at most), and resumes once Redis is down.

Designed outcomes (by ``n``, the job's number): ``n % 100 == 0`` raises PermanentError (dead
after one recorded execution, ``max_attempts`` 20); ``n % 100 == 1`` always raises (dead after
its 3 attempts, ``max_attempts`` 3); every other job returns (``max_attempts`` 20, more than the
faults can use up), so it ends completed.

After the chaos the survivors drain (at most :data:`DRAIN_SECONDS`) and stop gracefully.  Then:
10,000 jobs, each completed or dead as designed, none queued, running or retrying; per job, its
executions (recorded by the handler, committed before it returned) each under a lease token of
their own and at an attempt number of their own, never more executions than attempts; lease
tokens never shared between executions; read from the job's attempt history (every job keeps all
its attempts: ``max_attempts`` is at most the history's 20), executions <= 1 + the leases it lost,
besides the attempts it failed and was retried after and those released at a shutdown, and the
history's last entry is how the job ended (``completed``; ``dead`` or ``lease_lost`` for a dead job); exactly one terminal transition per job (a trigger logs
every update into completed or dead), made from ``running``, and for a completed job under the
lease of one of its recorded executions.  The faults happened and bit: at least 3 kills, a
pause, 5 terminated backends; writes of paused workers refused by the fence; Redis held keys
before each restart, at least one restart cut off workers blocked reading its streams, and
workers were blocked on it again once the jobs were done (after the last restart); no worker
exited by itself, and every survivor stopped with exit code 0.  The counts go to the terminal
summary (``chaos`` section) and the faults, with their times, to ``chaos-events.log`` beside the
workers' logs in the test's temporary directory.
"""

from __future__ import annotations

import collections
import functools
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
from tests.chaos.faults import BackendTerminator, Chaos, WorkerFleet, blocked_clients, tail
from tests.conftest import DATABASE_URL, RUN_ID, service_unavailable
from tests.postgres_fixtures import schema_name, temporary_app
from tests.throwaway_redis import ThrowawayRedis, binaries_missing

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow, pytest.mark.chaos]

JOBS = 10_000
WORKERS = 4
#: The workers' settings (``tether worker`` options); INFO logs the line that says a pool started.
WORKER_OPTIONS = [
    "--concurrency", "4",
    "--lease-timeout", "4",
    "--heartbeat-interval", "1",
    "--reap-interval", "1",
    "--drain-timeout", "5",
    "--log-level", "INFO",
]  # fmt: skip
#: The producer's dispatcher, like the workers' (chaos_app.REDIS_OPTIONS).
REDIS_OPTIONS = {"block": 0.2, "claim_idle": 2.0, "sweep_interval": 1.0}
FIRST_WAVE = 1_000  # jobs the producer enqueues at once at the start
WAVE = 500  # then this many at a time, once the previous wave is no longer queued
BATCH = 100  # jobs per enqueue_many call
IDLE_GAP = 0.5  # seconds between the end of a wave and the next (the workers wait on Redis)
STARTUP_SECONDS = 60.0  # the first workers' pools must all run within this long; the chaos starts then
FIRST_KILL = 2.0  # seconds into the chaos
KILL_EVERY = 4.0  # seconds between two worker SIGKILLs
FIRST_PAUSE = 3.0  # seconds into the chaos
PAUSE_EVERY = 12.0  # seconds between two worker pauses
PAUSE_FOR = 7.0  # seconds a paused worker stays stopped: past its leases' expiry (4 s) and a reap (1 s)
TERMINATE_EVERY = 1.0  # seconds between two rounds of backend terminations
TERMINATE_MOST = 2  # backends terminated per round, at most
REDIS_RESTARTS_AT = (5.0, 20.0)  # seconds into the chaos
REDIS_RESTART_WAIT = 15.0  # seconds a restart waits at most for workers blocked on the streams
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
    """Enqueues the :data:`JOBS` jobs in waves: :data:`FIRST_WAVE` jobs, then :data:`WAVE` at a
    time, each in batches of :data:`BATCH`; once none of a wave is left queued, it waits
    :data:`IDLE_GAP` seconds before the next.  Within a wave the workers drain a backlog straight
    from the database; in the gaps they wait on the Redis streams, which wake them for the next."""

    def __init__(self, app: Tether) -> None:
        self.app = app
        self.kinds: dict[int, str] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._go = threading.Event()
        self._go.set()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def _run(self) -> None:
        wave = FIRST_WAVE
        try:
            while len(self.kinds) < JOBS and not self._stop.is_set():
                goal = min(len(self.kinds) + wave, JOBS)
                while len(self.kinds) < goal and not self._stop.is_set():
                    self._enqueue(min(BATCH, goal - len(self.kinds)))
                while self.app.counts()[JobStatus.QUEUED] and not self._stop.wait(0.05):
                    pass
                self._stop.wait(IDLE_GAP)
                wave = WAVE
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def pause(self) -> None:
        """Enqueue nothing more (after the batch under way) until :meth:`resume`."""
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    def _enqueue(self, most: int) -> None:
        while not self._go.wait(0.05):
            if self._stop.is_set():
                return
        numbers = range(len(self.kinds), min(len(self.kinds) + most, JOBS))
        requests = [
            EnqueueRequest("chaos.work", {"n": n, "kind": kind_of(n)}, max_attempts=MAX_ATTEMPTS[kind_of(n)]) for n in numbers
        ]
        for n, result in zip(numbers, self.app.enqueue_many(requests), strict=True):
            self.kinds[result.job.id] = kind_of(n)

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the last job to be enqueued."""
        self._thread.join(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._go.set()
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


def waiting_on_redis(server: ThrowawayRedis, within: float) -> bool:
    """Whether a client of ``server`` is blocked on it (a worker waiting on the streams) at some
    moment of the next ``within`` seconds (checked every 50 ms)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if blocked_clients(server):
            return True
        time.sleep(0.05)
    return False


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


@pytest.mark.timeout(STARTUP_SECONDS + CHAOS_SECONDS + DRAIN_SECONDS + 120)
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
    began = time.monotonic()
    try:
        fleet.start()
        producer.start()
        while not fleet.all_ready():  # the schedule starts once every pool runs
            fleet.replace_exited()
            assert time.monotonic() - began < STARTUP_SECONDS, (
                f"the workers' pools did not all start within {STARTUP_SECONDS:.0f} s; their logs:\n"
                + "\n".join(f"worker {w.index}: {tail(w.log, 500)}" for w in fleet.workers)
            )
            time.sleep(0.1)
        startup_seconds = time.monotonic() - began
        chaos = Chaos(
            fleet, terminator, redis_server, tmp_path / "chaos-events.log",
            first_kill=FIRST_KILL, kill_every=KILL_EVERY, terminate_every=TERMINATE_EVERY, terminate_most=TERMINATE_MOST,
            first_pause=FIRST_PAUSE, pause_every=PAUSE_EVERY, pause_for=PAUSE_FOR,
            redis_restarts_at=REDIS_RESTARTS_AT, redis_restart_wait=REDIS_RESTART_WAIT, redis_down=REDIS_DOWN,
            pause_producer=producer.pause, resume_producer=producer.resume,
            leases_of=functools.partial(ledger.leases_of, repository.engine, repository.schema),
        )  # fmt: skip
        while chaos.elapsed < CHAOS_SECONDS and not (
            producer.done and not chaos.restarts_due and len(producer.kinds) == JOBS and not unfinished(app)
        ):
            chaos.step()
            time.sleep(0.1)
        chaos_seconds = chaos.elapsed
        fleet.resume_all()
        chaos.event("chaos over")

        drain_deadline = time.monotonic() + DRAIN_SECONDS
        producer.wait(DRAIN_SECONDS)
        assert producer.errors == [], f"enqueue failed: {producer.errors!r}"
        assert len(producer.kinds) == JOBS, f"only {len(producer.kinds)} jobs enqueued {DRAIN_SECONDS:.0f} s after the chaos"
        while unfinished(app) and time.monotonic() < drain_deadline:
            for exited in fleet.replace_exited():
                chaos.event(f"worker {exited.index} (pid {exited.pid}) exited by itself with {exited.code}")
            time.sleep(0.5)
        left = unfinished(app)
        assert not left, (
            f"{sum(left.values())} job(s) not finished {DRAIN_SECONDS:.0f} s after the chaos stopped: {left}\n"
            f"{left_over(app)}\nseed {seed}; last faults:\n{chaos.recent()}\n"
            f"last worker's log:\n{tail(fleet.workers[-1].log)}"
        )
        wall_seconds = time.monotonic() - began
        redis_waiting_at_end = waiting_on_redis(redis_server, within=10.0)
        exits = fleet.stop(STOP_SECONDS)
        refused = fleet.refused_writes()
    finally:
        producer.stop()
        fleet.kill_all()
        terminator.close()

    jobs = ledger.read_jobs(repository.engine, repository.schema)
    completed = [j for j in jobs.values() if j.status == "completed"]
    lease_losses = sum(j.attempts - 1 for j in completed if j.kind == "ok")
    duplicates = sum(len(j.executions) - 1 for j in jobs.values() if j.kind != "always" and len(j.executions) > 1)
    double_outcomes = sum(1 for j in jobs.values() if len(j.outcomes) > 1)
    leases_lost = sum(j.ended("lease_lost") for j in jobs.values())
    statuses = collections.Counter((j.kind, j.status) for j in jobs.values())
    report(
        request.config,
        f"chaos: {len(jobs)} jobs ({statuses['ok', 'completed']} completed, "
        f"{statuses['permanent', 'dead'] + statuses['always', 'dead']} dead as designed) in {wall_seconds:.1f} s "
        f"(workers up in {startup_seconds:.1f} s, then {chaos_seconds:.1f} s of chaos; workers waiting on Redis in {chaos.samples_blocked} of {chaos.samples} samples, "
        f"{chaos.blocked_at_restart} at the restarts); "
        f"seed {seed}",
        f"chaos: {fleet.killed} worker SIGKILLs, {fleet.paused} pauses ({refused} writes refused by the fence), "
        f"{terminator.terminated} backends terminated, "
        f"{chaos.redis_restarts} Redis restarts; {lease_losses} lease losses (attempts beyond the first of completed jobs), "
        f"{duplicates} duplicate executions, {double_outcomes} double outcomes, "
        f"{leases_lost} leases lost in the attempt histories",
    )

    # the faults happened, and Redis was in use when it was restarted and after
    assert fleet.killed >= 3 and fleet.paused >= 1 and terminator.terminated >= 5, (
        fleet.killed,
        fleet.paused,
        terminator.terminated,
    )
    assert chaos.redis_restarts == len(REDIS_RESTARTS_AT) and all(chaos.redis_keys_before_restart), (
        chaos.redis_restarts, chaos.redis_keys_before_restart,
    )  # fmt: skip
    assert refused > 0, "no write of a paused worker was refused by the fence (were its jobs taken back?)"
    assert any(chaos.blocked_at_restart), f"no restart found workers waiting on the Redis streams: {chaos.blocked_at_restart}"
    assert redis_waiting_at_end, "no worker waited on the Redis streams within 10 s of the last job's end"
    assert fleet.unexpected == [], f"workers that exited by themselves: {fleet.unexpected}"
    assert set(exits.values()) == {0}, f"exit codes of the graceful stop by worker: {exits}"

    # none lost, each as designed
    assert set(jobs) == set(producer.kinds) and len(jobs) == JOBS
    wrong = [j for j in jobs.values() if j.status != EXPECTED_STATUS[j.kind]]
    assert wrong == [], f"{len(wrong)} job(s) did not end as designed, e.g. {wrong[:3]}"
    assert [j for j in jobs.values() if j.kind == "always" and j.attempts != 3] == []
    assert [j for j in jobs.values() if j.kind == "permanent" and "designed permanent" not in (j.last_error or "")] == []

    # every execution under a lease of its own, never more executions than attempts
    unrun = [j for j in jobs.values() if not j.executions]
    assert unrun == [], f"{len(unrun)} job(s) ended without a recorded execution, e.g. {unrun[:3]}"
    over = [j for j in jobs.values() if len(j.executions) > j.attempts or j.attempts > j.max_attempts]
    assert over == [], f"{len(over)} job(s) ran more often than their attempts, e.g. {over[:3]}"
    shared = [j for j in jobs.values() if len(j.tokens) != len(j.executions)]
    assert shared == [], f"{len(shared)} job(s) ran twice under one lease token, e.g. {shared[:3]}"
    reused = [j for j in jobs.values() if len({a for _, a in j.executions}) != len(j.executions)]
    assert reused == [], f"{len(reused)} job(s) ran twice at one attempt number, e.g. {reused[:3]}"
    tokens = collections.Counter(token for j in jobs.values() for token in j.tokens)
    assert [t for t, n in tokens.items() if n > 1] == [], "a lease token was used by two jobs"

    # a job runs again only after a failure it wrote, a lease it lost or a release at shutdown
    # (read from its attempt history): executions <= 1 + the leases it lost, besides those
    over_lost = [
        j for j in jobs.values()
        if len(j.executions) - j.ended("failed", "released") > 1 + j.ended("lease_lost")
    ]  # fmt: skip
    assert over_lost == [], f"{len(over_lost)} job(s) ran more often than their lost leases allow, e.g. {over_lost[:3]}"
    last = {"completed": ("completed",), "dead": ("dead", "lease_lost")}
    unrecorded = [j for j in jobs.values() if not j.history or j.history[-1] not in last[j.status]]
    assert unrecorded == [], f"{len(unrecorded)} job(s) whose history does not end as they did, e.g. {unrecorded[:3]}"

    # exactly one terminal transition per job, out of running, by the lease holder
    not_once = [j for j in jobs.values() if len(j.outcomes) != 1]
    assert not_once == [], f"{len(not_once)} job(s) without exactly one terminal transition, e.g. {not_once[:3]}"
    not_running = [j for j in jobs.values() if j.outcomes[0].old_status != "running"]
    assert not_running == [], f"terminal transitions not out of running, e.g. {not_running[:3]}"
    unfenced = [j for j in completed if j.outcomes[0].old_token not in j.tokens]
    assert unfenced == [], f"{len(unfenced)} completion(s) under a lease with no recorded execution, e.g. {unfenced[:3]}"
