"""RedisStreamsDispatcher against the real Redis test server: pending entries (C07), lost publishes
(C09 b, c), bounded streams, BUSYGROUP/NOGROUP, and configuration errors.

Each test uses its own key prefix carrying RUN_ID and deletes its keys afterwards.  Times that
matter to the repository come from a FakeClock; Redis idle times are real, so ``claim_idle`` is
made short and the tests sleep past it (a pause, never an assertion on duration).
"""

from __future__ import annotations

import logging
import time

import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.memory import InMemoryJobRepository
from tether.adapters.redis_streams import RedisStreamsDispatcher, check_server_version
from tether.adapters.redis_streams import sweeper as sweeper_module
from tether.adapters.redis_streams.keys import StreamKeys, redact_url
from tether.domain.errors import ConfigurationError, DispatcherUnavailable, ServiceUnavailable, ValidationError
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job

from tests.conftest import REDIS_URL
from tests.redis_fixtures import temporary_prefix

pytestmark = pytest.mark.redis
LEASE = 15 * 60.0
CLAIM_IDLE = 0.3


@pytest.fixture
def prefix(redis_client):
    with temporary_prefix(redis_client, "i") as name:
        yield name


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def repo():
    return InMemoryJobRepository()


@pytest.fixture
def make(repo, clock, prefix):
    made: list[RedisStreamsDispatcher] = []

    def build(**kwargs) -> RedisStreamsDispatcher:
        kwargs.setdefault("prefix", prefix)
        kwargs.setdefault("claim_idle", CLAIM_IDLE)
        kwargs.setdefault("sweep_interval", 0.2)
        kwargs.setdefault("block", 0.2)
        d = RedisStreamsDispatcher(repo, clock, kwargs.pop("url", REDIS_URL), **kwargs)
        made.append(d)
        return d

    yield build
    for d in made:
        d.close()


def enqueue(repo, clock, queue="default", **kwargs) -> Job:
    return repo.enqueue(prepare_job("t.job", {}, now=clock.now(), queue=queue, **kwargs), now=clock.now()).job


def pending(redis_client, d: RedisStreamsDispatcher, queue="default") -> int:
    return int(redis_client.xpending(d.keys.stream(queue), d.group)["pending"])


def collect(d, clock, count, *, worker="w", queues=("default",), limit=10, rounds=400) -> list[Job]:
    got: list[Job] = []
    for _ in range(rounds):
        if len(got) >= count:
            break
        jobs = d.acquire(queues=list(queues), worker_id=worker, limit=limit, lease_timeout=LEASE, max_wait=0.2)
        if not jobs:
            d.maintain(clock.now())
        got.extend(jobs)
    return got


# -- C07: pending entries never acknowledged ---------------------------------------------------
def test_c07_dead_consumers_entry_is_claimed_and_acked_and_the_job_runs_once(redis_client, repo, clock, make):
    c2 = make(consumer="c2")
    # jobs 1-4 done already, job 5 is the one of the case
    for _ in range(4):
        job = enqueue(repo, clock)
        [leased] = repo.lease(queues=["default"], worker_id="early", now=clock.now(), lease_timeout=LEASE)
        repo.complete(leased.id, leased.lease_token, now=clock.now())
    job5 = enqueue(repo, clock)
    assert job5.id == 5
    stream = c2.keys.stream("default")
    redis_client.xgroup_create(stream, c2.group, id="0", mkstream=True)
    c2.notify([job5])
    # consumer c1 reads the entry, leases job 5 ... and is killed before XACK
    [[_, [(entry_id, fields)]]] = redis_client.xreadgroup(c2.group, "c1", {stream: ">"}, count=1)
    assert fields == {"id": "5"}
    held = repo.lease_job(5, worker_id="c1", now=clock.now(), lease_timeout=LEASE)
    assert held is not None and held.attempts == 1
    assert pending(redis_client, c2) == 1

    # the stream's idle time is no lease: while c1's lease is valid nobody else gets job 5
    time.sleep(CLAIM_IDLE + 0.1)
    c2.sweep(clock.now())
    assert c2.acquire(queues=["default"], worker_id="c2", limit=1, lease_timeout=LEASE, max_wait=0.3) == []
    assert pending(redis_client, c2) == 0  # c1's stale entry was claimed and acknowledged
    assert repo.get(5).lease_token == held.lease_token

    # t=16 min: the reaper returns job 5; the sweep publishes it again; c2 runs and acks it
    clock.advance(minutes=16)
    [reaped] = repo.reap(now=clock.now())
    assert (reaped.id, reaped.status, reaped.attempts) == (5, JobStatus.RETRYING, 1)
    time.sleep(0.25)  # past the once-per-interval sweep marker of job 5
    c2.sweep(clock.now())
    [job] = collect(c2, clock, 1, worker="c2", limit=1)
    assert (job.id, job.attempts, job.leased_by) == (5, 2, "c2")
    done = repo.complete(5, job.lease_token, now=clock.now())
    assert (done.status, done.attempts) == (JobStatus.COMPLETED, 2)
    c2.maintain(clock.now())  # acks of leased entries go out with the next acquire or maintain
    assert pending(redis_client, c2) == 0
    assert redis_client.xpending_range(stream, c2.group, "-", "+", 10) == []
    assert entry_id  # the id c1 held is gone from the pending entries list


