"""Consumers do not pile up in the group, against the real Redis test server: a dispatcher that
closes cleanly deletes its consumer where it has nothing pending, and consumers idle past the limit
with nothing pending are pruned (by a sweep pass, at most once per interval), while a consumer
with pending entries is always kept.

Each test uses its own key prefix carrying RUN_ID and deletes its keys afterwards; repository times
come from a FakeClock; the idle limit is patched down to a fraction of a second.
"""

from __future__ import annotations

import time

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.adapters.redis_streams import members as members_module
from tether.domain.job import Job
from tether.domain.validation import prepare_job

from tests.conftest import REDIS_URL
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def repo():
    return InMemoryJobRepository()


@pytest.fixture
def prefix(redis_client):
    with temporary_prefix(redis_client, "m") as name:
        yield name


def make(repo, clock, prefix: str, consumer: str) -> RedisStreamsDispatcher:
    return RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, consumer=consumer, claim_idle=30.0,
                                  sweep_interval=30.0, block=0.2)


def enqueue(repo, clock) -> Job:
    return repo.enqueue(prepare_job("t.job", {}, now=clock.now()), now=clock.now()).job


def consumers(redis_client, d: RedisStreamsDispatcher, queue: str = "default") -> dict[str, int]:
    """name -> pending entries, of the group of ``queue``'s stream."""
    return {c["name"]: c["pending"] for c in redis_client.xinfo_consumers(d.keys.stream(queue), d.group)}


def test_a_dispatcher_that_closes_cleanly_leaves_the_group(redis_client, repo, clock, prefix) -> None:
    worker = make(repo, clock, prefix, "worker-a")
    other = make(repo, clock, prefix, "worker-b")
    try:
        worker.notify([enqueue(repo, clock), enqueue(repo, clock)])
        for d in (worker, other):  # each reads (so becomes a consumer) and leases one job
            assert len(d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=60, max_wait=2.0)) == 1
            d._acks.flush()
        assert consumers(redis_client, worker) == {"worker-a": 0, "worker-b": 0}
    finally:
        worker.close()
    assert consumers(redis_client, other) == {"worker-b": 0}  # only the one that closed is gone
    other.close()
    assert consumers(redis_client, other) == {}


def test_a_consumer_with_pending_entries_stays_at_close(redis_client, repo, clock, prefix) -> None:
    worker = make(repo, clock, prefix, "worker-a")
    stream = worker.keys.stream("default")
    redis_client.xgroup_create(stream, worker.group, id="0", mkstream=True)
    try:
        redis_client.xadd(stream, {"id": "424242"})  # an id the repository does not know yet: held for a retry
        assert worker.acquire(queues=["default"], worker_id="a", limit=1, lease_timeout=60, max_wait=0.5) == []
        assert consumers(redis_client, worker) == {"worker-a": 1}
    finally:
        worker.close()
    assert consumers(redis_client, worker) == {"worker-a": 1}  # its entry is still someone's to claim


def test_idle_consumers_with_nothing_pending_are_pruned_and_others_kept(
    redis_client, repo, clock, prefix, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(members_module, "CONSUMER_IDLE_LIMIT", 0.3)
    d = make(repo, clock, prefix, "sweeper")
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    try:
        redis_client.xgroup_createconsumer(stream, d.group, "gone-empty")  # a process that died with nothing pending
        d.notify([enqueue(repo, clock)])
        redis_client.xreadgroup(d.group, "gone-busy", {stream: ">"}, count=1)  # died holding an entry
        time.sleep(0.5)
        redis_client.xgroup_createconsumer(stream, d.group, "alive")  # seen just now
        assert consumers(redis_client, d) == {"gone-empty": 0, "gone-busy": 1, "alive": 0}

        assert d._members.prune_once({"default", "never-published"}) == [(stream, "gone-empty")]
        assert consumers(redis_client, d) == {"gone-busy": 1, "alive": 0}
        assert d._members.prune_once({"default"}) == []
    finally:
        d.close()


def test_a_sweep_pass_prunes_at_most_once_per_interval(redis_client, repo, clock, prefix, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(members_module, "CONSUMER_IDLE_LIMIT", 0.2)
    d = make(repo, clock, prefix, "sweeper")
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    redis_client.sadd(d.keys.registry, "default")
    try:
        redis_client.xgroup_createconsumer(stream, d.group, "gone-1")
        time.sleep(0.3)
        d.sweep(clock.now())  # a pass prunes...
        assert "gone-1" not in consumers(redis_client, d)
        redis_client.xgroup_createconsumer(stream, d.group, "gone-2")
        time.sleep(0.3)
        d.sweep(clock.now())  # ... but not again within PRUNE_INTERVAL
        assert "gone-2" in consumers(redis_client, d)
        assert d._members.maybe_prune({"default"}) is None
        monkeypatch.setattr(members_module, "PRUNE_INTERVAL", 0.0)
        d._members._next_prune = 0.0
        assert d._members.maybe_prune({"default"}) == [(stream, "gone-2")]
    finally:
        d.close()
