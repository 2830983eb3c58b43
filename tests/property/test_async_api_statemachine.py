"""The async API state machine (sync or async per step, against sync steps on a twin app) in
memory, on SQLite and on PostgreSQL (native async connections), with a fixed derandomized budget;
and a planted bug it must find."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import tether
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from tether.adapters.clock import FakeClock
from tether.adapters.sqlalchemy.pg_async import PgAsyncAccess
from tether.entrypoints.service import Tether
from tether.testing.statemachine import DEFAULT_SETTINGS, AsyncApiStateMachine

from tests.postgres_fixtures import DATABASE_URL, schema_name, server_engine

#: A fixed budget: 30 histories of up to 30 steps, the same ones on every run.
BUDGET = settings(DEFAULT_SETTINGS, max_examples=30, stateful_step_count=30, derandomize=True, database=None,
                  print_blob=False, report_multiple_bugs=False, phases=[Phase.explicit, Phase.generate])

_counter = itertools.count()


def test_memory_async_and_sync_answer_alike() -> None:
    run_state_machine_as_test(AsyncApiStateMachine, settings=BUDGET)


def test_sqlite_async_and_sync_answer_alike(tmp_path: Path) -> None:
    class SqliteMachine(AsyncApiStateMachine):
        def make_app(self) -> Tether:
            return tether.connect(f"sqlite:///{tmp_path / f'tether{next(_counter)}.db'}", clock=FakeClock())

    run_state_machine_as_test(SqliteMachine, settings=BUDGET)


@pytest.mark.postgres
def test_postgres_async_and_sync_answer_alike() -> None:
    schemas: list[str] = []

    class PostgresMachine(AsyncApiStateMachine):
        def make_app(self) -> Tether:
            schema = schema_name(f"async_machine_{next(_counter)}")
            schemas.append(schema)
            app = tether.connect(DATABASE_URL, schema=schema, pool_size=2)
            assert isinstance(app.async_access, PgAsyncAccess)  # the native async path, not a thread
            return app

    with server_engine() as engine:
        try:
            run_state_machine_as_test(PostgresMachine, settings=BUDGET)
        finally:
            with engine.begin() as conn:
                for schema in schemas:
                    conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_the_machine_finds_an_aenqueue_that_drops_the_idempotency_key() -> None:
    class DropsKey(AsyncApiStateMachine):
        def make_app(self) -> Tether:
            app = super().make_app()
            original = app.aenqueue

            async def aenqueue(*args: Any, **kwargs: Any) -> Any:
                kwargs.pop("idempotency_key", None)
                return await original(*args, **kwargs)

            app.aenqueue = aenqueue  # type: ignore[method-assign]
            return app

    with pytest.raises(AssertionError) as info:
        run_state_machine_as_test(DropsKey, settings=BUDGET)
    assert "async enqueue" in str(info.value) or "async transaction" in str(info.value), str(info.value)
