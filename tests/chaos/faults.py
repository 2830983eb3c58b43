"""The faults the chaos test injects, each from the test process: worker processes SIGKILLed and
replaced, or SIGSTOPped and later SIGCONTed (:class:`WorkerFleet`), the workers' PostgreSQL
backends terminated (:class:`BackendTerminator`), and the private Redis server restarted empty
(:func:`restart_redis`); :class:`Chaos` runs them on a schedule and logs each.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.throwaway_redis import ThrowawayRedis

#: The folder of ``chaos_app.py``, put on the workers' PYTHONPATH.
APP_DIR = Path(__file__).resolve().parent
APP_SPEC = "chaos_app:app"
#: What a worker logs (at INFO) once its pool started, after its signal handlers were installed.
STARTED = " starting: "
#: What a worker logs (at WARNING) when the fence refused one of its writes: ``complete of job 7
#: refused: lease lost ...``, ``heartbeat refused for job 7: lease lost ...``.
REFUSED = re.compile(r"refused( for job \d+)?: lease lost")


def worker_id(index: int) -> str:
    """The ``--worker-id`` of the fleet's worker ``index`` (unique within a run, so the jobs it
    holds can be told from the table's ``leased_by``)."""
    return f"chaos-w{index}"


def tether_command() -> list[str]:
    """The ``tether`` console script of this interpreter's environment (or ``python -m`` its module)."""
    script = Path(sys.executable).parent / "tether"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tether.entrypoints.cli"]


@attrs.define
class Worker:
    """One ``tether worker`` process and its log file."""

    index: int
    proc: subprocess.Popen[bytes]
    log: Path
    ready: bool = False
    paused: bool = False

    def check_ready(self) -> bool:
        """Whether its pool has started (its log says so); once true, not read again."""
        if not self.ready and self.log.exists():
            with open(self.log, "rb") as f:
                self.ready = STARTED.encode() in f.read()
        return self.ready


@attrs.define
class UnexpectedExit:
    """A worker process that ended without being killed by the test."""

    index: int
    pid: int
    code: int
    log_tail: str


class WorkerFleet:
    """``size`` ``tether worker`` processes on the chaos app, each with the ``options`` given
    (``--lease-timeout`` ...), logging to ``<logs>/worker-<n>.log``.

    :meth:`kill_random` SIGKILLs one whose pool started and starts its replacement at once; :meth:`replace_exited`
    replaces those that ended by themselves (recorded in :attr:`unexpected`); :meth:`stop`
    SIGTERMs the rest and returns their exit codes; :meth:`kill_all` is the cleanup.
    """

    def __init__(self, size: int, env: dict[str, str], options: list[str], logs: Path, rng: random.Random) -> None:
        self.size = size
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        self.env.update(env)
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(APP_DIR), os.environ.get("PYTHONPATH", "")]))
        self.env["TETHER_CHAOS_PARENT"] = str(os.getpid())
        self.env["PYTHONUNBUFFERED"] = "1"  # log lines reach the file at once (readiness, a killed worker's last words)
        self.options = options
        self.logs = logs
        self.rng = rng
        self.workers: list[Worker] = []
        self.started = 0
        self.killed = 0
        self.paused = 0
        self.unexpected: list[UnexpectedExit] = []

    def start(self) -> None:
        """Start the fleet's ``size`` processes."""
        for _ in range(self.size):
            self._spawn()

    def _spawn(self) -> Worker:
        index = self.started
        self.started += 1
        log = self.logs / f"worker-{index}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [*tether_command(), "worker", "--app", APP_SPEC, "--worker-id", worker_id(index), *self.options],
                cwd=self.logs,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(index, proc, log)
        self.workers.append(worker)
        return worker

    def all_ready(self) -> bool:
        """Whether every worker's pool has started (none is still importing and connecting)."""
        return all(w.check_ready() for w in self.workers)

    def _running(self) -> list[Worker]:
        return [w for w in self.workers if w.check_ready() and not w.paused and w.proc.poll() is None]

    def kill_random(self) -> tuple[int, int]:
        """SIGKILL a random worker whose pool started (and is not paused), wait for it to be gone,
        start a replacement; returns the killed worker's index and pid."""
        victim = self.rng.choice(self._running())
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(30)
        self.workers.remove(victim)
        self.killed += 1
        self._spawn()
        return victim.index, victim.proc.pid

    def pause_random(self, leases_of: Callable[[str], int]) -> tuple[Worker, int] | None:
        """SIGSTOP a random worker whose pool started: a process frozen mid-work, as by a long
        GC or a VM pause; its leases expire while its threads hold jobs.  ``leases_of(worker id)``
        says how many running jobs a worker holds: one that holds none once stopped (it was idle)
        is resumed at once and None returned; else the worker and its leases."""
        worker = self.rng.choice(self._running())
        worker.proc.send_signal(signal.SIGSTOP)
        worker.paused = True
        held = leases_of(worker_id(worker.index))
        if not held:
            self.resume(worker)
            return None
        self.paused += 1
        return worker, held

    def resume(self, worker: Worker) -> None:
        """SIGCONT a paused worker (if it still runs)."""
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGCONT)
        worker.paused = False

    def resume_all(self) -> None:
        for worker in self.workers:
            if worker.paused:
                self.resume(worker)

    def refused_writes(self) -> int:
        """How many writes the workers' logs say the fence refused (:data:`REFUSED`): completions,
        failures, heartbeats of jobs whose lease had expired."""
        return sum(len(REFUSED.findall(log.read_text(errors="replace"))) for log in self.logs.glob("worker-*.log"))

    def replace_exited(self) -> list[UnexpectedExit]:
        """Record (in :attr:`unexpected`) and replace the workers that ended by themselves; returns them."""
        exited = []
        for worker in [w for w in self.workers if w.proc.poll() is not None]:
            self.workers.remove(worker)
            exited.append(UnexpectedExit(worker.index, worker.proc.pid, worker.proc.returncode, tail(worker.log)))
            self._spawn()
        self.unexpected.extend(exited)
        return exited

    def stop(self, timeout: float) -> dict[int, int | None]:
        """Wait until every worker has started its pool (its log says ``starting:``, logged once
        its SIGTERM handler is in place: a younger process would just die of the signal), then
        SIGTERM each (a graceful stop), all within ``timeout`` seconds; returns each worker's exit
        code by index (None: still running, then SIGKILLed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.all_ready():
            time.sleep(0.1)
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        self.resume_all()
        codes: dict[int, int | None] = {}
        for worker in self.workers:
            try:
                codes[worker.index] = worker.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[worker.index] = None
        self.kill_all()
        return codes

    def kill_all(self) -> None:
        """SIGKILL every worker still running and reap it (idempotent; the cleanup path)."""
        self.resume_all()
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
            try:
                worker.proc.wait(30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process that outlives SIGKILL
                pass


def tail(log: Path, chars: int = 3000) -> str:
    """The end of a worker's log."""
    return log.read_text(errors="replace")[-chars:] if log.exists() else ""


