"""The dispatcher contract against :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher`
on the real Redis test server (memory repository; a key prefix per test, deleted afterwards)."""

from __future__ import annotations

import itertools

import pytest
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.testing.contract.dispatcher import DispatcherContract

from tests.conftest import DATABASE_URL, REDIS_URL, RUN_ID, service_unavailable

pytestmark = pytest.mark.redis
_counter = itertools.count()


class TestRedisStreamsDispatcher(DispatcherContract):
    @pytest.fixture
    def dispatcher(self, repository, clock, redis_client):
        prefix = f"tt-{RUN_ID}-c{next(_counter)}"
        d = RedisStreamsDispatcher(repository, clock, REDIS_URL, prefix=prefix, block=0.5, sweep_interval=0.2)
        yield d
        d.close()
        keys = list(redis_client.scan_iter(match=d.keys.pattern(), count=1000))
        if keys:
            redis_client.delete(*keys)


class TestRedisStreamsDispatcherOnSqlite(TestRedisStreamsDispatcher):
    """The same contract with a SQLite file repository under the dispatcher."""

    @pytest.fixture
    def repository(self, tmp_path):
        from tether.adapters.sqlalchemy import open_repository

        repo = open_repository(f"sqlite:///{tmp_path / 'contract.db'}")
        yield repo
        repo.close()


@pytest.mark.postgres
class TestRedisStreamsDispatcherOnPostgres(TestRedisStreamsDispatcher):
    """The same contract with a PostgreSQL repository (a schema of its own, dropped afterwards)."""

    @pytest.fixture
    def repository(self):
        from tether.adapters.sqlalchemy import open_repository
        from tether.domain.errors import StorageUnavailable

        try:
            repo = open_repository(DATABASE_URL, schema=f"tether_test_{RUN_ID}_rdisp{next(_counter)}", pool_size=20)
        except StorageUnavailable as exc:
            service_unavailable("PostgreSQL", str(exc))
        yield repo
        repo.drop_schema()
        repo.close()
