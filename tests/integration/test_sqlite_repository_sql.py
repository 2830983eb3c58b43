"""SQLite repository behaviour beyond the contract: storage forms, locking, the caller's transaction.

Real SQLite files under ``tmp_path``; nothing is faked except where a test says so.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.orm import Session
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import SqliteJobRepository, open_repository
from tether.domain.errors import ConfigurationError, PayloadError, StorageUnavailable, ValidationError
from tether.domain.job import JobStatus
from tether.domain.timeutil import to_micros
from tether.domain.validation import prepare_job

from tests.integration.sql_repository_checks import check_a_stale_token_next_to_the_current_one_is_lease_lost


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def repo(db_path: Path) -> Iterator[SqliteJobRepository]:
    repository = open_repository(f"sqlite:///{db_path}")
    assert isinstance(repository, SqliteJobRepository)
    yield repository
    repository.close()


def _job(clock: FakeClock, payload: Any = None, **options: Any) -> Any:
    return prepare_job("orders.email", {"n": 1} if payload is None else payload, now=clock.now(), **options)


def test_times_are_integer_microseconds_and_payload_text_is_verbatim(repo: SqliteJobRepository, db_path: Path,
                                                                   clock: FakeClock) -> None:
    payload = {"name": "Zoë ✓ \"quoted\" \\ back", "n": [1, 2.5, None, True], "emoji": "𝄞"}
    run_at = clock.now() + timedelta(seconds=90, microseconds=7)
    job = repo.enqueue(_job(clock, payload, run_at=run_at), now=clock.now()).job
    raw = sqlite3.connect(db_path)
    try:
        row = raw.execute(
            "SELECT typeof(scheduled_at), scheduled_at, typeof(created_at), payload FROM tether_jobs WHERE id = ?", (job.id,)
        ).fetchone()
    finally:
        raw.close()
    assert row[0] == "integer" and row[2] == "integer"
    assert row[1] == to_micros(run_at)
    assert row[3] == job.payload_json
    assert repo.get(job.id).payload_json.encode("utf-8") == job.payload_json.encode("utf-8")
    assert repo.get(job.id).scheduled_at == run_at


def test_wal_mode_is_on(repo: SqliteJobRepository, db_path: Path) -> None:
    raw = sqlite3.connect(db_path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()


def _impatient_repo(db_path: Path, retry_attempts: int) -> SqliteJobRepository:
    """A repository on ``db_path`` (tables created) that waits 50 ms for a lock, ``retry_attempts`` times."""
    repo = SqliteJobRepository.from_url(f"sqlite:///{db_path}", busy_timeout=0.05)
    repo.retry_attempts = retry_attempts
    repo.create_schema()
    return repo


def _hold_write_lock(db_path: Path, check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection of its own holding ``db_path``'s write lock (BEGIN IMMEDIATE), as another process would."""
    blocker = sqlite3.connect(db_path, isolation_level=None, check_same_thread=check_same_thread)
    blocker.execute("BEGIN IMMEDIATE")
    return blocker


def test_a_held_write_lock_is_storage_unavailable_never_an_empty_queue(db_path: Path, clock: FakeClock) -> None:
    repo = _impatient_repo(db_path, retry_attempts=3)
    job = repo.enqueue(_job(clock), now=clock.now()).job
    blocker = _hold_write_lock(db_path)
    try:
        with pytest.raises(StorageUnavailable) as info:
            repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
        assert "locked" in str(info.value)
        assert repo.get(job.id).status is JobStatus.QUEUED  # reads still work under WAL
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    leased = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    assert [j.id for j in leased] == [job.id]
    repo.close()


def test_a_lock_released_during_the_retries_is_waited_out(db_path: Path, clock: FakeClock) -> None:
    repo = _impatient_repo(db_path, retry_attempts=40)
    job = repo.enqueue(_job(clock), now=clock.now()).job
    blocker = _hold_write_lock(db_path, check_same_thread=False)  # released by the timer's thread
    timer = threading.Timer(0.3, lambda: (blocker.execute("ROLLBACK"), blocker.close()))
    timer.start()
    try:
        leased = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    finally:
        timer.join()
    assert [j.id for j in leased] == [job.id]
    repo.close()


def test_memory_database_works_for_quick_use(clock: FakeClock) -> None:
    repo = open_repository("sqlite:///:memory:")
    first = repo.enqueue(_job(clock, idempotency_key="k"), now=clock.now())
    again = repo.enqueue(_job(clock, {"other": 1}, idempotency_key="k"), now=clock.now())
    assert first.created and not again.created and again.job == first.job
    leased = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60)
    assert repo.complete(leased[0].id, leased[0].lease_token or "", now=clock.now()).status is JobStatus.COMPLETED
    repo.close()


