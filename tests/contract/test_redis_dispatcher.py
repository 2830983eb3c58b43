"""The dispatcher contract against :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher`
on the real Redis test server (memory repository; a key prefix per test, deleted afterwards)."""

from __future__ import annotations

import pytest
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.testing.contract.dispatcher import DispatcherContract

from tests.conftest import REDIS_URL
from tests.contract.repository_mixins import OnPostgres, OnSqlite
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis


class TestRedisStreamsDispatcher(DispatcherContract):
    @pytest.fixture
    def dispatcher(self, repository, clock, redis_client):
        with temporary_prefix(redis_client, "c") as prefix:
            d = RedisStreamsDispatcher(repository, clock, REDIS_URL, prefix=prefix, block=0.5, sweep_interval=0.2)
            yield d
            d.close()


class TestRedisStreamsDispatcherOnSqlite(OnSqlite, TestRedisStreamsDispatcher):
    """The same contract with a SQLite file repository under the dispatcher."""


@pytest.mark.postgres
class TestRedisStreamsDispatcherOnPostgres(OnPostgres, TestRedisStreamsDispatcher):
    """The same contract with a PostgreSQL repository (a schema of its own, dropped afterwards)."""
