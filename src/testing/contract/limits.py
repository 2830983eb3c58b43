"""Contract part: the accepted ranges of :mod:`tether.domain.limits`, and text that is not UTF-8.

A repository must store and read back exactly the ends of every range: priorities of 32 bits,
10,000 attempts, a due time 100 years ahead or behind, a lease of 100 years, a 4,300-digit payload
integer, text outside the Basic Multilingual Plane.  It must refuse, before writing, a
``lease_timeout`` outside (0, 100 years] and a worker id that is not 1-200 printable characters
(a lone surrogate is not printable), as ``ValidationError`` naming the argument.  Values past the
ranges, and text with a lone surrogate (``"\\ud800"``, or what ``surrogateescape`` makes of
undecodable bytes: it has no UTF-8 encoding), never reach a repository through enqueue:
:func:`~tether.domain.validation.prepare_job` refuses them naming the field, so nothing is stored
and the repository's transaction goes on.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.limits import MAX_SECONDS
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport

#: 100 years of 365.25 days: the longest delay, lease or distance of a due time from now.
CENTURY = timedelta(days=36_525)
MINUS_5 = timezone(timedelta(hours=-5))

#: (prepare_job keyword arguments, the field the error names)
NOT_UTF8: list[tuple[dict[str, Any], str]] = [
    ({"payload": {"s": "\ud800"}}, "payload.s"),
    ({"payload": {"a": [1, {"b": "ok \udcff"}]}}, "payload.a[1].b"),
    ({"payload": {"a": {"\udcff": 1}}}, "payload.a"),
    ({"idempotency_key": "order-\ud800"}, "idempotency_key"),
    ({"job_type": "emails\udcff"}, "job_type"),
    ({"queue": "mail\ud800"}, "queue"),
]
OUT_OF_RANGE: list[tuple[dict[str, Any], str]] = [
    ({"delay": 1e15}, "delay"),
    ({"delay": timedelta.max}, "delay"),
    ({"delay": MAX_SECONDS + 1}, "delay"),
    ({"run_at": datetime(9999, 12, 31, 23, 0, tzinfo=MINUS_5)}, "run_at"),
    ({"run_at": "after"}, "run_at"),  # filled in with clock.now() + 100 years + 1 µs
    ({"payload": {"n": 10**4300}}, "payload.n"),
    ({"priority": 2**31}, "priority"),
    ({"priority": -(2**31) - 1}, "priority"),
    ({"max_attempts": 10_001}, "max_attempts"),
]
BAD_LEASE_TIMEOUTS = [0, -1.0, float("nan"), float("inf"), MAX_SECONDS + 1, 1e15, timedelta.max]
BAD_WORKER_IDS = ["", "w" * 201, "tab\there", "w-\ud800"]


class LimitContract(ContractSupport):
    """The ends of the accepted ranges are kept exactly; values past them are refused unwritten."""

    def _refused(self, clock: FakeClock, options: dict[str, Any], field: str) -> None:
        if options.get("run_at") == "after":
            options = {"run_at": clock.now() + CENTURY + timedelta(microseconds=1)}
        payload = options.pop("payload", {"to": "a@b.c"})
        with pytest.raises(ValidationError) as info:
            self.new_job(clock, payload, **options)
        assert info.value.field == field
        str(info.value).encode("utf-8")  # the message itself prints anywhere

    @pytest.mark.parametrize(("options", "field"), NOT_UTF8, ids=[f for _, f in NOT_UTF8])
    def test_text_that_is_not_utf8_is_refused_before_any_write(self, repository: JobRepository, clock: FakeClock,
                                                               options: dict[str, Any], field: str) -> None:
        self._refused(clock, dict(options), field)
        assert self.total(repository) == 0

    @pytest.mark.parametrize(("options", "field"), OUT_OF_RANGE,
                             ids=["delay-1e15", "delay-timedelta.max", "delay-100y+1s", "run_at-9999-at-utc-5",
                                  "run_at-100y+1us", "payload-4301-digits", "priority-2**31", "priority-below",
                                  "max_attempts-10001"])
    def test_numbers_and_times_out_of_range_are_refused_before_any_write(
        self, repository: JobRepository, clock: FakeClock, options: dict[str, Any], field: str
    ) -> None:
        self._refused(clock, dict(options), field)
        assert self.total(repository) == 0

    @pytest.mark.parametrize(("change", "field"), [({"priority": 2**40}, "priority"), ({"priority": 2**70}, "priority"),
                                                   ({"max_attempts": 0}, "max_attempts"),
                                                   ({"max_attempts": 2**40}, "max_attempts")])
    def test_a_request_built_past_the_columns_never_reaches_the_store(self, repository: JobRepository, clock: FakeClock,
                                                                      change: dict[str, int], field: str) -> None:
        """A NewJob evolved (or built by hand) past the INTEGER columns is refused as it is made."""
        with pytest.raises(ValidationError) as info:
            repository.enqueue(attrs.evolve(self.new_job(clock), **change), now=clock.now())
        assert info.value.field == field
        assert self.total(repository) == 0

    def test_a_refusal_leaves_the_transaction_usable(self, repository: JobRepository, clock: FakeClock) -> None:
        with repository.transaction() as tx:
            before = repository.enqueue(self.new_job(clock, {"n": "before"}), now=clock.now(), connection=tx).job
            for options, field in NOT_UTF8 + OUT_OF_RANGE:
                self._refused(clock, dict(options), field)
            after = repository.enqueue_many([self.new_job(clock, {"n": "after"})], now=clock.now(), connection=tx)
        assert [(j.id, j.payload) for j in repository.list_jobs()] == [(before.id, {"n": "before"}),
                                                                        (after[0].job.id, {"n": "after"})]

    def test_text_outside_the_basic_plane_is_stored_and_read_back_exactly(self, repository: JobRepository,
                                                                          clock: FakeClock) -> None:
        text = {"clef": "\U0001d11e", "mixed": "Zoë € 日本 🚀", "\U0001f680": ["\U0010fffd"]}
        new = self.new_job(clock, text, idempotency_key="k-\U0001d11e")
        job = repository.enqueue(new, now=clock.now()).job
        assert repository.get(job.id) == job
        assert (job.payload, job.payload_json, job.idempotency_key) == (text, new.payload_json, "k-\U0001d11e")
        assert self.lease_one(repository, clock).payload_json == new.payload_json

    def test_the_ends_of_the_ranges_are_stored_and_read_back_exactly(self, repository: JobRepository,
                                                                     clock: FakeClock) -> None:
        now = clock.now()
        longest = 10**4300 - 1  # 4,300 digits
        text = {"clef": "\U0001d11e", "mixed": "Zoë € 日本 🚀", "n": [longest, -longest]}
        new_jobs = [
            self.new_job(clock, text, priority=2**31 - 1, max_attempts=10_000),
            self.new_job(clock, {}, priority=-(2**31), idempotency_key="k-\U0001d11e"),
            self.new_job(clock, {}, delay=MAX_SECONDS),
            self.new_job(clock, {}, run_at=(now + CENTURY).astimezone(MINUS_5)),
            self.new_job(clock, {}, run_at=now - CENTURY),
        ]
        jobs = [repository.enqueue(new, now=now).job for new in new_jobs]
        assert [repository.get(job.id) for job in jobs] == jobs
        high, low, delayed, ahead, ago = jobs
        assert (high.priority, high.max_attempts, high.payload, high.payload_json) == (
            2_147_483_647, 10_000, text, new_jobs[0].payload_json
        )
        assert (low.priority, low.idempotency_key) == (-2_147_483_648, "k-\U0001d11e")
        assert delayed.scheduled_at == ahead.scheduled_at == now + CENTURY
        assert ahead.scheduled_at.utcoffset() == timedelta(0)
        assert ago.scheduled_at == now - CENTURY
        leased = repository.lease(queues=None, worker_id="w-1", now=now, lease_timeout=60, limit=10)
        assert [j.id for j in leased] == [high.id, ago.id, low.id]  # priority DESC; the far future not yet
        later = now + CENTURY
        assert [j.id for j in repository.lease(queues=None, worker_id="w-2", now=later, lease_timeout=60, limit=10)] == [
            delayed.id, ahead.id
        ]

    def test_a_lease_of_100_years_is_stored_exactly(self, repository: JobRepository, clock: FakeClock) -> None:
        job = self.add(repository, clock)
        leased = self.lease_one(repository, clock, lease_timeout=MAX_SECONDS)
        assert leased.lease_expires_at == clock.now() + CENTURY
        clock.advance(5)
        beat = repository.heartbeat(job.id, self.token_of(leased), now=clock.now(), lease_timeout=MAX_SECONDS)
        assert beat.lease_expires_at == clock.now() + CENTURY == repository.get(job.id).lease_expires_at

    @pytest.mark.parametrize("lease_timeout", BAD_LEASE_TIMEOUTS,
                             ids=["zero", "negative", "nan", "inf", "100y+1s", "1e15", "timedelta.max"])
    def test_a_lease_timeout_out_of_range_is_refused_before_any_write(self, repository: JobRepository, clock: FakeClock,
                                                                      lease_timeout: Any) -> None:
        job = self.add(repository, clock)
        for lease in (
            lambda: repository.lease(queues=None, worker_id="w-1", now=clock.now(), lease_timeout=lease_timeout),
            lambda: repository.lease_job(job.id, worker_id="w-1", now=clock.now(), lease_timeout=lease_timeout),
        ):
            with pytest.raises(ValidationError) as info:
                lease()
            assert info.value.field == "lease_timeout"
        assert repository.get(job.id) == job
        leased = self.lease_one(repository, clock)
        with pytest.raises(ValidationError) as info:
            repository.heartbeat(job.id, self.token_of(leased), now=clock.now(), lease_timeout=lease_timeout)
        assert info.value.field == "lease_timeout"
        assert repository.get(job.id) == leased

    @pytest.mark.parametrize("worker_id", BAD_WORKER_IDS, ids=["empty", "201-chars", "tab", "surrogate"])
    def test_a_worker_id_that_is_not_printable_is_refused_before_any_write(self, repository: JobRepository,
                                                                           clock: FakeClock, worker_id: str) -> None:
        job = self.add(repository, clock)
        for lease in (
            lambda: repository.lease(queues=None, worker_id=worker_id, now=clock.now(), lease_timeout=60),
            lambda: repository.lease_job(job.id, worker_id=worker_id, now=clock.now(), lease_timeout=60),
        ):
            with pytest.raises(ValidationError) as info:
                lease()
            assert info.value.field == "worker_id"
        assert repository.get(job.id).status is JobStatus.QUEUED and repository.get(job.id) == job


__all__ = ["LimitContract"]
