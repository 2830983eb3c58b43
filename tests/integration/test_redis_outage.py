"""RedisStreamsDispatcher when Redis fails under running workers: data loss plus an outage (C08),
and a soak with consumers killed before XACK.

Outages are real: the dispatchers reach Redis through a TCP proxy that this test cuts (closing
every connection and refusing new ones) and restores, so nothing else on the shared server is
disturbed.  Data loss is ``FLUSHDB`` on Redis database 15, which only these tests use: the
dispatcher sees exactly what FLUSHALL or a restart without persistence would do to it, without
wiping database 0 under other test runs sharing the server (the real thing, a restarted
``redis-server`` and a literal FLUSHALL, runs on a private server in test_redis_restart.py).
Times are scaled down from the case (delayed jobs due at +3 s instead of +10 s).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

import pytest
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.adapters.redis_streams.keys import StreamKeys
from tether.domain.errors import LeaseLost
from tether.domain.job import JobStatus
from tether.domain.validation import prepare_job

from tests.conftest import REDIS_URL, redis_connection
from tests.dispatch_workers import DispatcherWorkers
from tests.redis_fixtures import delete_keys, unique_prefix

pytestmark = pytest.mark.redis
DESTRUCTIVE_DB = 15


class FlakyProxy:
    """A TCP proxy in front of Redis that a test can cut off and restore."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.up = True
        self.closed = False
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def cut(self) -> None:
        """Every open connection is reset and new ones are refused until :meth:`restore`."""
        self.up = False
        with self.lock:
            doomed, self.sockets = self.sockets, []
        for s in doomed:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def restore(self) -> None:
        self.up = True

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()


def url_for(db: int, port: int | None = None) -> str:
    parts = urlsplit(REDIS_URL)
    netloc = parts.netloc
    if port is not None:
        userinfo = netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme, netloc, f"/{db}", parts.query, ""))


@pytest.fixture
def prefix():
    return unique_prefix("o")


@pytest.mark.slow
def test_c08_redis_loses_everything_and_is_unreachable_for_a_while(prefix, caplog):
    direct = redis_connection(url_for(DESTRUCTIVE_DB))
    proxy = FlakyProxy(urlsplit(REDIS_URL).hostname or "127.0.0.1", urlsplit(REDIS_URL).port or 6379)
    repo, clock = InMemoryJobRepository(), SystemClock()
    caplog.set_level(logging.INFO, logger="tether.dispatch.redis")

    def make():
        return RedisStreamsDispatcher(
            repo, clock, url_for(DESTRUCTIVE_DB, proxy.port), prefix=prefix, block=0.2, claim_idle=1.0, sweep_interval=0.5
        )

    producer = make()
    workers = DispatcherWorkers(repo, make, count=2, queues=["default"], limit=2, lease_timeout=30.0, clock=clock)
    enqueue_errors: list[BaseException] = []

    def enqueue(**kwargs):
        try:
            job = repo.enqueue(prepare_job("c08.job", {}, now=clock.now(), **kwargs), now=clock.now()).job
            producer.notify([job])
            return job
        except Exception as exc:  # noqa: BLE001 - asserted empty below
            enqueue_errors.append(exc)
            return None

    began = time.time()
    try:
        delayed = [enqueue(delay=3.0) for _ in range(5)]
        time.sleep(1.0)
        direct.flushdb()  # t=1 s: Redis loses every key: streams, group, registry
        time.sleep(0.2)
        later = []
        for i in range(10):  # t=1.2-2.0 s, with Redis unreachable from t=1.4 to t=1.9
            if i == 3:
                proxy.cut()
            if i == 8:
                proxy.restore()
            later.append(enqueue())
            time.sleep(0.08)
        proxy.restore()
        workers.wait_for(15, timeout=60)
    finally:
        workers.shutdown()
        producer.close()
        proxy.close()
        elapsed = time.time() - began
        delete_keys(direct, prefix)
        direct.close()

    assert enqueue_errors == []
    assert workers.errors == []
    jobs = delayed + later
    assert all(j is not None for j in jobs)
    assert workers.runs == Counter({j.id: 1 for j in jobs})  # all 15 ran, each exactly once
    assert all(repo.get(j.id).status is JobStatus.COMPLETED for j in jobs)
    for job in delayed:  # not before they were due
        assert workers.started[job.id] >= job.scheduled_at.timestamp()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings  # the outage was felt...
    # ...and logged at most about once a second per dispatcher (3 of them), however many calls failed
    assert len(warnings) <= 3 * (int(elapsed) + 2)
    assert any("recreating" in r.getMessage() for r in caplog.records)  # NOGROUP was met and healed


