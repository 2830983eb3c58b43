"""Private ``redis-server`` processes for tests: real servers on free ports under a temporary
directory, without persistence, killed and deleted at the end.  Nothing touches the shared Redis
test server.

- :func:`free_port` / :func:`binaries_missing`: where a server can listen, and whether one can be started.
- :func:`spawn_server`: one ``redis-server --save "" --appendonly no`` process (extra options appended).
- :func:`wait_until` / :func:`wait_for_server`: bounded polling for a condition, for a server to answer.
- :class:`ThrowawayRedis`: one standalone server that a test can SIGKILL and start again, empty,
  on the same port (a Redis restart without persistence).

:class:`tests.redis_cluster.ThrowawayRedisCluster` builds its nodes from the same pieces.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

#: Ports from here on go to the cluster nodes (tests/redis_cluster.py).
FIRST_PORT = 42000
#: A standalone server takes a free port from a random start in [STANDALONE_PORTS[0],
#: STANDALONE_PORTS[1]), away from the cluster's, so concurrent runs rarely probe the same ports.
STANDALONE_PORTS = (43000, 44000)


def free_port(start: int = FIRST_PORT) -> int:
    """The first port from ``start`` on which nothing listens (nor its cluster bus port + 10000)."""
    for port in range(start, start + 2000):
        ok = True
        for candidate in (port, port + 10000):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("127.0.0.1", candidate))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError(f"no free port from {start}")


def binaries_missing() -> str | None:
    """Why a server (or cluster) cannot be started here (None if it can)."""
    for name in ("redis-server", "redis-cli"):
        if shutil.which(name) is None:
            return f"{name} is not installed"
    return None


def spawn_server(root: Path, port: int, *options: str) -> subprocess.Popen[bytes]:
    """Start ``redis-server`` on 127.0.0.1:``port`` with ``root`` as its directory, no RDB
    snapshots and no AOF (so a restarted server starts empty), plus ``options`` (further
    ``--name value`` arguments).  Output is appended to ``root/redis-<port>.log``.  Does not wait
    for the server: see :func:`wait_for_server`."""
    log = open(root / f"redis-{port}.log", "ab")  # noqa: SIM115 - kept open by the process
    return subprocess.Popen(
        [
            "redis-server",
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(root),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            *options,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip


def client_of(port: int) -> redis.Redis:
    """A client of the server on 127.0.0.1:``port`` (replies decoded to ``str``, 10 s socket timeout)."""
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=10)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Call ``check`` every 50 ms until it returns true (a RedisError counts as false);
    TimeoutError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"waited {timeout:.0f} s for {what}")


def wait_for_server(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Wait until the ``redis-server`` process ``proc`` answers on ``port`` (INFO names its pid, so
    another server that took the port does not count).  RuntimeError with the end of ``log`` if
    the process exits first (the port was taken, say)."""

    def answers() -> bool:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"redis-server on port {port} exited with {proc.returncode}:\n{tail}")
        with client_of(port) as client:
            return int(client.info("server")["process_id"]) == proc.pid

    wait_until(answers, f"redis-server (pid {proc.pid}) on {port}")


class ThrowawayRedis:
    """One standalone ``redis-server`` without persistence on a free port of 127.0.0.1.

    :meth:`kill` is a crash (SIGKILL); :meth:`start` again brings up a new, empty server on the
    same port, which is what clients of a Redis restarted without persistence see.  :meth:`stop`
    kills it and deletes its directory.  Usage::

        server = ThrowawayRedis().start()
        try:
            ...  # server.url(), server.client(), server.kill(), server.start()
        finally:
            server.stop()
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tether-redis-"))
        self.port = free_port(random.randrange(*STANDALONE_PORTS))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ThrowawayRedis:
        """Start the server (again) on :attr:`port` and wait until it answers; returns ``self``.
        RuntimeError if it is already running or cannot start."""
        if self.running:
            raise RuntimeError(f"redis-server on port {self.port} is already running")
        self.proc = spawn_server(self.root, self.port)
        wait_for_server(self.proc, self.port, self.root / f"redis-{self.port}.log")
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the server, as a crash, and wait for it to be gone (its data is lost)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """Kill the server if it runs and delete its directory."""
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: int = 0) -> str:
        """``redis://127.0.0.1:<port>/<db>``."""
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self) -> redis.Redis:
        """A new client of the server (see :func:`client_of`); the caller closes it."""
        return client_of(self.port)