def test_c07_trimmed_or_deleted_entry_is_acked_without_crashing(redis_client, repo, clock, make):
    d = make(consumer="c2")
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    jobs = [enqueue(repo, clock) for _ in range(3)]
    d.notify(jobs)
    entries = redis_client.xreadgroup(d.group, "c1", {stream: ">"}, count=3)[0][1]
    assert len(entries) == 3 and pending(redis_client, d) == 3
    redis_client.xdel(stream, entries[0][0])  # deleted under the pending entry
    redis_client.xtrim(stream, maxlen=0)  # and the rest trimmed away
    assert redis_client.xlen(stream) == 0
    time.sleep(CLAIM_IDLE + 0.1)
    d.sweep(clock.now())  # XAUTOCLAIM reports them deleted; they are acknowledged
    assert pending(redis_client, d) == 0
    # the jobs were never leased: the sweep (same pass) re-published them, and they all run
    got = collect(d, clock, 3, worker="c2")
    assert sorted(j.id for j in got) == [j.id for j in jobs]
    d.maintain(clock.now())
    assert pending(redis_client, d) == 0
    assert all(repo.get(j.id).status is JobStatus.RUNNING for j in jobs)


# -- C09: publish after commit, transient unseen ids, failed publishes --------------------------
def test_c09b_id_not_visible_yet_is_transient_then_leased(redis_client, repo, clock, make):
    d = make(claim_idle=60.0)  # long: a stalled test machine must not see the id given up on
    with repo.transaction() as tx:
        job = repo.enqueue(prepare_job("t.job", {}, now=clock.now()), now=clock.now(), connection=tx).job
        d.notify([job])  # published too early (before commit is visible: a replica lag, say)
        assert d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0.2) == []
        assert pending(redis_client, d) == 1  # not lost: still pending, held for a retry
    got = d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=2.0)
    assert [j.id for j in got] == [job.id]
    d.maintain(clock.now())  # (sends any acknowledgement still waiting for the background acker)
    assert pending(redis_client, d) == 0


def test_c09b_id_that_never_appears_is_acked_after_claim_idle(redis_client, repo, clock, make):
    d = make()

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), repo.transaction() as tx:
        job = repo.enqueue(prepare_job("t.job", {}, now=clock.now()), now=clock.now(), connection=tx).job
        d.notify([job])
        raise Rollback
    assert d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0.1) == []
    assert pending(redis_client, d) == 1
    time.sleep(CLAIM_IDLE + 0.1)
    assert d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0.3) == []
    assert pending(redis_client, d) == 0
    assert repo.list_jobs() == []


def test_c09c_publish_fails_after_commit_and_the_job_still_runs_once(repo, clock, make, caplog):
    producer = make(url="redis://127.0.0.1:1/0")  # nothing listens there: every publish fails
    worker = make()
    caplog.set_level(logging.WARNING, logger="tether.dispatch.redis")
    job = enqueue(repo, clock)
    producer.notify([job])  # must not raise
    # the worker has never heard of the job; its own sweep (every sweep_interval) publishes it
    got: list[Job] = []
    for _ in range(50):
        got += worker.acquire(queues=["default"], worker_id="w", limit=5, lease_timeout=LEASE, max_wait=0.2)
        if got:
            break
    assert [j.id for j in got] == [job.id]
    repo.complete(job.id, got[0].lease_token, now=clock.now())
    time.sleep(0.3)
    worker.sweep(clock.now())
    assert worker.acquire(queues=["default"], worker_id="w", limit=5, lease_timeout=LEASE, max_wait=0.3) == []
    assert repo.get(job.id).attempts == 1
    assert any("127.0.0.1:1" in rec.getMessage() for rec in caplog.records)


