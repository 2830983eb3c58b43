"""The dispatcher contract against :class:`~tether.adapters.redis_streams.RedisStreamsDispatcher`
on the real Redis test server (memory repository; a key prefix per test, deleted afterwards)."""

from __future__ import annotations

import itertools

import pytest
import redis
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.testing.contract.dispatcher import DispatcherContract

from tests.conftest import REDIS_URL, RUN_ID, service_unavailable

pytestmark = pytest.mark.redis
_counter = itertools.count()


@pytest.fixture
def redis_client():
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_unavailable("Redis", str(exc))
    yield client
    client.close()


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