@pytest.mark.slow
def test_soak_consumers_killed_before_xack(prefix):
    """~25 s (``TETHER_SOAK_SECONDS`` of enqueueing at 100 jobs/s, default 20): 6 consumers; each
    acquire has a 1% chance of being a consumer's last act (it reads an entry, leases the job and
    dies without XACK); a replacement starts at once.  Every job must run exactly once and the
    pending entries list must stay bounded and drain to 0."""
    direct = redis_connection(url_for(0))
    repo, clock = InMemoryJobRepository(), SystemClock()
    rng = random.Random(4)
    rate = 100.0  # jobs enqueued per second; TETHER_SOAK_SECONDS=180 makes it the few-minute soak
    lease_timeout, total_jobs = 2.0, int(rate * float(os.environ.get("TETHER_SOAK_SECONDS", "20")))
    runs: Counter[int] = Counter()
    errors: list[BaseException] = []
    kills = Counter[str]()
    lock = threading.Lock()
    stop = threading.Event()
    keys = StreamKeys(prefix)
    stream = keys.stream("default")
    dispatchers: list[RedisStreamsDispatcher] = []

    def make() -> RedisStreamsDispatcher:
        d = RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, block=0.2, claim_idle=1.0, sweep_interval=0.5)
        with lock:
            dispatchers.append(d)
        return d

    all_threads: list[threading.Thread] = []

    def spawn(index: int) -> None:
        thread = threading.Thread(target=consumer, args=(index,), daemon=True)
        with lock:
            all_threads.append(thread)
        thread.start()

    def consumer(index: int) -> None:
        d = make()
        worker_id = f"soak-{index}-{d.consumer}"
        try:
            while not stop.is_set():
                with lock:
                    die = rng.random() < 0.01
                if die:
                    reply = direct.xreadgroup(d.group, d.consumer, {stream: ">"}, count=1, block=100)
                    for _, entries in reply or []:
                        for _, fields in entries:
                            repo.lease_job(int(fields["id"]), worker_id=worker_id, now=clock.now(), lease_timeout=lease_timeout)
                    with lock:
                        kills["killed"] += 1
                    spawn(index)  # a replacement process
                    return  # killed: no XACK, no complete, dispatcher abandoned as a dead process would be
                for job in d.acquire(queues=["default"], worker_id=worker_id, limit=4, lease_timeout=lease_timeout, max_wait=0.2):
                    with lock:
                        runs[job.id] += 1
                    try:
                        repo.complete(job.id, job.lease_token, now=clock.now())
                    except LeaseLost:
                        with lock:
                            kills["lease_lost"] += 1
        except Exception as exc:  # noqa: BLE001 - asserted empty below
            errors.append(exc)

    def reaper() -> None:
        while not stop.is_set():
            repo.reap(now=clock.now())
            time.sleep(0.2)

    max_pending = 0
    reaper_thread = threading.Thread(target=reaper, daemon=True)
    try:
        reaper_thread.start()
        for i in range(6):
            spawn(i)
        producer = make()
        jobs = []
        for i in range(total_jobs):
            job = repo.enqueue(prepare_job("soak.job", {"i": i}, now=clock.now(), max_attempts=10), now=clock.now()).job
            producer.notify([job])
            jobs.append(job)
            time.sleep(1.0 / rate)
            if i % 50 == 0:
                max_pending = max(max_pending, int(direct.xpending(stream, producer.group)["pending"]))
        end = time.monotonic() + 60
        while time.monotonic() < end and repo.count_by_status()[JobStatus.COMPLETED] < total_jobs:
            max_pending = max(max_pending, int(direct.xpending(stream, producer.group)["pending"]))
            time.sleep(0.2)
        time.sleep(1.2)  # past claim_idle: the dead consumers' entries are now claimable
        producer.maintain(clock.now())
        final_pending = int(direct.xpending(stream, producer.group)["pending"])
    finally:
        stop.set()
        for d in dispatchers:
            d.wake()
        for t in [reaper_thread, *list(all_threads)]:
            t.join(30)
        for d in dispatchers:
            d.close()
        delete_keys(direct, prefix)
        direct.close()

    print(f"soak: {total_jobs} jobs, {kills['killed']} consumers killed, max XPENDING {max_pending}, final {final_pending}")
    assert errors == []
    assert kills["killed"] > 0
    assert repo.count_by_status()[JobStatus.COMPLETED] == total_jobs
    assert runs == Counter({j.id: 1 for j in jobs})  # every job completed exactly once
    assert max_pending <= 6 * 4 + kills["killed"]  # live consumers ack at once; only the dead leave entries
    assert final_pending == 0