def _orders(metadata: MetaData) -> Table:
    return Table("orders", metadata, Column("id", Integer, primary_key=True), Column("item", String(50)))


def test_c09_enqueue_joins_the_callers_core_transaction(repo: SqliteJobRepository, db_path: Path, clock: FakeClock) -> None:
    app_engine = create_engine(f"sqlite:///{db_path}")  # the application's own engine on the same file
    orders = _orders(MetaData())
    orders.create(app_engine)
    notified: list[int] = []

    class Boom(Exception):
        pass

    with pytest.raises(Boom), app_engine.begin() as conn:
        conn.execute(insert(orders).values(item="book"))
        job = repo.enqueue(_job(clock), now=clock.now(), connection=conn).job
        repo.on_commit(conn, lambda: notified.append(job.id))
        raise Boom
    assert repo.list_jobs() == [] and notified == []
    with app_engine.connect() as conn:
        assert conn.execute(select(orders)).all() == []

    with app_engine.begin() as conn:
        conn.execute(insert(orders).values(item="pen"))
        job = repo.enqueue(_job(clock), now=clock.now(), connection=conn).job
        repo.on_commit(conn, lambda: notified.append(job.id))
        assert notified == []  # not before commit
    assert notified == [job.id]
    assert [j.id for j in repo.list_jobs()] == [job.id]
    app_engine.dispose()


def test_c09_enqueue_joins_an_orm_session_and_a_savepoint_rollback_drops_its_callback(
    repo: SqliteJobRepository, db_path: Path, clock: FakeClock
) -> None:
    app_engine = create_engine(f"sqlite:///{db_path}")
    orders = _orders(MetaData())
    orders.create(app_engine)
    notified: list[str] = []
    with Session(app_engine) as session:
        session.execute(insert(orders).values(item="lamp"))
        kept = repo.enqueue(_job(clock, {"k": "kept"}), now=clock.now(), connection=session).job
        repo.on_commit(session, lambda: notified.append("kept"))
        try:
            with session.begin_nested():
                repo.enqueue(_job(clock, {"k": "dropped"}), now=clock.now(), connection=session)
                repo.on_commit(session, lambda: notified.append("dropped"))
                raise KeyError("undo the savepoint")
        except KeyError:
            pass
        with session.begin_nested():
            repo.on_commit(session, lambda: notified.append("released"))
        assert notified == []
        session.commit()
    assert notified == ["kept", "released"]
    assert [j.id for j in repo.list_jobs()] == [kept.id]
    with Session(app_engine) as session:
        repo.enqueue(_job(clock), now=clock.now(), connection=session)
        repo.on_commit(session, lambda: notified.append("rolled back"))
        session.rollback()
        session.commit()  # a later commit must not run the rolled-back callback
    assert notified == ["kept", "released"]
    assert len(repo.list_jobs()) == 1
    app_engine.dispose()


def test_c13_rejected_enqueue_leaves_the_callers_transaction_usable(repo: SqliteJobRepository, db_path: Path,
                                                                    clock: FakeClock) -> None:
    app_engine = create_engine(f"sqlite:///{db_path}")
    orders = _orders(MetaData())
    orders.create(app_engine)
    with app_engine.begin() as conn:
        conn.execute(insert(orders).values(item="desk"))
        with pytest.raises(PayloadError):
            repo.enqueue(_job(clock, {"blob": "x" * 70_000}), now=clock.now(), connection=conn)
        with pytest.raises(PayloadError):
            repo.enqueue(_job(clock, {"euro": "€" * 22_000}), now=clock.now(), connection=conn)
        naive = datetime(2026, 1, 1)
        import attrs

        with pytest.raises(ValidationError):
            repo.enqueue(attrs.evolve(_job(clock), scheduled_at=naive), now=clock.now(), connection=conn)
        ok = repo.enqueue(_job(clock, {"x": "y" * 100}), now=clock.now(), connection=conn).job
    with app_engine.connect() as conn:
        assert [r.item for r in conn.execute(select(orders))] == ["desk"]
    assert [j.id for j in repo.list_jobs()] == [ok.id]
    app_engine.dispose()