def test_dispatcher_without_redis_leases_from_the_repository(repo, clock, make):
    d = make(url="redis://127.0.0.1:1/0")
    job = enqueue(repo, clock)
    d.notify([job])
    got = d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=2.0)
    assert [j.id for j in got] == [job.id]
    assert got[0].leased_by == "w"


def test_a_future_job_notified_here_is_published_when_due_without_a_sweep(redis_client, repo, clock, make):
    d = make(sweep_interval=600.0)  # the periodic sweep runs once, at the first acquire, then not for 10 min
    job = enqueue(repo, clock, delay=30.0)
    d.notify([job])
    assert d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0.2) == []
    assert redis_client.xlen(d.keys.stream("default")) == 0  # nothing published before it is due
    clock.advance(30.0)
    got = d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=2.0)
    assert [j.id for j in got] == [job.id]
    assert redis_client.xlen(d.keys.stream("default")) == 1


def test_sweep_publishes_a_job_at_most_once_per_interval_however_many_workers_sweep(redis_client, repo, clock, make):
    sweepers = [make(consumer=f"s{i}", sweep_interval=1.0) for i in range(3)]
    job = enqueue(repo, clock)  # its notification was lost; nobody leases it during the test
    stream = sweepers[0].keys.stream("default")
    group = sweepers[0].group
    redis_client.xgroup_create(stream, group, id="0", mkstream=True)

    def read_all() -> list[str]:  # a consumer that keeps the group caught up (reads, never acks)
        reply = redis_client.xreadgroup(group, "reader", {stream: ">"}, count=100)
        return [f["id"] for _, entries in reply or [] for _, f in entries]

    published: list[str] = []
    for _ in range(3):
        for d in sweepers:
            d.sweep(clock.now())  # forced passes: only the per-job marker holds them back
            published += read_all()
        for d in sweepers:
            d.maintain(clock.now())
            published += read_all()
    assert published == [str(job.id)]
    time.sleep(1.1)  # one interval later, a job still not taken is published once more
    for d in sweepers:
        d.sweep(clock.now())
        published += read_all()
    assert published == [str(job.id), str(job.id)]


def test_entries_beyond_limit_are_handed_back_and_every_job_runs_once(redis_client, repo, clock, make):
    d = make(sweep_interval=600.0)
    assert d.acquire(queues=["a", "b"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0) == []  # groups, first sweep
    jobs = [enqueue(repo, clock, queue=q) for q in ("a", "b") for _ in range(3)]
    d.notify(jobs)
    first = d.acquire(queues=["a", "b"], worker_id="w", limit=2, lease_timeout=LEASE, max_wait=1.0)
    assert len(first) == 2  # COUNT 2 per stream read 4 entries: 2 leased, 2 re-added and acknowledged
    rest = collect(d, clock, 4, queues=("a", "b"), limit=2)
    ids = [j.id for j in first + rest]
    assert sorted(ids) == sorted(j.id for j in jobs)
    d.maintain(clock.now())
    assert pending(redis_client, d, "a") == pending(redis_client, d, "b") == 0


def test_a_batch_of_entries_leases_in_lease_order(redis_client, repo, clock, make):
    d = make(sweep_interval=600.0)
    assert d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0) == []  # groups, first sweep
    low = enqueue(repo, clock, priority=0)
    high = enqueue(repo, clock, priority=10)
    d.notify([low])  # only the low-priority job's entry arrives (high's notification was lost)
    [got] = d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=1.0)
    assert got.id == high.id  # the entry bought a lease in lease order: priority first
    d.sweep(clock.now())  # and the job left over is the sweep's
    [second] = collect(d, clock, 1)
    assert second.id == low.id


