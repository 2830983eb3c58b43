"""PostgreSQL repository behaviour beyond the contract, on the real test server.

One schema per module and run (``tether_test_<RUN_ID>_sql``), dropped at the end; each test
starts from an empty table.  Covers C09 with the application's own ``orders`` table in its own
Connection/Session, C10 with real concurrent transactions, C19's plan check, concurrent batch
leases, connection loss, and bad URLs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, event, insert, select, text
from sqlalchemy.orm import Session
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository, open_repository
from tether.adapters.sqlalchemy import transactions as transactions_module
from tether.adapters.sqlalchemy.postgres import normalize_postgres_url
from tether.adapters.sqlalchemy.schema import LEASABLE_INDEX, LEASABLE_QUEUE_INDEX
from tether.domain.errors import ConfigurationError, LeaseLost, StorageUnavailable, TetherError
from tether.domain.job import Job, JobStatus
from tether.domain.validation import prepare_job

from tests.conftest import DATABASE_URL, RUN_ID
from tests.integration.sql_repository_checks import check_a_stale_token_next_to_the_current_one_is_lease_lost
from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository

pytestmark = pytest.mark.postgres
SCHEMA = schema_name("sql")


@pytest.fixture(scope="module")
def shared_repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(SCHEMA, pool_size=30) as repo:
        with repo.engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE TABLE IF NOT EXISTS "{SCHEMA}".orders (id serial PRIMARY KEY, item text)')
        yield repo


@pytest.fixture
def repo(shared_repo: PostgresJobRepository) -> PostgresJobRepository:
    return empty_tables(shared_repo, "orders")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def orders() -> Table:
    return Table("orders", MetaData(schema=SCHEMA), Column("id", Integer, primary_key=True), Column("item", String))


def _job(clock: FakeClock, payload: Any = None, **options: Any) -> Any:
    return prepare_job("orders.email", {"n": 1} if payload is None else payload, now=clock.now(), **options)


# -- C09: the caller's own transaction -------------------------------------------------------------
def test_c09_core_connection_commit_and_rollback(repo: PostgresJobRepository, clock: FakeClock, orders: Table) -> None:
    app_engine = create_engine(normalize_postgres_url(DATABASE_URL))
    notified: list[int] = []
    try:
        with pytest.raises(RuntimeError), app_engine.begin() as conn:
            conn.execute(insert(orders).values(item="book"))
            job = repo.enqueue(_job(clock), now=clock.now(), connection=conn).job
            repo.on_commit(conn, lambda: notified.append(job.id))
            # invisible to everyone else before commit
            assert repo.list_jobs() == []
            raise RuntimeError("the order failed")
        assert repo.list_jobs() == [] and notified == []
        with app_engine.begin() as conn:
            conn.execute(insert(orders).values(item="pen"))
            job = repo.enqueue(_job(clock), now=clock.now(), connection=conn).job
            repo.on_commit(conn, lambda: notified.append(job.id))
            assert notified == [] and repo.list_jobs() == []
        assert notified == [job.id]
        assert [j.id for j in repo.list_jobs()] == [job.id]
        with app_engine.connect() as conn:
            assert [r.item for r in conn.execute(select(orders))] == ["pen"]
    finally:
        app_engine.dispose()


def test_c09_orm_session_with_savepoints(repo: PostgresJobRepository, clock: FakeClock, orders: Table) -> None:
    app_engine = create_engine(normalize_postgres_url(DATABASE_URL))
    notified: list[str] = []
    try:
        with Session(app_engine) as session:
            session.execute(insert(orders).values(item="lamp"))
            kept = repo.enqueue(_job(clock), now=clock.now(), connection=session).job
            repo.on_commit(session, lambda: notified.append("kept"))
            try:
                with session.begin_nested():
                    repo.enqueue(_job(clock, {"n": 2}), now=clock.now(), connection=session)
                    repo.on_commit(session, lambda: notified.append("dropped"))
                    raise KeyError("undo")
            except KeyError:
                pass
            assert notified == []
            session.commit()
        assert notified == ["kept"]
        assert [j.id for j in repo.list_jobs()] == [kept.id]
        with Session(app_engine) as session:
            repo.enqueue(_job(clock, {"n": 3}), now=clock.now(), connection=session)
            repo.on_commit(session, lambda: notified.append("rolled back"))
        # closed without commit: rolled back
        assert notified == ["kept"] and len(repo.list_jobs()) == 1
    finally:
        app_engine.dispose()


def test_c13_a_failed_insert_in_the_callers_transaction_is_reported(repo: PostgresJobRepository, clock: FakeClock,
                                                                    orders: Table) -> None:
    app_engine = create_engine(normalize_postgres_url(DATABASE_URL))
    try:
        with app_engine.begin() as conn:
            conn.execute(insert(orders).values(item="desk"))
            with pytest.raises(TetherError):  # rejected before any SQL: the transaction stays usable
                repo.enqueue(_job(clock, {"blob": "€" * 22_000}), now=clock.now(), connection=conn)
            job = repo.enqueue(_job(clock), now=clock.now(), connection=conn).job
        assert [j.id for j in repo.list_jobs()] == [job.id]
    finally:
        app_engine.dispose()


# -- C10: one idempotency key, real concurrent transactions ---------------------------------------
def _contend(repo: PostgresJobRepository, clock: FakeClock, commit: bool) -> tuple[Any, Any]:
    holder_started = threading.Event()
    release = threading.Event()
    results: dict[str, Any] = {}

    def holder() -> None:
        try:
            with repo.transaction() as tx:
                results["t1"] = repo.enqueue(_job(clock, {"by": "t1"}, idempotency_key="k2"), now=clock.now(), connection=tx)
                holder_started.set()
                release.wait(10)
                if not commit:
                    raise KeyError("roll back")
        except KeyError:
            pass

    def contender() -> None:
        results["t2"] = repo.enqueue(_job(clock, {"by": "t2"}, idempotency_key="k2"), now=clock.now())

    t1 = threading.Thread(target=holder)
    t1.start()
    assert holder_started.wait(10)
    t2 = threading.Thread(target=contender)
    t2.start()
    time.sleep(0.3)
    assert t2.is_alive(), "T2 must wait for T1's open transaction, not guess"
    release.set()
    t1.join(10)
    t2.join(10)
    return results["t1"], results["t2"]


def test_c10a_rollback_lets_the_waiting_enqueue_create(repo: PostgresJobRepository, clock: FakeClock) -> None:
    t1, t2 = _contend(repo, clock, commit=False)
    assert t1.created and t2.created
    assert t2.job.payload == {"by": "t2"}
    assert [j.id for j in repo.list_jobs()] == [t2.job.id]


def test_c10b_commit_makes_the_waiting_enqueue_return_it(repo: PostgresJobRepository, clock: FakeClock) -> None:
    t1, t2 = _contend(repo, clock, commit=True)
    assert t1.created and not t2.created
    assert t2.job == t1.job and t2.job.payload == {"by": "t1"}
    assert len(repo.list_jobs()) == 1


def test_c10c_twenty_threads_one_key(repo: PostgresJobRepository, clock: FakeClock) -> None:
    barrier = threading.Barrier(20)

    def go(i: int) -> Any:
        barrier.wait(10)
        return repo.enqueue(_job(clock, {"i": i}, idempotency_key="k3"), now=clock.now())

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(go, range(20)))
    assert len({r.job.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert len(repo.list_jobs()) == 1


def test_enqueue_many_races_with_single_enqueues_on_shared_keys(repo: PostgresJobRepository, clock: FakeClock) -> None:
    keys = [f"key-{i}" for i in range(50)]

    def bulk() -> Any:
        return repo.enqueue_many([_job(clock, {"k": k}, idempotency_key=k) for k in keys], now=clock.now())

    def singles() -> Any:
        return [repo.enqueue(_job(clock, {"k": k}, idempotency_key=k), now=clock.now()) for k in reversed(keys)]

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(bulk), pool.submit(singles), pool.submit(bulk), pool.submit(singles)]
        outcomes = [f.result(30) for f in futures]
    ids_by_key: dict[str, set[int]] = {}
    for outcome in outcomes:
        for result in outcome:
            ids_by_key.setdefault(result.job.idempotency_key, set()).add(result.job.id)
    assert all(len(ids) == 1 for ids in ids_by_key.values()) and len(ids_by_key) == 50
    assert sum(r.created for outcome in outcomes for r in outcome) == 50
    assert len(repo.list_jobs(limit=1000)) == 50


# -- batch leases under concurrency ---------------------------------------------------------------
def test_concurrent_batch_leases_never_hand_out_a_job_twice(repo: PostgresJobRepository, clock: FakeClock) -> None:
    repo.enqueue_many([_job(clock, {"i": i}, priority=i % 3) for i in range(600)], now=clock.now())
    leased: list[Any] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        while True:
            jobs = repo.lease(queues=["default"], worker_id=f"w{n}", now=clock.now(), lease_timeout=60, limit=7)
            if not jobs:
                return
            with lock:
                leased.extend(jobs)
            for job in jobs:
                repo.complete(job.id, job.lease_token or "", now=clock.now())

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ids = [j.id for j in leased]
    assert len(ids) == 600 and len(set(ids)) == 600
    assert len({j.lease_token for j in leased}) == 600
    counts = repo.count_by_status()
    assert counts[JobStatus.COMPLETED] == 600 and counts[JobStatus.RUNNING] == 0


def test_a_batch_lease_comes_back_in_lease_order_with_distinct_tokens(repo: PostgresJobRepository, clock: FakeClock) -> None:
    t = clock.now()
    specs = [(0, -10), (10, -1), (10, -5), (10, -5), (10, 60), (5, -3)]
    ids = [repo.enqueue(_job(clock, {"i": i}, priority=p, run_at=t + timedelta(seconds=s)), now=t).job.id
           for i, (p, s) in enumerate(specs)]
    jobs = repo.lease(queues=None, worker_id="w", now=t, lease_timeout=60, limit=10)
    assert [j.id for j in jobs] == [ids[2], ids[3], ids[1], ids[5], ids[0]]
    assert len({j.lease_token for j in jobs}) == 5 and all(len(j.lease_token or "") == 32 for j in jobs)


# -- C19: the lease query's plan ------------------------------------------------------------------
@pytest.mark.slow
def test_c19_lease_plan_uses_the_partial_index_with_many_finished_rows(repo: PostgresJobRepository, clock: FakeClock,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    now = clock.now()
    with repo.engine.begin() as conn:
        conn.execute(
            text(
                f'INSERT INTO "{SCHEMA}".tether_jobs (job_type, queue, payload, priority, status, attempts, max_attempts, '
                "scheduled_at, created_at, finished_at) "
                "SELECT 'done', (ARRAY['a','b','c'])[1 + g % 3], '{}', 0, "
                "CASE WHEN g % 100 = 0 THEN 'dead' ELSE 'completed' END, 1, 3, :t, :t, :t "
                "FROM generate_series(1, 200000) AS g"
            ),
            {"t": now - timedelta(hours=1)},
        )
    repo.enqueue_many([_job(clock, {"i": i}, queue="abc"[i % 3]) for i in range(100)], now=now)
    with repo.engine.begin() as conn:
        conn.exec_driver_sql(f'ANALYZE "{SCHEMA}".tether_jobs')
    cases: list[tuple[Any, tuple[str, ...]]] = [
        (["a"], (LEASABLE_QUEUE_INDEX,)),
        (None, (LEASABLE_INDEX,)),
        (["a", "b"], (LEASABLE_QUEUE_INDEX, LEASABLE_INDEX)),
    ]
    captured: list[tuple[str, Any]] = []
    real = repo._driver_once

    def grab(doing: str, sql: str, params: Any) -> Any:
        if "SKIP LOCKED" in sql:
            captured.append((sql, params))
        return real(doing, sql, params)

    monkeypatch.setattr(repo, "_driver_once", grab)
    for queues, _ in cases:  # the statements exactly as the repository sends them
        assert len(repo.lease(queues=queues, worker_id="w", now=now, lease_timeout=60, limit=1)) == 1
    monkeypatch.undo()
    assert len(captured) == len(cases)
    for (statement, parameters), (queues, indexes) in zip(captured, cases):
        with repo.engine.connect() as conn:
            raw = conn.connection.driver_connection
            plan = "\n".join(r[0] for r in raw.execute("EXPLAIN " + statement, parameters))
            raw.rollback()
        assert any(index in plan for index in indexes), plan
        assert "Seq Scan on tether_jobs" not in plan, plan
    assert len(repo.lease(queues=["a"], worker_id="w", now=now, lease_timeout=60, limit=50)) == 34 - 2  # two of queue a went to the plan probes


# -- connection loss ------------------------------------------------------------------------------
KILL_APP_NAME = f"tether-kill-{RUN_ID}"


def _kill_backends(repo: PostgresJobRepository) -> int:
    """pg_terminate_backend every connection of ``repo`` (and only those: its own application_name)."""
    admin = create_engine(normalize_postgres_url(DATABASE_URL))
    with admin.connect() as conn:
        killed = conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = :name AND pid <> pg_backend_pid()"
            ),
            {"name": KILL_APP_NAME},
        ).scalar_one()
    admin.dispose()
    return int(killed)


def test_operations_survive_terminated_connections(shared_repo: PostgresJobRepository, clock: FakeClock) -> None:
    # a repository of its own, so other tests' pools are not disturbed
    repo = PostgresJobRepository.from_url(DATABASE_URL, schema=SCHEMA, pool_size=2, application_name=KILL_APP_NAME)
    try:
        empty_tables(repo)
        job = repo.enqueue(_job(clock, idempotency_key="survivor"), now=clock.now()).job
        assert _kill_backends(repo) >= 1
        with pytest.raises(LeaseLost):  # a fenced write after the kill still answers correctly
            repo.complete(job.id, "0" * 32, now=clock.now())
        leased = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
        assert [j.id for j in leased] == [job.id]
        assert _kill_backends(repo) >= 1
        done = repo.complete(job.id, leased[0].lease_token or "", now=clock.now())
        assert done.status is JobStatus.COMPLETED
        _kill_backends(repo)
        assert repo.get(job.id).status is JobStatus.COMPLETED
    finally:
        repo.close()


def test_an_unkeyed_enqueue_on_a_killed_connection_is_reported_unknown_then_the_pool_heals(
    shared_repo: PostgresJobRepository, clock: FakeClock
) -> None:
    """The fast enqueue path (driver-level INSERT): a connection the server terminated is found
    out by the statement itself (pooled less than PING_IF_IDLE ago, so no ping).  The outcome
    cannot be known, so StorageUnavailable says so; the dead connection is dropped from the pool
    and the next enqueue lands; nothing was stored twice."""
    repo = PostgresJobRepository.from_url(DATABASE_URL, schema=SCHEMA, pool_size=1, application_name=KILL_APP_NAME)
    try:
        empty_tables(repo)
        first = repo.enqueue(_job(clock, {"n": 1}), now=clock.now()).job
        assert _kill_backends(repo) == 1
        with pytest.raises(StorageUnavailable, match="may or may not have been stored"):
            repo.enqueue(_job(clock, {"n": 2}), now=clock.now())
        third = repo.enqueue(_job(clock, {"n": 3}), now=clock.now()).job
        assert [j.payload for j in repo.list_jobs()] == [{"n": 1}, {"n": 3}]
        assert repo.get(third.id) == third and repo.get(first.id) == first
    finally:
        repo.close()


def test_the_fast_enqueue_returns_exactly_the_stored_job(repo: PostgresJobRepository, clock: FakeClock) -> None:
    later = clock.now() + timedelta(seconds=90)
    payload = {"s": 'caf\u00e9 "quoted" back\\slash \u2603', "n": [1, 2.5, None]}
    new = _job(clock, payload, queue="q-1", priority=-3, max_attempts=7,
               run_at=later.astimezone(timezone(timedelta(hours=5))))
    result = repo.enqueue(new, now=clock.now())
    assert result.created and result.job == repo.get(result.job.id)
    assert result.job.scheduled_at == later and result.job.scheduled_at.utcoffset() == timedelta(0)
    assert result.job.payload == payload and (result.job.priority, result.job.max_attempts) == (-3, 7)


def test_an_interrupted_lease_commit_is_recovered_not_lost(repo: PostgresJobRepository, clock: FakeClock,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Fakes only what cannot be caused on demand: the reply to a committed lease is lost."""
    job = repo.enqueue(_job(clock), now=clock.now()).job
    real = repo._driver_once

    def commit_then_lose_reply(doing: str, sql: str, params: Any) -> Any:
        real(doing, sql, params)  # the lease really commits...
        raise transactions_module._UnknownOutcome(ConnectionError("server closed the connection"))  # ...reply lost

    monkeypatch.setattr(repo, "_driver_once", commit_then_lose_reply)
    leased = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    monkeypatch.undo()
    assert [j.id for j in leased] == [job.id]
    assert repo.get(job.id).lease_token == leased[0].lease_token and leased[0].attempts == 1
    assert repo.complete(job.id, leased[0].lease_token or "", now=clock.now()).status is JobStatus.COMPLETED


