"""tether.contrib.fastapi through httpx's ASGI transport (the lifespan run by asgi-lifespan):
the lifespan opens and closes Tether, the dependency hands it to endpoints, an in-process worker
runs async handlers on the pool's loop and drains with its deadline at shutdown, bad options are
refused at once."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
import tether
from asgi_lifespan import LifespanManager
from fastapi import Depends, FastAPI, Request, WebSocket
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from tether.contrib.fastapi import TetherDep, get_tether, tether_lifespan
from tether.domain.errors import ConfigurationError, ValidationError
from tether.domain.job import JobStatus

from tests.conftest import REDIS_URL, wait_for
from tests.postgres_fixtures import DATABASE_URL, schema_name, server_engine
from tests.redis_fixtures import temporary_prefix


class Opened:
    """A factory of SQLite apps that remembers each app it built."""

    def __init__(self, path: Path, register: Callable[[tether.Tether], None] | None = None) -> None:
        self.url = f"sqlite:///{path}"
        self.register = register
        self.apps: list[tether.Tether] = []

    def __call__(self) -> tether.Tether:
        app = tether.connect(self.url, poll_interval=0.05)
        if self.register is not None:
            self.register(app)
        self.apps.append(app)
        return app


def build_api(lifespan: Any) -> FastAPI:
    api = FastAPI(lifespan=lifespan)

    @api.post("/jobs/{job_type}")
    async def enqueue(job_type: str, payload: dict[str, Any], app: TetherDep) -> dict[str, Any]:
        job = (await app.aenqueue(job_type, payload)).job
        return {"id": job.id, "status": job.status.value}

    @api.get("/jobs/{job_id}")
    async def read(job_id: int, app: Annotated[tether.Tether, Depends(get_tether)]) -> dict[str, Any]:
        job = await app.aget(job_id)
        return {"id": job.id, "status": job.status.value}

    return api


@asynccontextmanager
async def serving(api: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with LifespanManager(api, shutdown_timeout=60) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


@pytest.mark.asyncio
async def test_the_lifespan_opens_tether_the_endpoint_enqueues_and_shutdown_closes_it(tmp_path: Path) -> None:
    opened = Opened(tmp_path / "jobs.db")
    api = build_api(tether_lifespan(opened))
    async with serving(api) as client:
        response = await client.post("/jobs/emails.welcome", json={"to": "ada@example.com"})
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "queued"
        (app,) = opened.apps
        job = await app.aget(response.json()["id"])
        assert (job.job_type, job.payload) == ("emails.welcome", {"to": "ada@example.com"})
        assert (await client.get(f"/jobs/{job.id}")).json() == {"id": job.id, "status": "queued"}
    with pytest.raises(ConfigurationError, match="closed"):
        app.worker()
    # the jobs outlive the process: a new app on the same file finds the job
    with tether.connect(opened.url) as again:
        assert again.get(job.id).status is JobStatus.QUEUED


@pytest.mark.asyncio
async def test_each_startup_builds_a_new_app_from_the_factory(tmp_path: Path) -> None:
    opened = Opened(tmp_path / "jobs.db")
    api = build_api(tether_lifespan(opened))
    for _ in range(2):
        async with serving(api) as client:
            assert (await client.post("/jobs/x", json={})).status_code == 200
    assert len(opened.apps) == 2 and opened.apps[0] is not opened.apps[1]
    with tether.connect(opened.url) as again:
        assert again.counts()[JobStatus.QUEUED] == 2


@pytest.mark.asyncio
async def test_a_users_lifespan_runs_inside_with_tether_open_and_its_state_is_kept(tmp_path: Path) -> None:
    opened = Opened(tmp_path / "jobs.db")
    events: list[str] = []

    @asynccontextmanager
    async def own(api: FastAPI) -> AsyncIterator[dict[str, Any]]:
        (app,) = opened.apps
        await app.aenqueue("startup.ping")  # Tether is open during the user's startup...
        events.append("own startup")
        yield {"greeting": "hello"}
        events.append("own shutdown")
        await app.aenqueue("shutdown.ping")  # ... and still open during the user's shutdown

    api = build_api(tether_lifespan(opened, lifespan=own))

    @api.get("/greeting")
    async def greeting(request: Request, app: TetherDep) -> dict[str, Any]:
        return {"greeting": request.state.greeting, "queued": (await app.acounts())[JobStatus.QUEUED]}

    async with serving(api) as client:
        assert (await client.get("/greeting")).json() == {"greeting": "hello", "queued": 1}
    assert events == ["own startup", "own shutdown"]
    with tether.connect(opened.url) as again:
        assert sorted(job.job_type for job in again.list()) == ["shutdown.ping", "startup.ping"]


@pytest.mark.asyncio
async def test_an_async_factory_and_a_tether_object_are_accepted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"

    async def open_async() -> tether.Tether:
        return tether.connect(url)

    async with serving(build_api(tether_lifespan(open_async))) as client:
        assert (await client.post("/jobs/a", json={})).status_code == 200
    app = tether.connect(url)
    api = build_api(tether_lifespan(app))
    async with serving(api) as client:
        assert (await client.post("/jobs/b", json={})).status_code == 200
    with pytest.raises(ConfigurationError, match="closed"):  # the object is closed with the application
        app.worker()
    with pytest.raises(ConfigurationError, match="closed at the previous shutdown; pass a function"):
        async with serving(api):
            pass


@pytest.mark.asyncio
async def test_the_in_process_worker_runs_async_handlers_on_the_pools_loop(tmp_path: Path) -> None:
    ran: list[tuple[dict[str, Any], str]] = []

    def register(app: tether.Tether) -> None:
        @app.handler("emails.welcome")
        async def welcome(payload: dict[str, Any], ctx: Any) -> None:
            await asyncio.sleep(0)
            ran.append((payload, threading.current_thread().name))

    opened = Opened(tmp_path / "jobs.db", register)
    api = build_api(tether_lifespan(opened, worker=True, concurrency=1, max_wait=0.05))
    async with serving(api) as client:
        job_id = (await client.post("/jobs/emails.welcome", json={"to": "ada@example.com"})).json()["id"]
        deadline = time.monotonic() + 20
        while (await client.get(f"/jobs/{job_id}")).json()["status"] != "completed":
            assert time.monotonic() < deadline, "the in-process worker did not complete the job"
            await asyncio.sleep(0.02)
        server_thread = threading.current_thread().name
    assert ran == [({"to": "ada@example.com"}, "tether-async")]
    assert server_thread != "tether-async"


@pytest.mark.asyncio
async def test_shutdown_stops_the_worker_within_its_drain_deadline_and_releases_the_job(tmp_path: Path) -> None:
    started, cancelled = threading.Event(), threading.Event()

    def register(app: tether.Tether) -> None:
        @app.handler("slow")
        async def slow(payload: Any, ctx: Any) -> None:
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    opened = Opened(tmp_path / "jobs.db", register)
    api = build_api(tether_lifespan(opened, worker=True, drain_timeout=0.2, max_wait=0.05))
    async with serving(api) as client:
        job_id = (await client.post("/jobs/slow", json={})).json()["id"]
        await asyncio.to_thread(wait_for, started.is_set, 20, "the slow handler to start")
        stopping_at = time.monotonic()
    took = time.monotonic() - stopping_at
    assert cancelled.is_set()  # the drain deadline cancelled the handler's task
    assert took < 10, took  # not the handler's 60 s
    with tether.connect(opened.url) as again:
        assert again.get(job_id).status is JobStatus.QUEUED  # released for another worker, unrecorded


@pytest.mark.asyncio
async def test_the_worker_pool_is_in_the_state_and_stopped_at_shutdown(tmp_path: Path) -> None:
    opened = Opened(tmp_path / "jobs.db")
    api = build_api(tether_lifespan(opened, worker=True, concurrency=2))

    @api.get("/worker")
    async def worker(request: Request) -> dict[str, Any]:
        pool = request.state.tether_worker
        return {"concurrency": pool.concurrency, "stopping": pool.stopping}

    async with LifespanManager(api) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/worker")).json() == {"concurrency": 2, "stopping": False}
        pool = manager._state["tether_worker"]
    assert pool.stopping


@pytest.mark.asyncio
async def test_a_bad_worker_option_value_fails_startup_and_closes_the_app(tmp_path: Path) -> None:
    opened = Opened(tmp_path / "jobs.db")
    api = build_api(tether_lifespan(opened, worker=True, concurrency=0))
    with pytest.raises(ValidationError) as info:
        async with LifespanManager(api):
            pass
    assert info.value.field == "concurrency"
    with pytest.raises(ConfigurationError, match="closed"):
        opened.apps[0].worker()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tether_lifespan("sqlite:///x.db"), "source must be a Tether"),
        (lambda: tether_lifespan(tether.connect, concurency=2), "concurency: not an option"),
        (lambda: tether_lifespan(tether.connect, concurrency=2), "concurrency: a worker option needs worker=True"),
        (lambda: tether_lifespan(tether.connect, lifespan="mine"), "lifespan must be a lifespan function"),
    ],
)
@pytest.mark.asyncio
async def test_bad_arguments_are_refused_at_once_with_the_argument_named(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        call()


@pytest.mark.asyncio
async def test_a_factory_returning_something_else_fails_startup() -> None:
    api = build_api(tether_lifespan(lambda: "not an app"))
    with pytest.raises(ConfigurationError, match="returned 'not an app', not a Tether"):
        async with LifespanManager(api):
            pass


@pytest.mark.asyncio
async def test_get_tether_without_the_lifespan_names_the_fix() -> None:
    api = build_api(None)
    transport = httpx.ASGITransport(app=api, raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with pytest.raises(ConfigurationError, match=r"FastAPI\(lifespan=tether_lifespan"):
            await client.get("/jobs/1")


def test_a_websocket_endpoint_gets_tether_too_and_starlettes_test_client_runs_the_lifespan(tmp_path: Path) -> None:
    opened = Opened(tmp_path / "jobs.db")
    api = FastAPI(lifespan=tether_lifespan(opened))

    @api.websocket("/ws")
    async def enqueue_over_websocket(websocket: WebSocket, app: TetherDep) -> None:
        await websocket.accept()
        job_type = await websocket.receive_text()
        await websocket.send_json({"id": (await app.aenqueue(job_type)).job.id})
        await websocket.close()

    with warnings.catch_warnings():  # Starlette prefers httpx2 to httpx for its TestClient
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    with TestClient(api) as client, client.websocket_connect("/ws") as socket:
        socket.send_text("pushed")
        job_id = socket.receive_json()["id"]
    with tether.connect(opened.url) as again:
        assert again.get(job_id).job_type == "pushed"


@pytest.mark.postgres
@pytest.mark.asyncio
async def test_on_postgresql_an_endpoint_joins_the_async_session_and_a_rollback_leaves_no_job() -> None:
    schema = schema_name("fastapi_contrib")
    engine = create_async_engine(DATABASE_URL)

    async def session() -> AsyncIterator[AsyncSession]:
        async with AsyncSession(engine) as s:
            yield s

    api = FastAPI(lifespan=tether_lifespan(lambda: tether.connect(DATABASE_URL, schema=schema)))

    @api.post("/orders/{order}")
    # A dependency defined in this function: as an Annotated string annotation it would not resolve.
    async def order(order: int, fail: bool, app: TetherDep, s: AsyncSession = Depends(session)) -> dict[str, Any]:  # noqa: B008
        try:
            async with s.begin():
                job = (await app.aenqueue("orders.confirm", {"order": order}, connection=s)).job
                if fail:
                    raise RuntimeError("payment declined")
        except RuntimeError:
            return {"job": None}
        return {"job": job.id}

    with server_engine() as admin:
        try:
            async with serving(api) as client:
                kept = (await client.post("/orders/1", params={"fail": False})).json()["job"]
                assert (await client.post("/orders/2", params={"fail": True})).json() == {"job": None}
                app = tether.connect(DATABASE_URL, schema=schema)
                try:
                    assert [(job.id, job.payload) for job in app.list()] == [(kept, {"order": 1})]
                finally:
                    app.close()
        finally:
            await engine.dispose()
            with admin.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.asyncio
async def test_on_postgresql_with_redis_streams_the_in_process_worker_runs_a_job_joined_to_a_session(
    redis_client: Any,
) -> None:
    schema = schema_name("fastapi_redis")
    engine = create_async_engine(DATABASE_URL)
    ran = threading.Event()

    def open_app() -> tether.Tether:
        app = tether.connect(DATABASE_URL, schema=schema, redis_url=REDIS_URL, redis_options={"prefix": prefix})

        @app.handler("orders.confirm")
        async def confirm(payload: dict[str, Any], ctx: Any) -> None:
            ran.set()

        return app

    api = FastAPI(lifespan=tether_lifespan(open_app, worker=True, concurrency=1))

    @api.post("/orders")
    async def order(app: TetherDep) -> dict[str, Any]:
        async with AsyncSession(engine) as session, session.begin():
            return {"job": (await app.aenqueue("orders.confirm", {"order": 1}, connection=session)).job.id}

    with server_engine() as admin, temporary_prefix(redis_client, "fastapi") as prefix:
        try:
            async with serving(api) as client:
                job_id = (await client.post("/orders")).json()["job"]
                await asyncio.to_thread(wait_for, ran.is_set, 20, "the in-process worker to run the job")
            with tether.connect(DATABASE_URL, schema=schema) as again:  # its completion flushed at shutdown
                assert again.get(job_id).status is JobStatus.COMPLETED
        finally:
            await engine.dispose()
            with admin.begin() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
