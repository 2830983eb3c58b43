"""The faults the chaos test injects, each from the test process: worker processes SIGKILLed and
replaced (:class:`WorkerFleet`), the workers' PostgreSQL backends terminated
(:class:`BackendTerminator`), and the private Redis server restarted empty (:func:`restart_redis`).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.throwaway_redis import ThrowawayRedis

#: The folder of ``chaos_app.py``, put on the workers' PYTHONPATH.
APP_DIR = Path(__file__).resolve().parent
APP_SPEC = "chaos_app:app"


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
    started: float


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

    :meth:`kill_random` SIGKILLs one and starts its replacement at once; :meth:`replace_exited`
    replaces those that ended by themselves (recorded in :attr:`unexpected`); :meth:`stop`
    SIGTERMs the rest and returns their exit codes; :meth:`kill_all` is the cleanup.
    """

    def __init__(self, size: int, env: dict[str, str], options: list[str], logs: Path, rng: random.Random) -> None:
        self.size = size
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        self.env.update(env)
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(APP_DIR), os.environ.get("PYTHONPATH", "")]))
        self.env["TETHER_CHAOS_PARENT"] = str(os.getpid())
        self.options = options
        self.logs = logs
        self.rng = rng
        self.workers: list[Worker] = []
        self.started = 0
        self.killed = 0
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
                [*tether_command(), "worker", "--app", APP_SPEC, *self.options],
                cwd=self.logs,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(index, proc, log, time.monotonic())
        self.workers.append(worker)
        return worker

    def kill_random(self) -> int:
        """SIGKILL a random live worker, wait for it to be gone, start a replacement; returns the
        killed pid."""
        victim = self.rng.choice([w for w in self.workers if w.proc.poll() is None])
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(30)
        self.workers.remove(victim)
        self.killed += 1
        self._spawn()
        return victim.proc.pid

    def replace_exited(self) -> None:
        """Record and replace the workers that ended by themselves."""
        for worker in [w for w in self.workers if w.proc.poll() is not None]:
            self.workers.remove(worker)
            self.unexpected.append(UnexpectedExit(worker.index, worker.proc.pid, worker.proc.returncode, tail(worker.log)))
            self._spawn()

    def stop(self, timeout: float) -> dict[int, int | None]:
        """SIGTERM every worker (a graceful stop), wait up to ``timeout`` seconds in all; returns
        each worker's exit code by index (None: still running, then SIGKILLed)."""
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
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


def restart_redis(server: ThrowawayRedis, down_for: float) -> None:
    """SIGKILL the private Redis server, leave it down ``down_for`` seconds, start it again empty
    on the same port."""
    server.kill()
    time.sleep(down_for)
    server.start()