def test_a_write_outside_the_threads_own_open_transaction_is_refused_at_once(repo: SqliteJobRepository,
                                                                              clock: FakeClock) -> None:
    """Inside ``transaction()``, a write on a second connection from the same thread would wait on
    its own lock (SQLite's busy timeout, every retry): it is refused at once, saying to pass the
    transaction; the transaction rolls back and nothing is stored.  Another thread still waits its
    turn and then writes."""
    job = prepare_job("t.job", {"n": 1}, now=clock.now())
    other: list[Any] = []
    with pytest.raises(StorageUnavailable, match="pass connection=tx"), repo.transaction() as tx:
        repo.enqueue(job, now=clock.now(), connection=tx)
        waiter = threading.Thread(target=lambda: other.append(repo.enqueue(job, now=clock.now()).job.id))
        waiter.start()
        repo.enqueue(job, now=clock.now())  # same thread, no connection=tx
    waiter.join(30)
    assert [j.id for j in repo.list_jobs()] == other and len(other) == 1  # only the other thread's job


def test_a_connection_on_another_database_is_refused(repo: SqliteJobRepository, tmp_path: Path, clock: FakeClock) -> None:
    other = create_engine(f"sqlite:///{tmp_path / 'other.db'}")
    with other.begin() as conn, pytest.raises(ValidationError) as info:
        repo.enqueue(_job(clock), now=clock.now(), connection=conn)
    assert info.value.field == "connection"
    with pytest.raises(ValidationError):
        repo.enqueue(_job(clock), now=clock.now(), connection=object())
    assert repo.list_jobs() == []
    other.dispose()


def test_bad_urls_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        open_repository(f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}")
    assert "directory" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        open_repository(f"sqlite:///{tmp_path / 'empty.db'}", create=False)
    assert "tether db init" in str(info.value)
    with pytest.raises(ConfigurationError):
        open_repository("mysql://root:pw@localhost/x")
    with pytest.raises(ConfigurationError):
        open_repository(f"sqlite:///{tmp_path / 'x.db'}", schema="nope")


def test_lease_order_c21_uses_stored_microseconds(repo: SqliteJobRepository, clock: FakeClock) -> None:
    t = clock.now()
    spec = [(0, -10), (10, -1), (10, -5), (10, -5), (10, 60)]
    ids = [
        repo.enqueue(_job(clock, {"i": i}, priority=p, run_at=t + timedelta(seconds=s)), now=t).job.id
        for i, (p, s) in enumerate(spec)
    ]
    # ids 1..5 in spec order; (10, t-5) appears as ids[2] and ids[3]: lower id first
    leased = repo.lease(queues=None, worker_id="w", now=t, lease_timeout=60, limit=10)
    assert [j.id for j in leased] == [ids[2], ids[3], ids[1], ids[0]]
    assert repo.lease(queues=None, worker_id="w", now=t + timedelta(seconds=59, microseconds=999_999),
                      lease_timeout=60) == []
    assert [j.id for j in repo.lease(queues=None, worker_id="w", now=t + timedelta(seconds=60), lease_timeout=60)] == [ids[4]]


def test_aware_times_in_any_zone_compare_as_instants(repo: SqliteJobRepository, clock: FakeClock) -> None:
    tokyo = timezone(timedelta(hours=9))
    job = repo.enqueue(_job(clock, run_at=(clock.now() + timedelta(seconds=1)).astimezone(tokyo)), now=clock.now()).job
    assert repo.lease(queues=None, worker_id="w", now=clock.now().astimezone(tokyo), lease_timeout=5) == []
    leased = repo.lease(queues=None, worker_id="w", now=(clock.now() + timedelta(seconds=1)).astimezone(tokyo), lease_timeout=5)
    assert [j.id for j in leased] == [job.id] and leased[0].leased_at.tzinfo == UTC


def test_complete_many_fences_each_item_and_reports_each_outcome(repo: SqliteJobRepository, clock: FakeClock) -> None:
    jobs = [repo.enqueue(_job(clock, {"i": i}), now=clock.now()).job for i in range(3)]
    leased = repo.lease(queues=None, worker_id="a", now=clock.now(), lease_timeout=60, limit=3)
    clock.advance(61)
    assert len(repo.reap(now=clock.now())) == 3
    # job 2 is taken over by worker b; jobs 0 and 1 are leased again by a (fresh tokens)
    again = {j.id: j for j in repo.lease(queues=None, worker_id="b", now=clock.now(), lease_timeout=60, limit=3)}
    stale = next(j for j in leased if j.id == jobs[2].id)
    items = [(jobs[0].id, again[jobs[0].id].lease_token or ""), (stale.id, stale.lease_token or ""),
             (jobs[1].id, again[jobs[1].id].lease_token or "")]
    outcomes = repo.complete_many(items, now=clock.now())
    assert [type(o).__name__ for o in outcomes] == ["Job", "LeaseLost", "Job"]
    assert outcomes[0].status is JobStatus.COMPLETED and outcomes[2].status is JobStatus.COMPLETED  # type: ignore[union-attr]
    held = repo.get(jobs[2].id)
    assert held.status is JobStatus.RUNNING and held.lease_token == again[jobs[2].id].lease_token and held.attempts == 2
    assert repo.complete_many([], now=clock.now()) == []


