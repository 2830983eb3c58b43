"""RedisStreamsDispatcher on a real Redis Cluster (``cluster=True``): configuration errors, one
``XREADGROUP`` over several queues, a slot on a node other than the seed, the slot resharded to
another master under running workers, and its master killed and failed over to a replica.

The clusters are private ``redis-server`` processes (tests/redis_cluster.py); the shared Redis
test server is only used to show that ``cluster=True`` on a standalone server is refused.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from tether.adapters.clock import SystemClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.domain.errors import ConfigurationError, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job

from tests.conftest import REDIS_URL, RUN_ID, service_unavailable
from tests.dispatch_workers import DispatcherWorkers
from tests.redis_cluster import ThrowawayRedisCluster, prefix_on, slot_of
from tests.redis_fixtures import delete_keys
from tests.throwaway_redis import binaries_missing, free_port

pytestmark = pytest.mark.redis
_counter = itertools.count()


def _stem() -> str:
    return f"ti-{RUN_ID}-{next(_counter)}"


def _enqueue(repo: InMemoryJobRepository, dispatcher: RedisStreamsDispatcher, queue: str = "default") -> Job:
    now = SystemClock().now()
    job = repo.enqueue(prepare_job("cluster.job", {}, now=now, queue=queue), now=now).job
    dispatcher.notify([job])
    return job


def _calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


# -- configuration ---------------------------------------------------------------------------------
def test_bad_cluster_configuration_is_refused_clearly(redis_cluster: ThrowawayRedisCluster, redis_client: redis.Redis) -> None:
    repo, clock = InMemoryJobRepository(), SystemClock()
    prefix = _stem()
    seed = redis_cluster.masters()[0]

    with pytest.raises(ConfigurationError, match="is not a Redis Cluster node") as not_cluster:
        RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, cluster=True)
    assert REDIS_URL.split("@")[-1] in str(not_cluster.value)

    with pytest.raises(ConfigurationError, match="is a Redis Cluster node; turn the cluster switch on"):
        RedisStreamsDispatcher(repo, clock, redis_cluster.url(seed), prefix=prefix)

    secret = "s3cr3t-pw"
    with pytest.raises(ConfigurationError, match="authentication failed") as refused:
        RedisStreamsDispatcher(repo, clock, f"redis://nobody:{secret}@127.0.0.1:{seed}/0", prefix=prefix, cluster=True)
    assert secret not in str(refused.value)
    assert f"redis://nobody:***@127.0.0.1:{seed}/0" in str(refused.value)

    with pytest.raises(ConfigurationError, match="only database 0"):
        RedisStreamsDispatcher(repo, clock, redis_cluster.url(seed).replace("/0", "/3"), prefix=prefix, cluster=True)
    with pytest.raises(ConfigurationError, match="not a unix socket"):
        RedisStreamsDispatcher(repo, clock, "unix:///tmp/redis.sock", prefix=prefix, cluster=True)
    with pytest.raises(ValidationError, match="cluster"):
        RedisStreamsDispatcher(repo, clock, redis_cluster.url(seed), prefix=prefix, cluster="yes")  # type: ignore[arg-type]

    dead = free_port(20000)
    with pytest.raises(ConfigurationError, match="cannot reach the Redis Cluster") as unreachable:
        RedisStreamsDispatcher(
            repo, clock, f"redis://:{secret}@127.0.0.1:{dead}/0", prefix=prefix, cluster=True, require_connection=True
        )
    assert secret not in str(unreachable.value)
    assert f"127.0.0.1:{dead}" in str(unreachable.value)
    assert redis_client.ping()  # the shared server was only asked, never changed


def test_unreachable_cluster_at_start_degrades_to_leasing_from_the_repository(caplog: pytest.LogCaptureFixture) -> None:
    """Without ``require_connection`` an unreachable seed is logged, and workers lease straight
    from the repository (as with a standalone Redis that is down), while the route is retried."""
    repo, clock = InMemoryJobRepository(), SystemClock()
    caplog.set_level(logging.WARNING, logger="tether.dispatch.redis")
    dispatcher = RedisStreamsDispatcher(repo, clock, f"redis://127.0.0.1:{free_port(20000)}/0", prefix=_stem(), cluster=True)
    try:
        job = _enqueue(repo, dispatcher)
        leased = dispatcher.acquire(queues=None, worker_id="w", limit=5, lease_timeout=60.0, max_wait=2.0)
        assert [j.id for j in leased] == [job.id]
        assert dispatcher.node is None
    finally:
        dispatcher.close()
    assert any("unreachable at start" in r.getMessage() for r in caplog.records)


# -- routing ---------------------------------------------------------------------------------------
def test_one_xreadgroup_reads_every_queue_of_a_worker_on_a_node_other_than_the_seed(
    redis_cluster: ThrowawayRedisCluster,
) -> None:
    seed, owner, other = redis_cluster.masters()
    prefix = prefix_on(redis_cluster, owner, _stem())
    repo, clock = InMemoryJobRepository(), SystemClock()
    producer = RedisStreamsDispatcher(repo, clock, redis_cluster.url(other), prefix=prefix, cluster=True)
    consumer = RedisStreamsDispatcher(repo, clock, redis_cluster.url(seed), prefix=prefix, cluster=True, block=0.5)
    nodes = {port: redis_cluster.client(port) for port in redis_cluster.masters()}
    try:
        assert producer.node == consumer.node == ("127.0.0.1", owner)
        queues = ["alpha", "beta", "gamma"]
        consumer.acquire(queues=queues, worker_id="w", limit=10, lease_timeout=60.0, max_wait=0.01)  # creates the groups
        jobs = [_enqueue(repo, producer, queue) for queue in queues]
        before = {port: _calls(client, "xreadgroup") for port, client in nodes.items()}
        leased = consumer.acquire(queues=queues, worker_id="w", limit=10, lease_timeout=60.0, max_wait=5.0)
        after = {port: _calls(client, "xreadgroup") for port, client in nodes.items()}
        assert sorted(j.id for j in leased) == sorted(j.id for j in jobs)
        assert {j.queue for j in leased} == set(queues)
        # One XREADGROUP over the three streams, on the slot's owner; the seed and the third master
        # served none (the keys never left the slot of {prefix}).
        assert after[owner] - before[owner] == 1
        assert after[seed] == before[seed] and after[other] == before[other]
        assert nodes[owner].exists(*(consumer.keys.stream(q) for q in queues)) == 3
        assert all(nodes[p].execute_command("CLUSTER", "COUNTKEYSINSLOT", consumer.keys.slot) == 0 for p in (seed, other))
    finally:
        producer.close()
        consumer.close()
        for client in nodes.values():
            delete_keys(client, consumer.keys.prefix)
            client.close()


def _drain_through(cluster: ThrowawayRedisCluster, seed: int, prefix: str, disturb, new_owner: int, jobs: int = 240):  # type: ignore[no-untyped-def]
    """Two workers and a producer (seeded at ``seed``) run ``jobs`` jobs, enqueued about 100 a
    second: a third, then ``disturb()``, a third more at once (while the cluster changes), then,
    once every worker's dispatcher has found ``new_owner`` (at most 30 s), the last third.
    Returns (workers, jobs, [producer, *worker dispatchers]) once every job ran (or after 60 s)."""
    repo, clock = InMemoryJobRepository(), SystemClock()

    def make() -> RedisStreamsDispatcher:
        return RedisStreamsDispatcher(
            repo, clock, cluster.url(seed), prefix=prefix, cluster=True, block=0.2, claim_idle=1.0, sweep_interval=0.5
        )

    producer = make()
    workers = DispatcherWorkers(repo, make, count=2)
    enqueued: list[Job] = []
    try:
        for i in range(jobs):
            if i == jobs // 3:
                disturb()
            if i == 2 * jobs // 3:
                end = time.monotonic() + 30
                while time.monotonic() < end and any(d.node != ("127.0.0.1", new_owner) for d in workers.dispatchers):
                    time.sleep(0.05)
            enqueued.append(_enqueue(repo, producer))
            time.sleep(0.01)
        workers.wait_for(jobs, timeout=60)
    finally:
        workers.shutdown()
    assert all(repo.get(j.id).status is JobStatus.COMPLETED for j in enqueued)
    return workers, enqueued, [producer, *workers.dispatchers]


def test_slot_resharded_to_another_master_under_running_workers(
    redis_cluster: ThrowawayRedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The slot of the prefix is migrated (IMPORTING/MIGRATING, MIGRATE of the streams with their
    groups and pending entries, SETSLOT NODE) while jobs flow: every job still runs exactly once,
    and the dispatchers follow the slot to its new master and publish there."""
    seed, source, target = redis_cluster.masters()
    prefix = prefix_on(redis_cluster, source, _stem())
    caplog.set_level(logging.INFO, logger="tether.dispatch.redis")
    target_client = redis_cluster.client(target)
    xadds_before = _calls(target_client, "xadd")
    workers, jobs, dispatchers = _drain_through(
        redis_cluster, seed, prefix, lambda: redis_cluster.move_slot(slot_of(prefix), target), new_owner=target
    )
    try:
        assert workers.errors == []
        assert workers.runs == Counter({j.id: 1 for j in jobs})
        assert redis_cluster.owner(slot_of(prefix)) == target
        assert all(d.node == ("127.0.0.1", target) for d in dispatchers)  # everyone follows the slot...
        assert _calls(target_client, "xadd") > xadds_before  # ...and publishes on the new master
        assert any(f"is served by 127.0.0.1:{target}" in r.getMessage() for r in caplog.records)
    finally:
        for dispatcher in dispatchers:
            dispatcher.close()
        delete_keys(target_client, prefix)
        target_client.close()


