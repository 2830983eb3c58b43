"""The dispatcher contract against :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher`
on a real Redis Cluster (``cluster=True``; three masters started by the ``redis_cluster`` fixture),
over the memory, SQLite and PostgreSQL repositories.

The seed URL is always the first master, and each test's prefix is chosen so that its hash slot
lives on another master in turn, so the dispatcher must find the slot's owner to pass at all.
"""

from __future__ import annotations

import itertools

import pytest
import redis
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.testing.contract.dispatcher import DispatcherContract

from tests.conftest import RUN_ID
from tests.contract.repository_mixins import OnPostgres, OnSqlite
from tests.redis_cluster import prefix_on
from tests.redis_fixtures import delete_keys

pytestmark = pytest.mark.redis
_counter = itertools.count()


class TestRedisStreamsDispatcherOnCluster(DispatcherContract):
    @pytest.fixture
    def dispatcher(self, repository, clock, redis_cluster):
        n = next(_counter)
        owner = redis_cluster.masters()[n % 3]
        prefix = prefix_on(redis_cluster, owner, f"tc-{RUN_ID}-{n}")
        d = RedisStreamsDispatcher(
            repository, clock, redis_cluster.url(), prefix=prefix, block=0.5, sweep_interval=0.2, cluster=True
        )
        assert d.node == ("127.0.0.1", owner)
        yield d
        d.close()
        node = redis.Redis(host="127.0.0.1", port=redis_cluster.owner(d.keys.slot), decode_responses=True)
        delete_keys(node, prefix)
        node.close()


class TestRedisStreamsDispatcherOnClusterOnSqlite(OnSqlite, TestRedisStreamsDispatcherOnCluster):
    """The same contract with a SQLite file repository under the dispatcher."""


@pytest.mark.postgres
class TestRedisStreamsDispatcherOnClusterOnPostgres(OnPostgres, TestRedisStreamsDispatcherOnCluster):
    """The same contract with a PostgreSQL repository (a schema of its own, dropped afterwards)."""
