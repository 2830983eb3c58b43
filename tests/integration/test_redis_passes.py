"""One pass of the Redis Streams dispatcher's sweeper and reclaimer, called on its own: what it did
is in the result it returns (published, timed and lagging counts; entries acknowledged).

Each test uses its own key prefix carrying RUN_ID and deletes its keys afterwards; repository
times come from a FakeClock, Redis idle times are real (``claim_idle`` is short, and the tests
sleep past it).
"""

from __future__ import annotations

import time

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher
from tether.adapters.redis_streams.sweeper import SweepResult
from tether.domain.job import Job
from tether.domain.validation import prepare_job

from tests.conftest import REDIS_URL
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis
CLAIM_IDLE = 0.3


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def repo():
    return InMemoryJobRepository()


@pytest.fixture
def dispatcher(redis_client, repo, clock):
    with temporary_prefix(redis_client, "p") as prefix:
        d = RedisStreamsDispatcher(repo, clock, REDIS_URL, prefix=prefix, claim_idle=CLAIM_IDLE, sweep_interval=30.0, block=0.2)
        try:
            yield d
        finally:
            d.close()


def enqueue(repo, clock, **kwargs) -> Job:
    return repo.enqueue(prepare_job("t.job", {}, now=clock.now(), **kwargs), now=clock.now()).job


def test_a_sweep_pass_reports_what_it_published_put_on_the_timer_and_skipped(redis_client, repo, clock, dispatcher):
    d = dispatcher
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    due = [enqueue(repo, clock) for _ in range(2)]  # their notifications were lost
    enqueue(repo, clock, delay=10)  # falls due before the next pass: on the timer
    enqueue(repo, clock, delay=60)  # falls due after it: the next pass's

    first = d._sweeper.sweep_once({"default"}, clock.now())
    assert first == SweepResult(published=2, due_soon=1, lagging=frozenset())
    assert sorted(int(fields["id"]) for _, fields in redis_client.xrange(stream)) == [job.id for job in due]

    # nobody read those entries yet: the queue lags, and a pass leaves it alone
    assert d._sweeper.sweep_once({"default"}, clock.now()) == SweepResult(lagging=frozenset({"default"}))

    # caught up but not leased: within the interval each job is published once, however often swept
    redis_client.xreadgroup(d.group, "reader", {stream: ">"}, count=10)
    assert d._sweeper.sweep_once({"default"}, clock.now()) == SweepResult(published=0, due_soon=1, lagging=frozenset())
    assert redis_client.xlen(stream) == 2


def test_a_reclaim_pass_acknowledges_dead_consumers_idle_entries_and_counts_them(redis_client, repo, clock, dispatcher):
    d = dispatcher
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    d.notify([enqueue(repo, clock) for _ in range(3)])
    redis_client.xreadgroup(d.group, "dead", {stream: ">"}, count=3)  # read, never acknowledged

    assert d._reclaimer.reclaim_once({"default"}) == 0  # not idle for claim_idle yet
    time.sleep(CLAIM_IDLE + 0.1)
    assert d._reclaimer.reclaim_once({"default", "other"}) == 3  # "other" has no group: nothing pending
    assert int(redis_client.xpending(stream, d.group)["pending"]) == 0
    assert d._reclaimer.reclaim_once({"default"}) == 0