def test_a_lease_whose_commit_keeps_being_interrupted_raises_not_no_job(repo: PostgresJobRepository, clock: FakeClock,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Fakes only what cannot be caused on demand: every lease's connection dies before it lands."""
    job = repo.enqueue(_job(clock), now=clock.now()).job
    calls = {"n": 0}

    def lost_before_landing(doing: str, sql: str, params: Any) -> Any:
        calls["n"] += 1
        raise transactions_module._UnknownOutcome(ConnectionError("server closed the connection"))

    monkeypatch.setattr(repo, "_driver_once", lost_before_landing)
    monkeypatch.setattr(repo, "retry_base_delay", 0.001)
    with pytest.raises(StorageUnavailable, match="could not lease jobs"):
        repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    monkeypatch.undo()
    assert calls["n"] == repo.retry_attempts
    assert repo.get(job.id).status is JobStatus.QUEUED and repo.get(job.id).attempts == 0


def test_an_interrupted_fenced_write_is_verified_by_reading_the_row(repo: PostgresJobRepository, clock: FakeClock,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    a = repo.enqueue(_job(clock), now=clock.now()).job
    b = repo.enqueue(_job(clock), now=clock.now()).job
    leased = {j.id: j for j in repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=2)}
    real = repo._write_once
    mode = {"commit": True}

    def interrupted(doing: str, work: Any, **options: Any) -> Any:
        if mode["commit"]:
            real(doing, work, **options)
        mode["commit"] = True
        raise transactions_module._UnknownOutcome(ConnectionError("lost"))

    monkeypatch.setattr(repo, "_write_once", interrupted)
    # committed, reply lost: the row shows our completion -> success
    assert repo.complete(a.id, leased[a.id].lease_token or "", now=clock.now()).status is JobStatus.COMPLETED
    # not committed, reply lost: the row is still ours -> sent again, and it lands
    mode["commit"] = False
    calls = {"n": 0}

    def first_fails(doing: str, work: Any, **options: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise transactions_module._UnknownOutcome(ConnectionError("lost before commit"))
        return real(doing, work, **options)

    monkeypatch.setattr(repo, "_write_once", first_fails)
    failed = repo.fail(b.id, leased[b.id].lease_token or "", now=clock.now(), error="boom", retry_at=clock.now())
    assert failed.status is JobStatus.RETRYING and calls["n"] == 2
    monkeypatch.undo()
    with pytest.raises(LeaseLost):
        repo.complete(b.id, leased[b.id].lease_token or "", now=clock.now())


def test_an_interrupted_write_that_recorded_cancelled_counts_as_landed(repo: PostgresJobRepository, clock: FakeClock,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every holder write's read-back after an interrupted commit accepts ``cancelled`` (the
    write landed on a job whose cancellation was requested), and so does the cancel's own."""
    jobs = [repo.enqueue(_job(clock), now=clock.now()).job for _ in range(6)]
    leased = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=5)
    real = repo._write_once

    def committed_reply_lost(doing: str, work: Any, **options: Any) -> Any:
        real(doing, work, **options)
        raise transactions_module._UnknownOutcome(ConnectionError("lost"))

    monkeypatch.setattr(repo, "_write_once", committed_reply_lost)
    asked = repo.cancel(leased[0].id, now=clock.now())  # the cancel itself, interrupted after its commit
    assert asked.status is JobStatus.RUNNING and asked.cancel_requested_at == clock.now()
    gone = repo.cancel(jobs[5].id, now=clock.now())
    assert gone.status is JobStatus.CANCELLED
    monkeypatch.undo()
    for job in leased[1:]:
        repo.cancel(job.id, now=clock.now())
    monkeypatch.setattr(repo, "_write_once", committed_reply_lost)
    now = clock.advance(1)
    tokens = [j.lease_token or "" for j in leased]
    written = [
        repo.complete(leased[0].id, tokens[0], now=now),
        repo.fail(leased[1].id, tokens[1], now=now, error="boom", retry_at=now),
        repo.snooze(leased[2].id, tokens[2], now=now, until=now + timedelta(seconds=5)),
        repo.complete_many([(leased[3].id, tokens[3])], now=now)[0],
        repo.complete_and_lease([(leased[4].id, tokens[4])], now=now, queues=["nowhere"], worker_id="w",
                                lease_timeout=60, limit=1)[0][0],
    ]
    monkeypatch.undo()
    for result in written:
        assert isinstance(result, Job) and result.status is JobStatus.CANCELLED and result.finished_at == now, result


# -- bad input --------------------------------------------------------------------------------------
def test_bad_urls_name_the_url_without_its_password(shared_repo: PostgresJobRepository) -> None:
    base = normalize_postgres_url(DATABASE_URL)
    unreachable = base.set(port=1, password="s3cret-pw").render_as_string(hide_password=False)
    with pytest.raises(StorageUnavailable) as info:
        open_repository(unreachable)
    assert "s3cret-pw" not in str(info.value) and "***" in str(info.value)
    unknown_db = base.set(database=f"no_such_db_{RUN_ID}", password="s3cret-pw").render_as_string(hide_password=False)
    with pytest.raises(ConfigurationError) as info:
        open_repository(unknown_db)
    assert "does not exist" in str(info.value) and "s3cret-pw" not in str(info.value)
    unknown_role = base.set(username=f"nobody_{RUN_ID}", password="s3cret-pw").render_as_string(hide_password=False)
    with pytest.raises(ConfigurationError) as info:
        open_repository(unknown_role)
    assert "s3cret-pw" not in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        open_repository(DATABASE_URL, schema=schema_name("absent"), create=False)
    assert "tether db init" in str(info.value)
    with pytest.raises(ConfigurationError):
        open_repository(DATABASE_URL, schema="bad-name; DROP")


def test_the_driver_paths_report_an_unreachable_server_as_storage_unavailable(clock: FakeClock) -> None:
    """The enqueue and lease statements sent on the driver (pg_driver) fail like every other
    operation: StorageUnavailable naming the URL without its password, after the retries."""
    url = normalize_postgres_url(DATABASE_URL).set(port=1, password="s3cret-pw")
    repo = PostgresJobRepository.from_url(url, schema=SCHEMA)
    repo.retry_base_delay = 0.001
    try:
        for attempt in (
            lambda: repo.enqueue(_job(clock), now=clock.now()),
            lambda: repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60),
            lambda: repo.complete_and_lease([(1, "t" * 32)], now=clock.now(), queues=None, worker_id="w",
                                            lease_timeout=60, limit=2),
        ):
            with pytest.raises(StorageUnavailable) as info:
                attempt()
            assert "s3cret-pw" not in str(info.value) and "***" in str(info.value)
    finally:
        repo.close()


