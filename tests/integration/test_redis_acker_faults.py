"""The Redis Streams acknowledger's thread (``tether-redis-acker``) outlives what a pass raises,
``asyncio.CancelledError`` included, and is started again should it have ended: later
acknowledgements still go out.  Against the shared Redis, under a key prefix of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher

from tests.conftest import REDIS_URL, wait_for
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis


@pytest.fixture
def dispatcher(redis_client) -> Iterator[RedisStreamsDispatcher]:  # type: ignore[no-untyped-def]
    with temporary_prefix(redis_client, "ack") as prefix:
        d = RedisStreamsDispatcher(InMemoryJobRepository(), FakeClock(), REDIS_URL, prefix=prefix, block=0.2)
        try:
            yield d
        finally:
            d.close()


def pending(redis_client, d: RedisStreamsDispatcher, stream: str) -> int:  # type: ignore[no-untyped-def]
    return int(redis_client.xpending(stream, d.group)["pending"])


def test_the_acker_thread_survives_a_cancelled_pass_and_acks_later_entries(redis_client, dispatcher) -> None:  # type: ignore[no-untyped-def]
    d = dispatcher
    acks = d._acks
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    for n in range(2):
        redis_client.xadd(stream, {"id": n})
    read = redis_client.xreadgroup(d.group, "c1", {stream: ">"}, count=2)
    first, second = (entry_id.decode() if isinstance(entry_id, bytes) else entry_id for entry_id, _ in read[0][1])
    real_flush = acks.flush
    calls: list[int] = []

    def flush() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise asyncio.CancelledError
        real_flush()

    acks.flush = flush  # type: ignore[method-assign]
    acks.finish({stream: [first]}, [], defer=True)
    wait_for(lambda: len(calls) >= 1, 5.0, "the first pass")
    assert acks._thread is not None
    wait_for(lambda: acks._thread is not None and acks._thread.is_alive(), 5.0, "the thread alive")
    acks.finish({stream: [second]}, [], defer=True)
    wait_for(lambda: pending(redis_client, d, stream) == 0, 5.0, "both entries acknowledged")
    assert acks._thread.is_alive()
    assert calls == [0, 1]
