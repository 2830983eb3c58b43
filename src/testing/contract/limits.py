"""Contract part: text that is not UTF-8.

Text with a lone surrogate (``"\\ud800"``, or what ``surrogateescape`` makes of undecodable bytes)
has no UTF-8 encoding, so no store can keep it.  Given to enqueue, it never reaches a repository:
:func:`~tether.domain.validation.prepare_job` refuses it naming the field, so nothing is stored and
the repository's transaction goes on.  A repository refuses a worker id that is not 1-200
printable characters (a lone surrogate is not printable) as ``ValidationError(worker_id)``, before
writing.  Text outside the Basic Multilingual Plane is stored and read back exactly.
"""

from __future__ import annotations

from typing import Any

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.ports.repository import JobRepository
from tether.testing.contract.support import ContractSupport

#: (prepare_job keyword arguments, the field the error names)
NOT_UTF8: list[tuple[dict[str, Any], str]] = [
    ({"payload": {"s": "\ud800"}}, "payload.s"),
    ({"payload": {"a": [1, {"b": "ok \udcff"}]}}, "payload.a[1].b"),
    ({"payload": {"a": {"\udcff": 1}}}, "payload.a"),
    ({"idempotency_key": "order-\ud800"}, "idempotency_key"),
    ({"job_type": "emails\udcff"}, "job_type"),
    ({"queue": "mail\ud800"}, "queue"),
]
BAD_WORKER_IDS = ["", "w" * 201, "tab\there", "w-\ud800"]


class LimitContract(ContractSupport):
    """Text every store can keep is kept exactly; text no store can keep is refused unwritten."""

    def _refused(self, clock: FakeClock, options: dict[str, Any], field: str) -> None:
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

    def test_a_refusal_leaves_the_transaction_usable(self, repository: JobRepository, clock: FakeClock) -> None:
        with repository.transaction() as tx:
            before = repository.enqueue(self.new_job(clock, {"n": "before"}), now=clock.now(), connection=tx).job
            for options, field in NOT_UTF8:
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
