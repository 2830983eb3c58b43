"""Three worker pools, each in an app of its own on one store, share an ``every=1`` schedule: each
tick enqueues exactly one job, none more than one period ahead (SQLite file and PostgreSQL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import tether
from tether.domain.job import Job, JobStatus
from tether.domain.schedules import is_tick_key
from tether.entrypoints.service import Tether

from tests.postgres_fixtures import DATABASE_URL, schema_name, temporary_app

TICKS = 12
POOLS = 3


@contextmanager
def three_apps(kind: str, tmp_path: Path) -> Iterator[list[Tether]]:
    with ExitStack() as stack:
        if kind == "sqlite":
            url = f"sqlite:///{tmp_path / 'periodic.db'}"
            apps = [stack.enter_context(tether.connect(url, poll_interval=0.1)) for _ in range(POOLS)]
        else:
            first = stack.enter_context(temporary_app(schema_name("periodic"), poll_interval=0.1, pool_size=4))
            schema = first.repository.schema  # type: ignore[attr-defined]
            apps = [first] + [
                stack.enter_context(tether.connect(DATABASE_URL, schema=schema, create=False, poll_interval=0.1, pool_size=4))
                for _ in range(POOLS - 1)
            ]
        yield apps


def check_one_job_per_tick(app: Tether) -> tuple[list[Job], list[Job]]:
    """Assert that the tick jobs of ``app``'s ``every=1`` schedule are one per tick, the first
    :data:`TICKS` of them all present, none enqueued more than one period before its instant;
    returns ``(every tick job by tick, the first TICKS of them)``."""
    jobs = sorted((j for j in app.list(limit=1000) if is_tick_key(j.idempotency_key)), key=lambda j: j.scheduled_at)
    first = jobs[0].scheduled_at
    window = [j for j in jobs if j.scheduled_at < first + timedelta(seconds=TICKS)]
    assert [j.scheduled_at for j in window] == [first + timedelta(seconds=i) for i in range(TICKS)]
    assert len({j.scheduled_at for j in jobs}) == len(jobs)
    assert all(j.scheduled_at - j.created_at <= timedelta(seconds=1) for j in jobs), [
        (j.created_at, j.scheduled_at) for j in jobs
    ]
    return jobs, window


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_three_pools_enqueue_each_tick_of_an_every_second_schedule_once(kind: str, tmp_path: Path) -> None:
    runs: list[int] = []
    lock = threading.Lock()

    def beat(payload: object, ctx: tether.JobContext) -> None:
        with lock:
            runs.append(ctx.job.id)

    with three_apps(kind, tmp_path) as apps:
        for app in apps:
            app.register("beat", beat)
            app.periodic("beat", "beat", every=1, overlap=True)
        pools = [app.worker(concurrency=2, max_wait=0.1, heartbeat_interval=1.0, lease_timeout=30) for app in apps]
        for pool in pools:
            pool.start()
        try:
            deadline = time.monotonic() + TICKS + 4
            while time.monotonic() < deadline:
                jobs = [j for j in apps[0].list(limit=1000) if is_tick_key(j.idempotency_key)]
                if len(jobs) >= TICKS + 2:
                    break
                time.sleep(0.2)
        finally:
            for pool in pools:
                pool.stop(drain_timeout=5)
        jobs, window = check_one_job_per_tick(apps[0])
        done = [j for j in window if j.status is JobStatus.COMPLETED]
        assert len(done) == TICKS and len(set(runs)) == len(runs) >= TICKS
        [state] = apps[1].schedules()
        assert state.last_tick_at == jobs[-1].scheduled_at and state.spec == "every 1s"