def test_a_batch_publish_adds_one_entry_per_job_in_order_to_each_queues_stream(redis_client, repo, clock, make):
    d = make()
    sizes = {"few": 3, "many": 40, "chunked": 2100}  # below the script's minimum, above it, several calls
    jobs = [enqueue(repo, clock, queue=q) for q, n in sizes.items() for _ in range(n)]
    redis_client.script_flush()  # the server forgot the script (a restart): published all the same
    d.notify(jobs)
    for queue in sizes:
        entries = redis_client.xrange(d.keys.stream(queue))
        assert [fields for _, fields in entries] == [{"id": str(j.id)} for j in jobs if j.queue == queue]
    assert redis_client.smembers(d.keys.registry) >= set(sizes)


# -- bounded streams ---------------------------------------------------------------------------
def test_streams_stay_bounded_and_trimming_loses_no_job(redis_client, repo, clock, make):
    d = make(maxlen=100)
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    jobs = [enqueue(repo, clock) for _ in range(1500)]
    for i in range(0, 1500, 50):
        d.notify(jobs[i : i + 50])
    length = redis_client.xlen(stream)
    assert length < 400, f"stream holds {length} entries for maxlen=100"
    got = collect(d, clock, 1500, limit=50, rounds=600)
    ids = [j.id for j in got]
    assert len(ids) == len(set(ids)) == 1500
    assert redis_client.xlen(stream) < 400
    d.maintain(clock.now())
    assert pending(redis_client, d) == 0


# -- consumer group self-healing -------------------------------------------------------------
def test_busygroup_is_success(redis_client, repo, clock, make):
    a, b = make(consumer="a"), make(consumer="b")
    stream = a.keys.stream("default")
    redis_client.xgroup_create(stream, a.group, id="0", mkstream=True)  # someone else created the group
    job = enqueue(repo, clock)
    a.notify([job])
    assert b.acquire(queues=["default"], worker_id="wb", limit=1, lease_timeout=LEASE, max_wait=0.2)[0].id == job.id
    assert a.acquire(queues=["default"], worker_id="wa", limit=1, lease_timeout=LEASE, max_wait=0.2) == []
    assert [g["name"] for g in redis_client.xinfo_groups(stream)] == [a.group]


@pytest.mark.parametrize("loss", ["delete stream", "destroy group"])
def test_nogroup_recreates_stream_and_group(redis_client, repo, clock, make, loss):
    d = make()
    first = enqueue(repo, clock)
    d.notify([first])
    assert d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=1.0)[0].id == first.id
    stream = d.keys.stream("default")
    if loss == "delete stream":
        redis_client.delete(stream)
    else:
        redis_client.xgroup_destroy(stream, d.group)
    second = enqueue(repo, clock)
    d.notify([second])
    got = collect(d, clock, 1)
    assert [j.id for j in got] == [second.id]
    d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0.3)  # reads Redis again
    assert [g["name"] for g in redis_client.xinfo_groups(stream)] == [d.group]


def test_keys_share_one_hash_tag(prefix):
    keys = StreamKeys(prefix)
    tag = "{" + prefix + "}"
    for key in (keys.stream("default"), keys.stream("a.b-c_d"), keys.registry, keys.swept(7), keys.sweep_lock):
        assert key.startswith(tag + ":")
    assert keys.queue_of(keys.stream("emails")) == "emails"
    with pytest.raises(ValidationError) as err:
        keys.stream("bad{tag}")
    assert err.value.field == "queue"
    with pytest.raises(ValidationError) as err:
        StreamKeys("has space")
    assert err.value.field == "prefix"


# -- bad configuration -------------------------------------------------------------------------
def test_wrong_password_names_the_url_without_the_password(repo, clock, redis_client):
    url = REDIS_URL.replace("redis://", "redis://nosuchuser:s3cr3t-pw@", 1)
    with pytest.raises(ConfigurationError) as err:
        RedisStreamsDispatcher(repo, clock, url)
    message = str(err.value)
    assert "s3cr3t-pw" not in message
    assert "nosuchuser:***@" in message
    assert "authentication" in message


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://127.0.0.1:6379/0", "redis_url http://127.0.0.1:6379/0"),
        ("redis://:pw-xyz@127.0.0.1:6379/99", "redis_url redis://:***@127.0.0.1:6379/99"),
        ("redis://127.0.0.1:6379/notanumber", "redis_url redis://127.0.0.1:6379/notanumber"),
    ],
)
def test_bad_urls_are_configuration_errors(repo, clock, redis_client, url, words):
    with pytest.raises(ConfigurationError) as err:
        RedisStreamsDispatcher(repo, clock, url)
    assert words in str(err.value)
    assert "pw-xyz" not in str(err.value)