def test_a_schema_from_a_newer_tether_is_refused_and_left_alone(shared_repo: PostgresJobRepository) -> None:
    from tether.adapters.sqlalchemy import SCHEMA_VERSION

    schema = schema_name("newer")
    with temporary_repository(schema) as repo:
        assert repo.schema_version() == SCHEMA_VERSION
        with repo.engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE \"{schema}\".tether_alembic_version SET version_num = '{SCHEMA_VERSION + 5:04d}'")
        for create in (True, False):
            with pytest.raises(ConfigurationError) as info:
                open_repository(DATABASE_URL, schema=schema, create=create)
            assert "newer" in str(info.value) and repo.safe_url in str(info.value)
        assert repo.schema_version() == SCHEMA_VERSION + 5


def test_a_connection_killed_before_commit_is_retried_and_stores_once(repo: PostgresJobRepository, clock: FakeClock,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The server really terminates the backend mid-transaction (before COMMIT): the transaction
    rolled back, so the bulk enqueue is sent again on a fresh connection, and stored once."""
    real = repo._insert_many
    kills = {"n": 0}

    def killed_first(conn: Any, new_jobs: Any, now: Any) -> Any:
        if kills["n"] == 0:
            kills["n"] += 1
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            admin = create_engine(normalize_postgres_url(DATABASE_URL))
            with admin.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            admin.dispose()
        return real(conn, new_jobs, now)

    monkeypatch.setattr(repo, "_insert_many", killed_first)
    results = repo.enqueue_many([_job(clock, {"i": i}) for i in range(5)], now=clock.now())
    assert kills["n"] == 1
    assert [r.job.payload for r in results] == [{"i": i} for i in range(5)]
    assert [j.id for j in repo.list_jobs()] == [r.job.id for r in results]


def test_complete_many_is_one_fenced_statement_with_per_item_outcomes(repo: PostgresJobRepository, clock: FakeClock) -> None:
    jobs = [repo.enqueue(_job(clock, {"i": i}), now=clock.now()).job for i in range(4)]
    first = {j.id: j for j in repo.lease(queues=None, worker_id="a", now=clock.now(), lease_timeout=60, limit=4)}
    clock.advance(61)
    assert len(repo.reap(now=clock.now())) == 4
    second = {j.id: j for j in repo.lease(queues=None, worker_id="b", now=clock.now(), lease_timeout=60, limit=4)}
    items = [(jobs[0].id, second[jobs[0].id].lease_token or ""), (jobs[1].id, first[jobs[1].id].lease_token or ""),
             (jobs[2].id, second[jobs[2].id].lease_token or ""), (10_000, "f" * 32)]
    outcomes = repo.complete_many(items, now=clock.now())
    assert [type(o).__name__ for o in outcomes] == ["Job", "LeaseLost", "Job", "LeaseLost"]
    assert repo.get(jobs[1].id).status is JobStatus.RUNNING  # the stale token changed nothing
    assert repo.get(jobs[1].id).lease_token == second[jobs[1].id].lease_token
    assert [repo.get(j.id).status for j in jobs] == [JobStatus.COMPLETED, JobStatus.RUNNING, JobStatus.COMPLETED,
                                                      JobStatus.RUNNING]
    assert repo.get(jobs[0].id).finished_at == clock.now()


def test_complete_many_reports_a_stale_token_next_to_the_current_one_as_lease_lost(
    repo: PostgresJobRepository, clock: FakeClock
) -> None:
    check_a_stale_token_next_to_the_current_one_is_lease_lost(repo, clock, _job(clock))



# -- the reaper: one statement per pass ------------------------------------------------------------
def test_a_reap_pass_is_one_statement_whatever_the_number_of_expired_leases(
    repo: PostgresJobRepository, clock: FakeClock
) -> None:
    for i in range(30):
        repo.enqueue(_job(clock, {"i": i}), now=clock.now())
    repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=30)
    now = clock.advance(60)
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(repo.engine, "before_cursor_execute", record)
    try:
        reaped = repo.reap(now=now, limit=25)
    finally:
        event.remove(repo.engine, "before_cursor_execute", record)
    assert len(reaped) == 25
    assert len(statements) == 1 and statements[0].startswith("WITH expired AS"), statements
    assert len(repo.reap(now=now, limit=25)) == 5


def test_the_reaper_skips_a_lease_being_renewed_or_completed_and_does_not_wait(
    repo: PostgresJobRepository, clock: FakeClock
) -> None:
    # A heartbeat (job 1) and a completion (job 2) are in flight: written by another transaction,
    # not yet committed, when the reaper runs.  The reaper takes back only job 3 without waiting
    # for them; once they commit, job 1 runs on under its renewed lease and job 2 is completed.
    jobs = [repo.enqueue(_job(clock, {"i": i}), now=clock.now()).job for i in range(3)]
    leased = {j.id: j for j in repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=3)}
    now = clock.advance(60)
    table = f'"{SCHEMA}".tether_jobs'
    holder = create_engine(normalize_postgres_url(DATABASE_URL))
    outcome: list[Any] = []
    try:
        with holder.connect() as conn, conn.begin():
            conn.execute(text(f"UPDATE {table} SET lease_expires_at = :expires WHERE id = :id AND lease_token = :token"),
                         {"expires": now + timedelta(seconds=60), "id": jobs[0].id, "token": leased[jobs[0].id].lease_token})
            conn.execute(text(f"UPDATE {table} SET status = 'completed', finished_at = :now, lease_token = NULL, "
                              "leased_by = NULL, leased_at = NULL, lease_expires_at = NULL "
                              "WHERE id = :id AND lease_token = :token"),
                         {"now": now, "id": jobs[1].id, "token": leased[jobs[1].id].lease_token})
            reaper = threading.Thread(target=lambda: outcome.append(repo.reap(now=now)), daemon=True)
            reaper.start()
            reaper.join(60)
            assert not reaper.is_alive(), "the reaper waited for rows another transaction holds"
        assert [(j.id, j.status) for j in outcome[0]] == [(jobs[2].id, JobStatus.RETRYING)]
        renewed = repo.get(jobs[0].id)
        assert renewed.status is JobStatus.RUNNING and renewed.lease_token == leased[jobs[0].id].lease_token
        assert renewed.lease_expires_at == now + timedelta(seconds=60)
        assert repo.get(jobs[1].id).status is JobStatus.COMPLETED
        assert repo.reap(now=now) == []
    finally:
        holder.dispose()


def test_the_repositorys_sessions_run_in_utc_and_rows_come_back_in_utc(repo: PostgresJobRepository, clock: FakeClock) -> None:
    """Whatever the server's default time zone, Tether's own connections set theirs to UTC, so the
    driver hands ``timestamptz`` values back in ``datetime.timezone.utc`` (no conversion per
    column on the hot path); instants are unchanged."""
    with repo.engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW TIME ZONE").scalar() == "UTC"
        stored = conn.exec_driver_sql("SELECT TIMESTAMPTZ '2026-03-29 01:30:00+00'").scalar()
    assert stored.tzinfo is UTC and stored.hour == 1
    job = repo.enqueue(_job(clock), now=clock.now()).job
    (leased,) = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=30)
    assert leased.id == job.id and leased.leased_at == clock.now() and leased.leased_at.tzinfo is UTC


def test_a_completed_row_keeps_its_attempt_in_the_lease_columns_and_reads_it_as_history(
    repo: PostgresJobRepository, clock: FakeClock
) -> None:
    """The batch completion appends no JSON: the attempt's worker and start stay in leased_by and
    leased_at (token and expiry cleared), and every read folds them into the history."""
    job = repo.enqueue(_job(clock), now=clock.now()).job
    (leased,) = repo.lease(queues=None, worker_id="w-7", now=clock.advance(1), lease_timeout=30)
    started = clock.now()
    (done,), _ = repo.complete_and_lease([(job.id, leased.lease_token)], now=clock.advance(2), queues=None,
                                         worker_id="w-7", lease_timeout=30, limit=4)
    with repo.engine.connect() as conn:
        raw = conn.execute(select(repo.table).where(repo.table.c.id == job.id)).one()
    assert (raw.leased_by, raw.lease_token, raw.lease_expires_at, raw.history) == ("w-7", None, None, None)
    for read in (done, repo.get(job.id)):
        assert isinstance(read, Job) and read.leased_by is None and read.leased_at is None
        assert [(a.number, a.worker_id, a.started_at, a.ended_at, a.outcome.value) for a in read.history] == [
            (1, "w-7", started, clock.now(), "completed")
        ]
