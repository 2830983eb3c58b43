"""The signup API on SQLite and PostgreSQL: the welcome e-mail is enqueued with the signup, a
rolled back signup leaves no job, the in-process worker sends it, and shutdown closes everything."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
import sqlalchemy as sa
import tether
from tether.domain.errors import ConfigurationError

ADA = {"email": "ada@example.com", "name": "Ada"}


def signups_in(settings) -> list[tuple[str, str]]:
    engine = sa.create_engine(settings.tether_url)
    try:
        table = f'"{settings.schema}".signups' if settings.schema else "signups"
        with engine.connect() as conn:
            return [tuple(row) for row in conn.exec_driver_sql(f"SELECT email, name FROM {table}")]
    finally:
        engine.dispose()


async def test_a_signup_is_stored_and_its_welcome_email_enqueued(settings, serve, jobs_of, outbox):
    async with serve(settings) as client:
        response = await client.post("/signups", json=ADA)
        assert response.status_code == 201, response.text
        job_id = response.json()["welcome_job"]
        status = (await client.get(f"/jobs/{job_id}")).json()
        assert status == {"id": job_id, "type": "emails.welcome", "status": "queued", "attempts": 0}
    assert [(job.id, job.payload) for job in jobs_of()] == [(job_id, {"to": "ada@example.com", "name": "Ada"})]
    assert signups_in(settings) == [("ada@example.com", "Ada")]
    assert outbox.sent == []  # no worker in this process


async def test_a_second_signup_of_the_address_is_refused_and_its_job_rolled_back(settings, serve, jobs_of):
    async with serve(settings) as client:
        first = await client.post("/signups", json=ADA)
        again = await client.post("/signups", json={**ADA, "name": "Ada again"})
        assert again.status_code == 409, again.text
        assert again.json() == {"detail": "ada@example.com has already signed up"}
    # the second job was written before the signup's INSERT failed: the rollback took it away
    assert [job.id for job in jobs_of()] == [first.json()["welcome_job"]]
    assert signups_in(settings) == [("ada@example.com", "Ada")]


async def test_bad_input_is_refused_and_nothing_is_written(settings, serve, jobs_of):
    async with serve(settings) as client:
        response = await client.post("/signups", json={"email": "not an address", "name": "Ada"})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "email"]
        assert (await client.get("/jobs/12345")).status_code == 404
    assert jobs_of() == []


async def test_the_in_process_worker_sends_the_welcome_email(settings, serve, outbox, jobs_of):
    async with serve(dataclasses.replace(settings, worker=True)) as client:
        job_id = (await client.post("/signups", json=ADA)).json()["welcome_job"]
        deadline = time.monotonic() + 20
        while (status := (await client.get(f"/jobs/{job_id}")).json())["status"] != "completed":
            assert time.monotonic() < deadline, f"the welcome e-mail was not sent: {status}"
            await asyncio.sleep(0.05)
        assert outbox.sent == [("ada@example.com", "Welcome!", "Hello Ada, thanks for signing up.")]
    assert [(job.id, job.status) for job in jobs_of()] == [(job_id, tether.JobStatus.COMPLETED)]


@pytest.mark.parametrize("worker", [False, True], ids=["api-only", "with-worker"])
async def test_shutdown_closes_tether_and_each_startup_opens_it_again(settings, serve, opened, worker):
    settings = dataclasses.replace(settings, worker=worker)
    for email in ("a@example.com", "b@example.com"):
        async with serve(settings) as client:
            assert (await client.post("/signups", json={"email": email, "name": "x"})).status_code == 201
    assert len(opened) == 2 and opened[0] is not opened[1]
    for app in opened:
        with pytest.raises(ConfigurationError, match="closed"):  # closed, its worker pools stopped
            app.worker()
