"""PostgreSQL bulk enqueue, both statements (:mod:`tether.adapters.sqlalchemy.pg_bulk`): the
"alike" one (shared fields, no keys) and the general one (with and without ``ON CONFLICT``).
Every result must equal what ``get`` reads back, in input order, ids ascending; payloads come back
byte-identical; a failing batch writes nothing.  Own schema per run, dropped at the end."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import attrs
import pytest
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy import PostgresJobRepository, pg_bulk
from tether.domain.errors import TetherError
from tether.domain.job import EnqueueResult, NewJob
from tether.domain.validation import prepare_job

from tests.postgres_fixtures import empty_tables, schema_name, temporary_repository

pytestmark = pytest.mark.postgres
SCHEMA = schema_name("bulk")

PAYLOADS: list[Any] = [
    {"s": 'é\u2028"\\ 😀 \\u0000 \t\n\r', "k": {"ü": "x", "": []}},
    {"quote": "\"'", "backslashes": "\\\\\\", "ctl": "\x01\x1f\x7f", "bom": "\ufeff"},
    [1, -2**63, 2**70, 0.1, 1e-7, 1e16, -0.0, None, True, False],
    "just text with \\n an escaped newline",
    None,
    {"i": 0},
]


@pytest.fixture(scope="module")
def shared_repo() -> Iterator[PostgresJobRepository]:
    with temporary_repository(SCHEMA, pool_size=8) as repo:
        yield repo


@pytest.fixture
def repo(shared_repo: PostgresJobRepository) -> PostgresJobRepository:
    return empty_tables(shared_repo)


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many batches took each statement."""
    seen = {"alike": 0, "general": 0, "general keyed": 0}
    alike, general = pg_bulk.alike_params, pg_bulk.general_params

    def count_alike(*args: Any) -> Any:
        seen["alike"] += 1
        return alike(*args)

    def count_general(*args: Any) -> Any:
        params, keyed = general(*args)
        seen["general keyed" if keyed else "general"] += 1
        return params, keyed

    monkeypatch.setattr(pg_bulk, "alike_params", count_alike)
    monkeypatch.setattr(pg_bulk, "general_params", count_general)
    return seen


def _stored_as_returned(repo: PostgresJobRepository, results: list[EnqueueResult], jobs: list[NewJob]) -> None:
    """Each result is the stored row (all fields), its payload text byte-identical, ids ascending in input order."""
    for new_job, result in zip(jobs, results, strict=True):
        stored = repo.get(result.job.id)
        assert result.job == stored
        assert stored.payload_json == new_job.payload_json
        assert stored.payload_json.encode("utf-8") == new_job.payload_json.encode("utf-8")
    created = [r.job.id for r in results if r.created]
    assert created == sorted(created) and len(set(created)) == len(created)


def test_an_alike_batch_stores_every_payload_byte_identical(repo: PostgresJobRepository, paths: dict[str, int]) -> None:
    clock = FakeClock()
    run_at = clock.now() + timedelta(minutes=5, microseconds=7)
    jobs = [prepare_job("bulk.alike", p, now=clock.now(), queue="q1", priority=-7, max_attempts=11, run_at=run_at)
            for p in PAYLOADS]
    results = repo.enqueue_many(jobs, now=clock.now())
    assert paths == {"alike": 1, "general": 0, "general keyed": 0}
    assert all(r.created for r in results)
    _stored_as_returned(repo, results, jobs)
    assert [r.job.payload for r in results] == PAYLOADS
    assert {(j.scheduled_at, j.created_at) for j in repo.list_jobs()} == {(run_at, clock.now())}


def test_a_batch_that_differs_without_keys_takes_the_general_statement(repo: PostgresJobRepository,
                                                                        paths: dict[str, int]) -> None:
    clock = FakeClock()
    jobs = [prepare_job(f"bulk.t{i % 2}", p, now=clock.now(), queue=f"q{i % 3}", priority=i, delay=i)
            for i, p in enumerate(PAYLOADS)]
    results = repo.enqueue_many(jobs, now=clock.now())
    assert paths == {"alike": 0, "general": 1, "general keyed": 0}
    _stored_as_returned(repo, results, jobs)
    assert [r.job.payload for r in results] == PAYLOADS


