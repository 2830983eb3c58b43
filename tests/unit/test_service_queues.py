"""The queue side of the Tether API on the memory store: pause, limits, rates, queues(), explain
naming a queue control, and bad input (ValidationError naming the field, nothing written)."""

from __future__ import annotations

import pytest
from tether.adapters.clock import FakeClock
from tether.domain.errors import ValidationError
from tether.domain.job import JobStatus
from tether.domain.workers import WorkerEntry
from tether.entrypoints.requests import EnqueueRequest
from tether.testing import fake_app


def test_queues_lists_controls_and_counts_and_explain_names_them() -> None:
    app = fake_app()
    mail = app.enqueue("mail.send", {}, queue="mail").job
    api = [app.enqueue("api.call", {"n": n}, queue="api").job for n in range(4)]
    now = app.clock.now()
    app.repository.record_worker(WorkerEntry(  # type: ignore[attr-defined]
        worker_id="w-1", host="h", pid=1, queues=None, job_types=("mail.send", "api.call"), concurrency=4,
        version="0", dispatcher="polling", heartbeat_interval=10.0, started_at=now, last_seen_at=now,
    ))
    app.pause_queue("mail")
    app.limit_queue("api", max_running=1)
    app.rate_limit_queue("idle", starts=10, per=60)
    infos = {q.name: q for q in app.queues()}
    assert sorted(infos) == ["api", "idle", "mail"]
    assert (infos["mail"].paused, infos["mail"].counts[JobStatus.QUEUED]) == (True, 1)
    assert (infos["api"].max_running, infos["idle"].rate_limit, infos["idle"].rate_period) == (1, 10, 60.0)
    assert app.explain(mail.id).reason == "paused"
    leased = app.repository.lease(queues=["api"], worker_id="w", now=app.clock.now(), lease_timeout=60, limit=5)
    assert len(leased) == 1
    assert app.explain(api[1].id).reason == "limited"
    app.limit_queue("api", max_running=None)
    app.rate_limit_queue("api", starts=2, per=60)
    assert len(app.repository.lease(queues=["api"], worker_id="w", now=app.clock.now(), lease_timeout=60, limit=5)) == 2
    assert app.explain(api[3].id).reason == "rate_limited"


def test_a_per_key_limit_through_the_api_and_explain_naming_it() -> None:
    app = fake_app()
    now = app.clock.now()
    app.repository.record_worker(WorkerEntry(  # type: ignore[attr-defined]
        worker_id="w-1", host="h", pid=1, queues=None, job_types=("api.call",), concurrency=4,
        version="0", dispatcher="polling", heartbeat_interval=10.0, started_at=now, last_seen_at=now,
    ))
    state = app.limit_queue("api", max_running_per_key=1)
    assert (state.max_running_per_key, state.max_running) == (1, None)
    assert app.limit_queue("api", max_running=5).max_running_per_key == 1  # a limit not given stays
    first, second = (app.enqueue("api.call", {"n": n}, queue="api", concurrency_key="customer-42").job for n in range(2))
    other = app.enqueue_many([EnqueueRequest("api.call", {}, queue="api", concurrency_key="customer-7")])[0].job
    free = app.enqueue("api.call", {}, queue="api").job
    assert (first.concurrency_key, other.concurrency_key, free.concurrency_key) == ("customer-42", "customer-7", None)
    leased = app.repository.lease(queues=["api"], worker_id="w", now=app.clock.now(), lease_timeout=60, limit=10)
    assert sorted(j.id for j in leased) == sorted([first.id, other.id, free.id])
    why = app.explain(second.id)
    assert why.reason == "key_limited"
    assert why.verdict.startswith("waiting: 1 job of concurrency key customer-42 already running, the queue's per-key limit")
    [info] = [q for q in app.queues() if q.name == "api"]
    assert (info.max_running, info.max_running_per_key) == (5, 1)
    cleared = app.limit_queue("api", max_running_per_key=None)
    assert (cleared.max_running_per_key, cleared.max_running) == (None, 5)


def test_aenqueue_takes_a_concurrency_key() -> None:
    import asyncio

    app = fake_app()
    job = asyncio.run(app.aenqueue("api.call", {}, queue="api", concurrency_key="customer-42")).job
    assert app.repository.get(job.id).concurrency_key == "customer-42"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda app: app.enqueue("x", {}, concurrency_key=""), "concurrency_key"),
        (lambda app: app.enqueue("x", {}, concurrency_key="k" * 256), "concurrency_key"),
        (lambda app: app.enqueue("x", {}, concurrency_key=42), "concurrency_key"),
        (lambda app: app.enqueue_many([EnqueueRequest("x"), EnqueueRequest("x", concurrency_key="")]),
         "requests[1].concurrency_key"),
    ],
)
def test_a_bad_concurrency_key_names_its_field_and_stores_nothing(call, field: str) -> None:  # type: ignore[no-untyped-def]
    app = fake_app()
    with pytest.raises(ValidationError) as caught:
        call(app)
    assert caught.value.field == field
    assert sum(app.repository.count_by_status().values()) == 0


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda app: app.pause_queue(""), "queue"),
        (lambda app: app.resume_queue("a b"), "queue"),
        (lambda app: app.limit_queue("api", max_running=0), "max_running"),
        (lambda app: app.limit_queue("api", max_running=-3), "max_running"),
        (lambda app: app.limit_queue("api", max_running_per_key=0), "max_running_per_key"),
        (lambda app: app.limit_queue("api", max_running_per_key=2.5), "max_running_per_key"),
        (lambda app: app.limit_queue("api", max_running=3, max_running_per_key=0), "max_running_per_key"),
        (lambda app: app.limit_queue("api"), "max_running"),
        (lambda app: app.rate_limit_queue("api", starts=0, per=10), "rate_limit"),
        (lambda app: app.rate_limit_queue("api", starts=5, per=0), "rate_period"),
        (lambda app: app.rate_limit_queue("api", starts=5), "rate_period"),
        (lambda app: app.rate_limit_queue("bad/name", starts=5, per=1), "queue"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(call, field: str) -> None:  # type: ignore[no-untyped-def]
    app = fake_app()
    with pytest.raises(ValidationError) as caught:
        call(app)
    assert caught.value.field == field
    assert app.repository.queue_states() == []
    assert isinstance(app.clock, FakeClock)


def test_a_running_limit_and_a_rate_may_be_given_by_position() -> None:
    app = fake_app()
    assert app.limit_queue("api", 3).max_running == 3
    state = app.rate_limit_queue("api", 10, 60)
    assert (state.rate_limit, state.rate_period, state.max_running) == (10, 60.0, 3)
    with pytest.raises(ValidationError) as caught:
        app.limit_queue("api", 0)
    assert caught.value.field == "max_running" and "from 1 to 1,000,000, got 0" in str(caught.value)
    assert [q.max_running for q in app.queues() if q.name == "api"] == [3]  # nothing written
