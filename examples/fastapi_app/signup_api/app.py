"""The API: ``POST /signups`` stores a signup and enqueues its welcome e-mail in one transaction;
``GET /jobs/{id}`` tells how that job is doing.

Run it with ``uvicorn --factory signup_api.app:create_api`` after setting ``SIGNUP_DATABASE_URL``
(an async SQLAlchemy URL: ``sqlite+aiosqlite:///signups.db`` by default, or
``postgresql+psycopg://app@db/app``). ``SIGNUP_WORKER=1`` runs a worker pool in the same process;
otherwise run ``tether worker --app signup_api.worker:create_tether`` beside it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import tether
from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from tether.contrib.fastapi import TetherDep, tether_lifespan

from signup_api.emails import WELCOME, Mailer, Outbox, register_handlers
from signup_api.models import Base, Signup


@dataclass(frozen=True)
class Settings:
    """Where the service keeps its data, and whether it runs a worker itself."""

    database_url: str = "sqlite+aiosqlite:///signups.db"  # async URL; Tether's tables live there too
    schema: str | None = None  # PostgreSQL schema of both the signups table and Tether's tables
    redis_url: str | None = None  # wake workers through Redis Streams instead of polling
    worker: bool = False  # run a worker pool in this process
    drain_timeout: float = 10.0  # seconds in-flight jobs get at shutdown (worker=True)

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            database_url=os.environ.get("SIGNUP_DATABASE_URL", cls.database_url),
            schema=os.environ.get("SIGNUP_SCHEMA") or None,
            redis_url=os.environ.get("TETHER_REDIS_URL") or None,
            worker=os.environ.get("SIGNUP_WORKER") == "1",
        )

    @property
    def tether_url(self) -> str:
        """The same database for Tether, with its sync driver (``sqlite+aiosqlite`` -> ``sqlite``)."""
        url = make_url(self.database_url)
        if url.drivername == "sqlite+aiosqlite":
            url = url.set(drivername="sqlite")
        return url.render_as_string(hide_password=False)


def open_tether(settings: Settings, mailer: Mailer) -> tether.Tether:
    """The service's Tether app with its handlers (also what ``tether worker --app`` runs)."""
    app = tether.connect(settings.tether_url, schema=settings.schema, redis_url=settings.redis_url)
    register_handlers(app, mailer)
    return app


class SignupIn(BaseModel):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=320)
    name: str = Field(min_length=1, max_length=200)


class SignupOut(BaseModel):
    id: int
    welcome_job: int


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.state.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


def create_api(settings: Settings | None = None, mailer: Mailer | None = None) -> FastAPI:
    """The FastAPI application; ``settings`` default to :meth:`Settings.from_env`."""
    settings = settings or Settings.from_env()
    mailer = mailer or Outbox()

    @asynccontextmanager
    async def database(api: FastAPI) -> AsyncIterator[dict[str, Any]]:
        """The service's own engine; Tether is already open (its schema exists) when this runs."""
        options = {"schema_translate_map": {None: settings.schema}} if settings.schema else {}
        engine = create_async_engine(settings.database_url, execution_options=options)
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        try:
            yield {"sessions": async_sessionmaker(engine, expire_on_commit=False)}
        finally:
            await engine.dispose()

    worker_options = {"concurrency": 2, "drain_timeout": settings.drain_timeout} if settings.worker else {}
    api = FastAPI(
        title="signups",
        lifespan=tether_lifespan(lambda: open_tether(settings, mailer), lifespan=database, worker=settings.worker,
                                 **worker_options),
    )

    @api.post("/signups", status_code=201)
    async def sign_up(body: SignupIn, session: SessionDep, jobs: TetherDep) -> SignupOut:
        """Store the signup and enqueue its welcome e-mail, both or neither."""
        try:
            async with session.begin():
                enqueued = await jobs.aenqueue(WELCOME, {"to": body.email, "name": body.name}, connection=session)
                signup = Signup(email=body.email, name=body.name)
                session.add(signup)
                await session.flush()  # a second signup of the address fails here: the job rolls back too
        except IntegrityError:
            raise HTTPException(409, f"{body.email} has already signed up") from None
        return SignupOut(id=signup.id, welcome_job=enqueued.job.id)

    @api.get("/jobs/{job_id}")
    async def job_status(job_id: int, jobs: TetherDep) -> dict[str, Any]:
        try:
            job = await jobs.aget(job_id)
        except tether.JobNotFound:
            raise HTTPException(404, f"no job {job_id}") from None
        return {"id": job.id, "type": job.job_type, "status": job.status.value, "attempts": job.attempts}

    return api