def test_schema_version_is_recorded_and_a_newer_schema_is_refused(tmp_path: Path) -> None:
    """(Upgrades from older schemas, and the bridge from before Alembic: tests/integration/test_migrations.py.)"""
    from tether.adapters.sqlalchemy import SCHEMA_VERSION
    from tether.adapters.sqlalchemy.migrations import HEAD_REVISION

    url = f"sqlite:///{tmp_path / 'versioned.db'}"
    repo = open_repository(url)
    assert repo.schema_version() == SCHEMA_VERSION
    repo.create_schema()  # idempotent
    assert repo.schema_version() == SCHEMA_VERSION
    repo.close()
    raw = sqlite3.connect(tmp_path / "versioned.db")
    assert raw.execute("SELECT version_num FROM tether_alembic_version").fetchall() == [(HEAD_REVISION,)]
    raw.execute("UPDATE tether_alembic_version SET version_num = ?", (f"{SCHEMA_VERSION + 1:04d}",))
    raw.commit()
    raw.close()
    for create in (True, False):
        with pytest.raises(ConfigurationError) as info:
            open_repository(url, create=create)
        assert "newer" in str(info.value) and "pip install -U tether-jobs" in str(info.value)
    raw = sqlite3.connect(tmp_path / "versioned.db")
    assert raw.execute("SELECT version_num FROM tether_alembic_version").fetchall() == [(f"{SCHEMA_VERSION + 1:04d}",)]
    raw.close()


def test_threads_of_one_process_queue_for_the_write_lock_and_never_hang(repo: SqliteJobRepository, clock: FakeClock,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.adapters.sqlalchemy import sqlite as sqlite_module

    monkeypatch.setattr(sqlite_module, "LOCAL_LOCK_WAIT", 0.2)
    job = repo.enqueue(_job(clock), now=clock.now()).job
    outcome: list[Any] = []
    with repo.transaction() as tx:  # this thread holds the write lock
        repo.enqueue(_job(clock), now=clock.now(), connection=tx)
        other = threading.Thread(
            target=lambda: outcome.append(_try(lambda: repo.lease(queues=None, worker_id="w", now=clock.now(),
                                                                   lease_timeout=60)))
        )
        other.start()
        other.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], StorageUnavailable)
    assert "another thread" in str(outcome[0])
    leased = repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=5)  # free again
    assert [j.id for j in leased] == [job.id, job.id + 1]


def _try(call: Any) -> Any:
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - the test inspects it
        return error


def test_complete_many_reports_a_stale_token_next_to_the_current_one_as_lease_lost(
    repo: SqliteJobRepository, clock: FakeClock
) -> None:
    check_a_stale_token_next_to_the_current_one_is_lease_lost(repo, clock, _job(clock))



def test_reaper_write_is_a_compare_and_set_on_the_lease_it_read(
    repo: SqliteJobRepository, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reaper reads expired leases, then a heartbeat (job 1) and a completion (job 2) land
    # before its write: the write must leave both alone and take back only job 3.
    jobs = [repo.enqueue(_job(clock, {"i": i}), now=clock.now()).job for i in range(3)]
    leased = {j.id: j for j in repo.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60, limit=3)}
    now = clock.advance(60)
    with repo.engine.connect() as conn:
        read_before = repo._expired_rows(conn, now, 100)
    assert [row.id for row in read_before] == [j.id for j in jobs]
    beating = repo.heartbeat(jobs[0].id, leased[jobs[0].id].lease_token or "", now=now, lease_timeout=60)
    done = repo.complete(jobs[1].id, leased[jobs[1].id].lease_token or "", now=now)
    monkeypatch.setattr(repo, "_expired_rows", lambda conn, now, limit: read_before)
    reaped = repo.reap(now=now)
    assert [(j.id, j.status) for j in reaped] == [(jobs[2].id, JobStatus.RETRYING)]
    assert repo.get(jobs[0].id) == beating and beating.status is JobStatus.RUNNING
    assert repo.get(jobs[1].id) == done