def test_a_mixed_batch_of_keyed_and_unkeyed_jobs(repo: PostgresJobRepository, paths: dict[str, int]) -> None:
    clock = FakeClock()
    old = repo.enqueue(prepare_job("bulk.mixed", {"old": 1}, now=clock.now(), idempotency_key="old"), now=clock.now())
    keys = [None, "a", None, "a", "old", None, "b", "b", None]
    jobs = [prepare_job("bulk.mixed", {"n": n}, now=clock.now(), idempotency_key=k) for n, k in enumerate(keys)]
    results = repo.enqueue_many(jobs, now=clock.now())
    assert paths["general keyed"] >= 1 and paths["alike"] == 0
    assert [r.created for r in results] == [True, True, True, False, False, True, True, False, True]
    assert results[3].job == results[1].job and results[7].job == results[6].job and results[4].job == old.job
    for new_job, result in zip(jobs, results):
        assert result.job == repo.get(result.job.id)
        if result.created:
            assert result.job.payload_json == new_job.payload_json
    created = [r.job.id for r in results if r.created]
    assert created == sorted(created) and created[0] > old.job.id
    assert repo.count_by_status()[results[0].job.status] == 1 + len(created)


@pytest.mark.parametrize("keyed_every", [0, 7])
def test_a_large_batch_is_one_call_in_input_order(repo: PostgresJobRepository, paths: dict[str, int],
                                                  keyed_every: int) -> None:
    clock = FakeClock()
    count = 5_000
    jobs = [prepare_job("bulk.large", {"i": i, "pad": "ü" * (i % 13)}, now=clock.now(),
                        idempotency_key=f"k{i // 2}" if keyed_every and i % keyed_every == 0 else None)
            for i in range(count)]
    results = repo.enqueue_many(jobs, now=clock.now())
    assert paths["alike" if not keyed_every else "general keyed"] == 1
    assert [r.job.payload for r in results] == [j.payload for j in jobs]
    stored = {j.id: j for j in repo.list_jobs(limit=10_000)}
    assert len(stored) == count
    assert [r.job for r in results] == [stored[r.job.id] for r in results]
    ids = [r.job.id for r in results]
    assert ids == sorted(ids)


def test_alike_batches_from_concurrent_callers_each_map_their_own_ids(repo: PostgresJobRepository) -> None:
    """Several sessions draw from the sequence at once: each batch's ids interleave with the others'
    but still ascend in its own input order, so each result matches its own row."""
    clock = FakeClock()

    def producer(t: int) -> list[EnqueueResult]:
        out: list[EnqueueResult] = []
        for b in range(4):
            out += repo.enqueue_many([prepare_job("bulk.race", {"t": t, "b": b, "i": i}, now=clock.now())
                                      for i in range(400)], now=clock.now())
        return out

    with ThreadPoolExecutor(4) as pool:
        results = [r for rs in pool.map(producer, range(4)) for r in rs]
    stored = {j.id: j for j in repo.list_jobs(limit=10_000)}
    assert len(stored) == len(results) == 6_400
    assert all(stored[r.job.id] == r.job for r in results)


def test_an_alike_batch_joins_the_callers_transaction(repo: PostgresJobRepository, paths: dict[str, int]) -> None:
    clock = FakeClock()
    jobs = [prepare_job("bulk.tx", {"i": i}, now=clock.now()) for i in range(50)]
    with pytest.raises(RuntimeError), repo.transaction() as tx:
        assert len(repo.enqueue_many(jobs, now=clock.now(), connection=tx)) == 50
        raise RuntimeError("roll back")
    assert repo.list_jobs() == []
    with repo.engine.begin() as conn:
        results = repo.enqueue_many(jobs, now=clock.now(), connection=conn)
    assert paths["alike"] == 2
    _stored_as_returned(repo, results, jobs)


@pytest.mark.parametrize("alike", [True, False])
def test_a_batch_the_database_refuses_writes_nothing(repo: PostgresJobRepository, alike: bool) -> None:
    """A value the domain would have refused (a 65-character queue, given straight to the
    repository) fails the one statement: no row of the batch is stored."""
    clock = FakeClock()
    jobs = [prepare_job("bulk.bad", {"i": i}, now=clock.now(), queue="q" if alike else f"q{i}") for i in range(20)]
    if alike:
        jobs = [attrs.evolve(j, queue="q" * 65) for j in jobs]
    else:
        jobs[13] = attrs.evolve(jobs[13], queue="q" * 65)
    with pytest.raises(TetherError):
        repo.enqueue_many(jobs, now=clock.now())
    assert repo.list_jobs() == []