@pytest.fixture
def cluster_with_replica() -> Iterator[ThrowawayRedisCluster]:
    """Three masters plus one replica of the first master (its own processes, killed afterwards)."""
    missing = binaries_missing()
    if missing:
        service_unavailable("Redis Cluster", missing)
    cluster = ThrowawayRedisCluster(masters=3, replicas=1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.slow
def test_owning_master_killed_and_failed_over_to_its_replica(
    cluster_with_replica: ThrowawayRedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The master owning the prefix's slot is SIGKILLed while jobs flow; the cluster promotes its
    replica after the node timeout.  Meanwhile workers lease from the repository; afterwards the
    dispatchers find the slot on the promoted replica.  Every job runs exactly once."""
    cluster = cluster_with_replica
    victim, seed, _ = cluster.masters()
    replica = cluster.ports[3]
    prefix = prefix_on(cluster, victim, _stem())
    caplog.set_level(logging.INFO, logger="tether.dispatch.redis")
    xadds_before = _calls(cluster.client(replica), "xadd")
    workers, jobs, dispatchers = _drain_through(cluster, seed, prefix, lambda: cluster.kill(victim), new_owner=replica)
    for dispatcher in dispatchers:
        dispatcher.close()
    assert workers.errors == []
    assert workers.runs == Counter({j.id: 1 for j in jobs})
    assert cluster.owner(slot_of(prefix)) == replica
    assert all(d.node == ("127.0.0.1", replica) for d in dispatchers)
    assert _calls(cluster.client(replica), "xadd") > xadds_before  # Redis dispatch resumed on the promoted replica
    assert any(f"is served by 127.0.0.1:{replica}" in r.getMessage() for r in caplog.records)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings  # the failover was felt, and logged at a bounded rate


def test_the_cluster_switch_reaches_the_dispatcher_from_settings_and_connect(redis_cluster: ThrowawayRedisCluster) -> None:
    """``TETHER_REDIS_CLUSTER=1`` (through :func:`from_settings`) and ``redis_options={"cluster": True}``
    (through ``tether.connect``) both give a dispatcher on the slot's master; a job enqueued by one
    app is leased by the other's worker through the stream."""
    import tether
    from tether.entrypoints.container import from_settings
    from tether.entrypoints.settings import Settings

    seed, owner, _ = redis_cluster.masters()
    prefix = prefix_on(redis_cluster, owner, _stem())
    settings = Settings.load(
        environ={
            "TETHER_DATABASE_URL": "memory://",
            "TETHER_REDIS_URL": redis_cluster.url(seed),
            "TETHER_REDIS_PREFIX": prefix,
            "TETHER_REDIS_CLUSTER": "1",
        }
    )
    app = from_settings(settings)
    try:
        other = tether.connect("memory://", redis_url=redis_cluster.url(owner), redis_options={"prefix": prefix, "cluster": True})
        assert isinstance(other.dispatcher, RedisStreamsDispatcher)
        assert other.dispatcher.node == ("127.0.0.1", owner)
        other.close()
        assert isinstance(app.dispatcher, RedisStreamsDispatcher)
        assert app.dispatcher.node == ("127.0.0.1", owner)
        app.dispatcher.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=60.0, max_wait=0.01)
        job = app.enqueue("cluster.job", {}).job
        leased = app.dispatcher.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=60.0, max_wait=5.0)
        assert [j.id for j in leased] == [job.id]
        assert redis_cluster.client(owner).xlen(app.dispatcher.keys.stream("default")) >= 1
    finally:
        app.close()
        client = redis_cluster.client(owner)
        delete_keys(client, prefix)
        client.close()
