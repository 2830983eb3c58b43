"""Contract part: enqueue, payloads, idempotency keys and transactions (C09-C13)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import attrs
import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import JobNotFound, PayloadError
from tether.domain.job import EnqueueResult, Job, JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport, Rollback

LIMIT = 65_536


def _sized_payload(size: int) -> dict[str, str]:
    """A payload whose canonical JSON is exactly ``size`` bytes (``{"s":"xxx..."}``)."""
    return {"s": "x" * (size - len('{"s":""}'))}


class EnqueueContract(ContractSupport):
    """Storing new jobs: what is stored, keys, payload rules, and the caller's transaction."""

    def test_enqueue_stores_a_queued_job(self, repository: JobRepository, clock: FakeClock) -> None:
        clock.advance(0.000123)  # times keep their microseconds
        new = self.new_job(clock, {"to": "a@b.c"}, job_type="emails.send", queue="mail", priority=-7,
                           max_attempts=4, delay=1.5, idempotency_key="mail-1")
        result = repository.enqueue(new, now=clock.now())
        assert isinstance(result, EnqueueResult) and result.created
        job = result.job
        assert isinstance(job.id, int) and job.id > 0
        assert (job.job_type, job.queue, job.priority, job.max_attempts) == ("emails.send", "mail", -7, 4)
        assert job.status is JobStatus.QUEUED and job.attempts == 0
        assert job.created_at == clock.now()
        assert job.scheduled_at == clock.now() + timedelta(seconds=1.5)
        assert job.idempotency_key == "mail-1"
        assert job.payload == {"to": "a@b.c"} and job.payload_json == new.payload_json
        assert (job.lease_token, job.leased_by, job.leased_at, job.lease_expires_at) == (None, None, None, None)
        assert (job.last_error, job.finished_at) == (None, None)
        assert repository.get(job.id) == job

    def test_headers_are_stored_with_the_job_and_come_back_with_its_lease(
        self, repository: JobRepository, clock: FakeClock
    ) -> None:
        headers = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v"}'
        plain = repository.enqueue(self.new_job(clock, {"n": 0}), now=clock.now()).job
        traced = repository.enqueue(attrs.evolve(self.new_job(clock, {"n": 1}), headers_json=headers), now=clock.now()).job
        batch = repository.enqueue_many(
            [attrs.evolve(self.new_job(clock, {"n": 2}), headers_json=headers), self.new_job(clock, {"n": 3})],
            now=clock.now(),
        )
        assert plain.headers_json is None and repository.get(plain.id).headers == {}
        assert traced.headers_json == headers and repository.get(traced.id) == traced
        assert [r.job.headers_json for r in batch] == [headers, None]
        assert [repository.get(r.job.id).headers_json for r in batch] == [headers, None]
        leased = {job.id: job for job in repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=30, limit=10)}
        assert leased[traced.id].headers["tracestate"] == "k=v"
        assert leased[plain.id].headers_json is None

    def test_ids_grow_in_enqueue_order(self, repository: JobRepository, clock: FakeClock) -> None:
        ids = [self.add(repository, clock).id for _ in range(5)]
        assert ids == sorted(ids) and len(set(ids)) == 5

    def test_stored_times_are_aware_utc(self, repository: JobRepository, clock: FakeClock) -> None:
        plus_two = timezone(timedelta(hours=2))
        run_at = (clock.now() + timedelta(seconds=5)).astimezone(plus_two)
        job = self.add(repository, clock, run_at=run_at)
        clock.advance(5)
        leased = self.lease_one(repository, clock)
        done = repository.complete(job.id, self.token_of(leased), now=clock.now())
        for stored in (leased, done, repository.get(job.id)):
            for name in ("scheduled_at", "created_at", "leased_at", "lease_expires_at", "finished_at"):
                value = getattr(stored, name)
                if value is not None:
                    assert isinstance(value, datetime) and value.utcoffset() == timedelta(0), f"{name}={value!r}"
        assert repository.get(job.id).scheduled_at == run_at

    @pytest.mark.parametrize(
        "payload",
        [
            {"unicode": "€ ünïcode 日本 🚀", "escaped": "a\\u0000b", "quote": "\"'\\"},
            {"nested": {"list": [1, 2.5, -0.0, 1e100, 2**70, True, None], "z": {}, "a": []}},
            [1, "two", {"3": 3}],
            "just a string",
            None,
        ],
        ids=["text", "numbers", "list", "string", "null"],
    )
    def test_payload_round_trips_byte_identical(self, repository: JobRepository, clock: FakeClock, payload: Any) -> None:
        new = self.new_job(clock, payload)
        job = repository.enqueue(new, now=clock.now()).job
        stored = repository.get(job.id)
        assert stored.payload_json == new.payload_json
        assert stored.payload == payload
        leased = self.lease_one(repository, clock)
        assert leased.payload_json == new.payload_json

    # -- idempotency keys --------------------------------------------------------------------
    def test_existing_idempotency_key_returns_the_job_unchanged(self, repository: JobRepository, clock: FakeClock) -> None:
        first = self.add(repository, clock, {"v": 1}, idempotency_key="k1")
        clock.advance(5)
        again = repository.enqueue(self.new_job(clock, {"v": 2}, idempotency_key="k1", priority=9), now=clock.now())
        assert not again.created and again.job == first
        leased = self.lease_one(repository, clock)
        done = repository.complete(first.id, self.token_of(leased), now=clock.now())
        third = repository.enqueue(self.new_job(clock, {"v": 3}, idempotency_key="k1"), now=clock.now())
        assert not third.created and third.job == done  # unique until purged, even when finished
        assert self.total(repository) == 1
        other = repository.enqueue(self.new_job(clock, {"v": 4}, idempotency_key="k2"), now=clock.now())
        assert other.created and other.job.id != first.id

    def test_enqueue_many_keeps_order_and_dedups_keys(self, repository: JobRepository, clock: FakeClock) -> None:
        stored = self.add(repository, clock, {"n": 0}, idempotency_key="old")
        batch = [
            self.new_job(clock, {"n": 1}, idempotency_key="a"),
            self.new_job(clock, {"n": 2}),
            self.new_job(clock, {"n": 3}, idempotency_key="a"),
            self.new_job(clock, {"n": 4}, idempotency_key="old"),
            self.new_job(clock, {"n": 5}, queue="other"),
        ]
        results = repository.enqueue_many(batch, now=clock.now())
        assert [r.created for r in results] == [True, True, False, False, True]
        assert [r.job.payload for r in results] == [{"n": 1}, {"n": 2}, {"n": 1}, {"n": 0}, {"n": 5}]
        assert results[2].job.id == results[0].job.id and results[3].job == stored
        new_ids = [results[i].job.id for i in (0, 1, 4)]
        assert new_ids == sorted(new_ids) and new_ids[0] > stored.id
        assert [j.id for j in repository.list_jobs()] == [stored.id, *new_ids]
        assert repository.enqueue_many([], now=clock.now()) == []

    def test_enqueue_many_is_all_or_none_in_a_transaction(self, repository: JobRepository, clock: FakeClock) -> None:
        with pytest.raises(Rollback), repository.transaction() as tx:
            results = repository.enqueue_many([self.new_job(clock, {"n": i}) for i in range(3)],
                                              now=clock.now(), connection=tx)
            assert len(results) == 3
            raise Rollback
        assert self.total(repository) == 0
        with repository.transaction() as tx:
            repository.enqueue_many([self.new_job(clock, {"n": i}) for i in range(3)], now=clock.now(), connection=tx)
        assert [j.payload for j in repository.list_jobs()] == [{"n": 0}, {"n": 1}, {"n": 2}]

    # -- C09: the caller's transaction -------------------------------------------------------
    def test_c09a_rollback_leaves_no_job_and_no_callback(self, repository: JobRepository, clock: FakeClock) -> None:
        calls: list[str] = []
        with pytest.raises(Rollback), repository.transaction() as tx:
            job = repository.enqueue(self.new_job(clock, {"order": 7}), now=clock.now(), connection=tx).job
            repository.on_commit(tx, lambda: calls.append("notified"))
            raise Rollback
        assert calls == []
        assert self.total(repository) == 0 and repository.list_jobs() == []
        with pytest.raises(JobNotFound):
            repository.get(job.id)
        assert repository.lease(queues=None, worker_id="w", now=clock.now(), lease_timeout=60) == []

    def test_c09a_commit_runs_the_callback_once_after_the_job_is_visible(self, repository: JobRepository,
                                                                          clock: FakeClock) -> None:
        seen: list[Job] = []
        with repository.transaction() as tx:
            job = repository.enqueue(self.new_job(clock, {"order": 8}), now=clock.now(), connection=tx).job
            repository.on_commit(tx, lambda: seen.append(repository.get(job.id)))
            with pytest.raises(JobNotFound):
                repository.get(job.id)  # not visible outside the transaction before commit
            assert seen == []
        assert len(seen) == 1 and seen[0].id == job.id and seen[0].status is JobStatus.QUEUED
        assert repository.get(job.id).payload == {"order": 8}

    def test_on_commit_without_a_transaction_runs_at_once(self, repository: JobRepository, clock: FakeClock) -> None:
        calls: list[int] = []
        repository.on_commit(None, lambda: calls.append(1))
        assert calls == [1]

    # -- C10: one idempotency key, concurrent enqueues ---------------------------------------
    def _contend(self, repository: JobRepository, clock: FakeClock, key: str, *, commit: bool) -> tuple[Job, EnqueueResult]:
        """T1 enqueues ``key`` in an open transaction; T2 enqueues it meanwhile; T1 then commits or rolls back."""
        in_tx = threading.Event()
        t1_job: list[Job] = []
        t2_result: list[EnqueueResult] = []
        errors: list[BaseException] = []

        def first() -> None:
            try:
                with repository.transaction() as tx:
                    t1_job.append(repository.enqueue(self.new_job(clock, {"t": 1}, idempotency_key=key),
                                                      now=clock.now(), connection=tx).job)
                    in_tx.set()
                    time.sleep(self.contention_pause)  # T2 contends with the open transaction meanwhile
                    if not commit:
                        raise Rollback
            except Rollback:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                in_tx.set()

        def second() -> None:
            try:
                assert in_tx.wait(self.thread_join_timeout)
                t2_result.append(repository.enqueue(self.new_job(clock, {"t": 2}, idempotency_key=key), now=clock.now()))
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        self.run_threads([first, second])
        assert not errors, errors
        return t1_job[0], t2_result[0]

    def test_c10a_rolled_back_key_holder_lets_the_other_create(self, repository: JobRepository, clock: FakeClock) -> None:
        _, t2 = self._contend(repository, clock, "k2", commit=False)
        assert t2.created
        assert t2.job.payload == {"t": 2}
        assert repository.get(t2.job.id) == t2.job
        assert [(j.id, j.idempotency_key) for j in repository.list_jobs()] == [(t2.job.id, "k2")]

    def test_c10b_committed_key_holder_wins(self, repository: JobRepository, clock: FakeClock) -> None:
        t1_job, t2 = self._contend(repository, clock, "k2", commit=True)
        assert not t2.created
        assert t2.job.id == t1_job.id and t2.job.payload == {"t": 1}
        assert t2.job == repository.get(t1_job.id)
        assert self.total(repository) == 1

    def test_c10c_many_threads_one_key_one_row(self, repository: JobRepository, clock: FakeClock) -> None:
        n = self.concurrent_enqueuers
        start = threading.Barrier(n)
        results: list[EnqueueResult] = []
        errors: list[BaseException] = []

        def enqueuer(i: int) -> None:
            try:
                new = self.new_job(clock, {"caller": i}, idempotency_key="k3")
                start.wait()
                if i % 2:
                    with repository.transaction() as tx:
                        results.append(repository.enqueue(new, now=clock.now(), connection=tx))
                else:
                    results.append(repository.enqueue(new, now=clock.now()))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        self.run_threads([lambda i=i: enqueuer(i) for i in range(n)])  # type: ignore[misc]
        assert not errors, errors
        assert len(results) == n
        assert len({r.job.id for r in results}) == 1
        assert sum(r.created for r in results) == 1
        assert self.total(repository) == 1
        (stored,) = repository.list_jobs()
        assert stored.id == results[0].job.id and stored.idempotency_key == "k3"

    # -- C11-C13: payloads -------------------------------------------------------------------
    def test_c11a_nul_in_payload_is_rejected_before_any_write(self, repository: JobRepository, clock: FakeClock) -> None:
        for payload in ({"name": "a\u0000b"}, {"a\u0000b": 1}):
            with pytest.raises(PayloadError) as info:
                self.new_job(clock, payload)
            assert info.value.field.startswith("payload")
        assert self.total(repository) == 0

    @pytest.mark.parametrize(
        "value",
        [float("nan"), float("inf"), datetime(2026, 1, 1, tzinfo=UTC), Decimal("1.5"), b"bytes", {1, 2}],
        ids=["nan", "inf", "datetime", "decimal", "bytes", "set"],
    )
    def test_c12_values_json_cannot_carry_are_rejected(self, repository: JobRepository, clock: FakeClock, value: Any) -> None:
        with pytest.raises(PayloadError) as info:
            self.new_job(clock, {"x": value})
        assert info.value.field == "payload.x"
        assert self.total(repository) == 0

    def test_c12_caller_mutations_do_not_leak_in(self, repository: JobRepository, clock: FakeClock) -> None:
        p: dict[str, Any] = {"a": [1]}
        job = repository.enqueue(self.new_job(clock, p), now=clock.now()).job
        p["a"].append(2)
        p["b"] = 3
        assert repository.get(job.id).payload == {"a": [1]}
        fetched = repository.get(job.id).payload
        fetched["a"].append(99)
        assert repository.get(job.id).payload == {"a": [1]}
        assert job.payload == {"a": [1]}

    def test_c13_size_limit_counts_utf8_bytes(self, repository: JobRepository, clock: FakeClock) -> None:
        exact = _sized_payload(LIMIT)
        job = repository.enqueue(self.new_job(clock, exact, max_payload_bytes=LIMIT), now=clock.now()).job
        assert len(repository.get(job.id).payload_json.encode("utf-8")) == 65_536
        with pytest.raises(PayloadError):
            self.new_job(clock, _sized_payload(LIMIT + 1), max_payload_bytes=LIMIT)
        euros = {"s": "€" * 22_000}
        assert len(str(euros)) < LIMIT  # fewer characters than the limit ...
        with pytest.raises(PayloadError):
            self.new_job(clock, euros, max_payload_bytes=LIMIT)  # ... but 66,008 bytes
        assert self.total(repository) == 1

    def test_c13_rejected_enqueue_leaves_the_transaction_usable(self, repository: JobRepository, clock: FakeClock) -> None:
        with repository.transaction() as tx:
            before = repository.enqueue(self.new_job(clock, {"n": "before"}), now=clock.now(), connection=tx).job
            with pytest.raises(PayloadError):
                repository.enqueue(self.new_job(clock, _sized_payload(LIMIT + 1)), now=clock.now(), connection=tx)
            after = repository.enqueue(self.new_job(clock, {"n": "after"}), now=clock.now(), connection=tx).job
        assert [j.id for j in repository.list_jobs()] == [before.id, after.id]
        assert [j.payload for j in repository.list_jobs()] == [{"n": "before"}, {"n": "after"}]
