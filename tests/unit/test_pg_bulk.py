"""Which PostgreSQL bulk-enqueue statement a batch takes, and the jobs built for the "alike" one
(no database: the statements themselves run in tests/integration/test_postgres_bulk_enqueue.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from tether.adapters.sqlalchemy import pg_bulk
from tether.domain.job import NewJob
from tether.domain.transitions import create
from tether.domain.validation import prepare_job

NOW = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


class Text(str):
    pass


def _batch(n: int = 3, **options: Any) -> list[NewJob]:
    return [prepare_job("mail.send", {"i": i}, now=NOW, **options) for i in range(n)]


def test_an_alike_batch_without_keys_shares_its_fields() -> None:
    shared = pg_bulk.shared_fields(_batch(queue="mail", priority=4, max_attempts=9, delay=30), NOW)
    assert shared == pg_bulk.SharedFields("mail.send", "mail", 4, 9, NOW + timedelta(seconds=30))


def test_equal_values_built_apart_still_count_as_shared() -> None:
    jobs = _batch(2)
    # equal strings that are other objects than the first job's (as when read from a file)
    jobs.append(NewJob(job_type="".join(["mail", ".send"]), queue="".join(["de", "fault"]), payload_json="{}",  # noqa: FLY002
                       priority=0, max_attempts=jobs[0].max_attempts,
                       scheduled_at=NOW.astimezone(timezone(timedelta(hours=2)))))  # the same instant
    assert jobs[2].job_type is not jobs[0].job_type
    assert pg_bulk.shared_fields(jobs, NOW) is not None


@pytest.mark.parametrize(
    "change",
    [
        {"idempotency_key": "k"},
        {"job_type": "mail.other"},
        {"queue": "other"},
        {"priority": 1},
        {"max_attempts": 2},
        {"scheduled_at": NOW + timedelta(microseconds=1)},
        {"payload_json": Text("{}")},
        {"job_type": Text("mail.send")},
        {"priority": True},
    ],
)
def test_any_difference_key_or_odd_type_takes_the_general_statement(change: dict[str, Any]) -> None:
    for position in (0, 2):
        jobs = _batch()
        jobs[position] = attrs.evolve(jobs[position], **change)
        assert pg_bulk.shared_fields(jobs, NOW) is None


def test_a_now_that_is_not_exact_utc_takes_the_general_statement() -> None:
    assert pg_bulk.shared_fields(_batch(), NOW.astimezone(timezone(timedelta(hours=1)))) is None
    assert pg_bulk.shared_fields([], NOW) is None


def test_alike_results_are_what_create_makes_in_input_order() -> None:
    jobs = _batch(4, queue="mail", priority=-2, max_attempts=3, run_at=NOW + timedelta(days=1))
    shared = pg_bulk.shared_fields(jobs, NOW)
    assert shared is not None
    results = pg_bulk.alike_results(jobs, [11, 12, 15, 20], shared, NOW)
    assert [r.job for r in results] == [create(j, job_id=i, now=NOW) for j, i in zip(jobs, [11, 12, 15, 20])]
    assert all(r.created for r in results)


def test_alike_params_send_the_payload_texts_as_one_json_array() -> None:
    jobs = [prepare_job("t", p, now=NOW) for p in ({"s": 'é"\\ \u2028 😀'}, [1, 2.5], "x", None)]
    shared = pg_bulk.shared_fields(jobs, NOW)
    assert shared is not None
    params = pg_bulk.alike_params(jobs, shared, NOW)
    assert json.loads(params["payloads"]) == [j.payload_json for j in jobs]
    assert (params["t"], params["s"], params["now"]) == ("t", NOW, NOW)


def test_general_params_mark_a_batch_with_any_key_as_keyed() -> None:
    assert pg_bulk.general_params(_batch(), NOW)[1] is False
    mixed = [*_batch(2), prepare_job("t", {}, now=NOW, idempotency_key="k")]
    assert pg_bulk.general_params(mixed, NOW)[1] is True
    assert "ON CONFLICT" in pg_bulk.general_statement("t", keyed=True)
    assert "ON CONFLICT" not in pg_bulk.general_statement("t", keyed=False)
