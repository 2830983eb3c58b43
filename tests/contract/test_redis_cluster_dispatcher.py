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

from tests.conftest import DATABASE_URL, RUN_ID, service_unavailable
from tests.redis_cluster import prefix_on

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
        keys = list(node.scan_iter(match=d.keys.pattern(), count=1000))
        if keys:
            node.delete(*keys)
        node.close()


class TestRedisStreamsDispatcherOnClusterOnSqlite(TestRedisStreamsDispatcherOnCluster):
    """The same contract with a SQLite file repository under the dispatcher."""

    @pytest.fixture
    def repository(self, tmp_path):
        from tether.adapters.sqlalchemy import open_repository

        repo = open_repository(f"sqlite:///{tmp_path / 'contract.db'}")
        yield repo
        repo.close()


@pytest.mark.postgres
class TestRedisStreamsDispatcherOnClusterOnPostgres(TestRedisStreamsDispatcherOnCluster):
    """The same contract with a PostgreSQL repository (a schema of its own, dropped afterwards)."""

    @pytest.fixture
    def repository(self):
        from tether.adapters.sqlalchemy import open_repository
        from tether.domain.errors import StorageUnavailable

        try:
            repo = open_repository(DATABASE_URL, schema=f"tether_test_{RUN_ID}_cdisp{next(_counter)}", pool_size=20)
        except StorageUnavailable as exc:
            service_unavailable("PostgreSQL", str(exc))
        yield repo
        repo.drop_schema()
        repo.close()