def test_unreachable_redis_is_an_error_only_when_required(repo, clock):
    with pytest.raises(DispatcherUnavailable) as err:
        RedisStreamsDispatcher(repo, clock, "redis://:hidden@127.0.0.1:1/0", require_connection=True)
    assert "redis://:***@127.0.0.1:1/0" in str(err.value) and "hidden" not in str(err.value)
    assert isinstance(err.value, ConfigurationError) and isinstance(err.value, ServiceUnavailable)
    RedisStreamsDispatcher(repo, clock, "redis://127.0.0.1:1/0").close()  # degraded, not fatal


def test_redis_without_xautoclaim_is_refused():
    with pytest.raises(ConfigurationError) as err:
        check_server_version("4.0.14", "redis://h:6379/0")
    assert "Redis 4.0.14" in str(err.value) and ">= 6.2" in str(err.value) and "redis://h:6379/0" in str(err.value)
    with pytest.raises(ConfigurationError):
        check_server_version("6.0.9", "redis://h")
    check_server_version("6.2.0", "redis://h")
    check_server_version("7.0.15", "redis://h")


def test_redact_url_hides_passwords_only():
    assert redact_url("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("unix:///tmp/r.sock?db=1&password=pw") == "unix:///tmp/r.sock?db=1&password=***"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"


@pytest.mark.parametrize(
    "kwargs, field",
    [({"prefix": "a b"}, "prefix"), ({"group": "{x}"}, "group"), ({"consumer": "has space"}, "consumer"),
     ({"block": 0}, "block"), ({"claim_idle": -1}, "claim_idle"), ({"maxlen": 0}, "maxlen")],
)
def test_bad_arguments_name_the_field(repo, clock, kwargs, field):
    with pytest.raises(ValidationError) as err:
        RedisStreamsDispatcher(repo, clock, REDIS_URL, **kwargs)
    assert err.value.field == field


def test_repr_names_the_url_without_password_the_prefix_and_the_group(repo, clock, prefix) -> None:
    url = REDIS_URL.replace("redis://", "redis://:s3cret-pw@", 1) if "@" not in REDIS_URL else REDIS_URL
    d = RedisStreamsDispatcher(repo, clock, url, prefix=prefix, group="billing")
    try:
        shown = repr(d)
    finally:
        d.close()
    assert f"prefix={prefix!r}" in shown and "group='billing'" in shown and "s3cret-pw" not in shown


def test_consumer_names_are_unique_per_start(repo, clock, make):
    a, b = make(), make()
    assert a.consumer != b.consumer
    assert a.consumer.rsplit("-", 2)[1] == b.consumer.rsplit("-", 2)[1]  # same pid, different suffix


def test_a_delayed_job_whose_enqueuer_kept_no_timer_is_published_when_due_by_the_sweeper(redis_client, repo, clock, make):
    d = make(sweep_interval=30.0)
    assert d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=0) == []  # group, first sweep
    # enqueued by another process that exited (or the CLI): nobody notified, nobody holds a timer
    job = repo.enqueue(prepare_job("t.job", {}, now=clock.now(), delay=10), now=clock.now()).job
    d.sweep(clock.now())  # the sweep sees it due within its interval: on this process's timer
    assert redis_client.xlen(d.keys.stream("default")) == 0  # not published early
    clock.advance(seconds=10)
    [got] = d.acquire(queues=["default"], worker_id="w", limit=1, lease_timeout=LEASE, max_wait=1.0)
    assert got.id == job.id  # published when due, 20 s before the next sweep could have


def test_a_sweep_whose_upcoming_jobs_fill_its_limit_still_publishes_the_jobs_due_now(
    redis_client, repo, clock, make, monkeypatch
):
    monkeypatch.setattr(sweeper_module, "SWEEP_LIMIT", 3)
    d = make(sweep_interval=30.0)
    stream = d.keys.stream("default")
    redis_client.xgroup_create(stream, d.group, id="0", mkstream=True)
    for _ in range(3):  # due before the next sweep and first in lease order: they fill the limit
        enqueue(repo, clock, priority=10, delay=10.0)
    due_now = enqueue(repo, clock)
    d.sweep(clock.now())
    assert [fields["id"] for _, fields in redis_client.xrange(stream)] == [str(due_now.id)]