class BackendTerminator:
    """``pg_terminate_backend`` on random backends whose ``application_name`` is exactly
    ``app_name`` (the workers' engines, see chaos_app.py), from a connection of its own: never
    the test's connections nor anyone else's on the shared server."""

    def __init__(self, database_url: str, app_name: str, rng: random.Random) -> None:
        self.app_name = app_name
        self.rng = rng
        self.terminated = 0
        self._engine = create_engine(database_url, poolclass=NullPool, connect_args={"application_name": "tether-chaos-admin"})

    def backends(self) -> list[int]:
        """Pids of the workers' backends now."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                text("SELECT pid FROM pg_stat_activity WHERE application_name = :name AND pid <> pg_backend_pid()"),
                {"name": self.app_name},
            )
            return [int(pid) for (pid,) in rows]

    def terminate_random(self, most: int) -> int:
        """Terminate 1 to ``most`` random backends of the workers; returns how many were."""
        pids = self.backends()
        chosen = self.rng.sample(pids, min(len(pids), self.rng.randint(1, most)))
        if not chosen:
            return 0
        with self._engine.connect() as conn:
            done = conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE pid = ANY(:pids) AND application_name = :name"
                ),
                {"pids": chosen, "name": self.app_name},
            ).scalar_one()
        self.terminated += int(done)
        return int(done)

    def close(self) -> None:
        self._engine.dispose()


def restart_redis(server: ThrowawayRedis, down_for: float, when_down: Callable[[], None]) -> int:
    """SIGKILL the private Redis server, call ``when_down()``, leave the server down ``down_for``
    seconds, start it again empty on the same port; returns how many keys it held just before
    (the dispatchers' streams, group and markers)."""
    with server.client() as client:
        keys = int(client.dbsize())
    server.kill()
    when_down()
    time.sleep(down_for)
    server.start()
    return keys


def blocked_clients(server: ThrowawayRedis) -> int:
    """How many clients of the Redis server are blocked in a command now (the workers' XREADGROUP
    BLOCK reads: they are waiting on the streams)."""
    with server.client() as client:
        return int(client.info("clients")["blocked_clients"])


def wait_for_blocked(server: ThrowawayRedis, within: float) -> int:
    """The first non-zero :func:`blocked_clients` of the next ``within`` seconds (checked every
    20 ms), or 0."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        blocked = blocked_clients(server)
        if blocked:
            return blocked
        time.sleep(0.02)
    return 0


class Chaos:
    """The fault schedule, run by :meth:`step` from the test's loop: every ``kill_every`` seconds
    a worker SIGKILLed and replaced (the first after ``first_kill``; a kill waits until every
    worker's pool has started, so one replacement at most is starting at any time); every
    ``pause_every`` seconds (the first after ``first_pause``) a worker SIGSTOPped for
    ``pause_for`` seconds, then SIGCONTed (one holding leases: ``leases_of(worker id)`` counts
    them); every ``terminate_every``
    seconds 1 to ``terminate_most`` of the workers' backends terminated; at each of
    ``redis_restarts_at`` the producer paused until a client is blocked on Redis (a worker waiting
    on the streams; ``redis_restart_wait`` seconds at most), the Redis server SIGKILLed, the
    producer resumed, and the server started again empty ``redis_down`` seconds later.  Whether
    workers wait on Redis is sampled at every step.  Every fault is logged in :attr:`events` (seconds since
    :attr:`began`, what) and in ``events_file``."""

    def __init__(
        self,
        fleet: WorkerFleet,
        terminator: BackendTerminator,
        server: ThrowawayRedis,
        events_file: Path,
        *,
        first_kill: float,
        kill_every: float,
        first_pause: float,
        pause_every: float,
        pause_for: float,
        terminate_every: float,
        terminate_most: int,
        redis_restarts_at: tuple[float, ...],
        redis_restart_wait: float,
        redis_down: float,
        pause_producer: Callable[[], None],
        resume_producer: Callable[[], None],
        leases_of: Callable[[str], int],
    ) -> None:
        self.fleet = fleet
        self.terminator = terminator
        self.server = server
        self.events_file = events_file
        self.kill_every = kill_every
        self.pause_every = pause_every
        self.pause_for = pause_for
        self._next_pause = first_pause
        self._paused: tuple[Worker, float] | None = None
        self.terminate_every = terminate_every
        self.terminate_most = terminate_most
        self.redis_restart_wait = redis_restart_wait
        self.redis_down = redis_down
        self.pause_producer = pause_producer
        self.leases_of = leases_of
        self.resume_producer = resume_producer
        self.restarts_due = list(redis_restarts_at)
        self.redis_restarts = 0
        self.redis_keys_before_restart: list[int] = []
        self.blocked_at_restart: list[int] = []
        self.samples = 0
        self.samples_blocked = 0
        self.events: list[tuple[float, str]] = []
        self.began = time.monotonic()
        self._next_kill = first_kill
        self._next_terminate = terminate_every

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def event(self, what: str) -> None:
        self.events.append((self.elapsed, what))
        with open(self.events_file, "a") as out:
            out.write(f"{self.elapsed:8.2f} {what}\n")

    def step(self) -> None:
        """Inject the faults that are due now, and replace workers that exited by themselves."""
        for exited in self.fleet.replace_exited():
            self.event(f"worker {exited.index} (pid {exited.pid}) exited by itself with {exited.code}")
        elapsed = self.elapsed
        if self.restarts_due and elapsed >= self.restarts_due[0]:
            self.restarts_due.pop(0)
            self.restart_redis()
        if self._paused is not None and elapsed >= self._paused[1]:
            self.fleet.resume(self._paused[0])
            self.event(f"worker {self._paused[0].index} resumed (SIGCONT)")
            self._paused = None
        if elapsed >= self._next_pause and self._paused is None and self.fleet.all_ready():
            paused = self.fleet.pause_random(self.leases_of)
            if paused is not None:  # else it held no lease: try again at the next step
                worker, held = paused
                self._paused = (worker, elapsed + self.pause_for)
                self._next_pause = max(self._next_pause + self.pause_every, elapsed)
                self.event(
                    f"worker {worker.index} (pid {worker.proc.pid}) paused (SIGSTOP) for {self.pause_for} s holding {held} lease(s)"
                )
        if elapsed >= self._next_kill and self.fleet.all_ready():
            index, pid = self.fleet.kill_random()
            self._next_kill = max(self._next_kill + self.kill_every, elapsed)
            self.event(f"worker {index} (pid {pid}) SIGKILLed, worker {self.fleet.started - 1} started")
        if elapsed >= self._next_terminate:
            self._next_terminate += self.terminate_every
            done = self.terminator.terminate_random(self.terminate_most)
            if done:
                self.event(f"{done} backend(s) terminated")
        self.samples += 1
        self.samples_blocked += blocked_clients(self.server) > 0

    def restart_redis(self) -> None:
        """Pause the producer until workers wait on the streams (at most ``redis_restart_wait``
        seconds), then restart Redis empty, the producer resuming as soon as it is down."""
        self.pause_producer()
        try:
            blocked = wait_for_blocked(self.server, self.redis_restart_wait)
            keys = restart_redis(self.server, self.redis_down, self.resume_producer)
        finally:
            self.resume_producer()
        self.redis_keys_before_restart.append(keys)
        self.blocked_at_restart.append(blocked)
        self.redis_restarts += 1
        self.event(f"Redis restarted empty ({blocked} clients blocked on it, {keys} keys; down {self.redis_down} s)")

    def recent(self, most: int = 30) -> str:
        """The last ``most`` events, one per line."""
        return "\n".join(f"  {at:8.2f} {what}" for at, what in self.events[-most:])
