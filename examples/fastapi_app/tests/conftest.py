"""The service on SQLite and on PostgreSQL, served through httpx's ASGI transport with its
lifespan run (asgi-lifespan), and the Tether apps it opened (to look at the jobs and at closing).

PostgreSQL is ``TETHER_TEST_DATABASE_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``),
in a schema of its own that is dropped afterwards; when it is unreachable its tests skip, unless
``TETHER_REQUIRE_SERVICES=1``, which makes them fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import tether
from asgi_lifespan import LifespanManager
from signup_api import app as signup_app
from signup_api.app import Settings, create_api
from signup_api.emails import Mailer, Outbox

DATABASE_URL = os.environ.get("TETHER_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "sqlite":
        yield Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'signups.db'}")
        return
    engine = sa.create_engine(DATABASE_URL)
    try:
        with engine.connect():
            pass
    except sa.exc.OperationalError as error:
        engine.dispose()
        if os.environ.get("TETHER_REQUIRE_SERVICES") == "1":
            pytest.fail(f"PostgreSQL unreachable: {error} (TETHER_REQUIRE_SERVICES=1)")
        pytest.skip(f"PostgreSQL unreachable: {error}")
    schema = f"signups_{uuid.uuid4().hex[:10]}"
    try:
        yield Settings(database_url=DATABASE_URL, schema=schema)
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        engine.dispose()


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tether.Tether]:
    """Every Tether app the service opens (at each startup), in order."""
    apps: list[tether.Tether] = []
    original = signup_app.open_tether

    def recording(settings: Settings, mailer: Mailer) -> tether.Tether:
        apps.append(original(settings, mailer))
        return apps[-1]

    monkeypatch.setattr(signup_app, "open_tether", recording)
    return apps


@pytest.fixture
def serve(outbox: Outbox) -> Callable[[Settings], AbstractAsyncContextManager[httpx.AsyncClient]]:
    """``async with serve(settings) as client``: the service started, a client on it; shut down on exit."""

    @asynccontextmanager
    async def serving(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
        api = create_api(settings, outbox)
        async with LifespanManager(api, shutdown_timeout=60) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://signups.test") as client:
                yield client

    return serving


@pytest.fixture
def jobs_of(settings: Settings) -> Callable[[], list[tether.Job]]:
    """The jobs in the service's database, read by a Tether app of the test's own."""

    def read() -> list[tether.Job]:
        with tether.connect(settings.tether_url, schema=settings.schema) as app:
            return app.list()

    return read
