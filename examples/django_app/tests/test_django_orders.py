"""The example project end to end: an order and its confirmation job commit together (a rolled
back order leaves no job), ``manage.py tether_worker`` runs the task, and the task's result reads
back through Django's tasks API.  Runs on SQLite by default, on PostgreSQL with ``EXAMPLE_DB=postgres``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
POSTGRES = os.environ.get("EXAMPLE_DB", "sqlite") == "postgres"


def _pg_dsn() -> str:
    env = os.environ
    return (f"host={env.get('EXAMPLE_PG_HOST', '127.0.0.1')} port={env.get('EXAMPLE_PG_PORT', '5432')} "
            f"user={env.get('EXAMPLE_PG_USER', 'postgres')} dbname={env.get('EXAMPLE_PG_NAME', 'test')}")


@pytest.fixture(scope="module", autouse=True)
def django_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Django set up on a fresh database (a temporary SQLite file, or a fresh PostgreSQL schema)
    and migrated: Django's tables, and Tether's through its migration."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "shopsite.settings"
    if POSTGRES:
        import psycopg

        schema = os.environ.setdefault("EXAMPLE_PG_SCHEMA", f"tether_django_example_{os.getpid()}")
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{schema}"')
    else:
        os.environ["EXAMPLE_SQLITE_PATH"] = str(tmp_path_factory.mktemp("django") / "shop.sqlite3")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    yield
    from django.db import connections
    from tether.contrib.django.conf import reset_app

    reset_app()
    connections.close_all()
    if POSTGRES:
        with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _place(item: str, **extra: object) -> tuple[int, dict]:
    from django.test import Client

    response = Client().post("/orders", json.dumps({"item": item, **extra}), content_type="application/json")
    return response.status_code, json.loads(response.content)


def _run_worker() -> None:
    from django.core.management import call_command

    call_command("tether_worker", stop_when_idle=True, stdout=open(os.devnull, "w"))


def test_migrate_created_tethers_tables_at_the_current_version() -> None:
    from tether.adapters.sqlalchemy.migrations import SCHEMA_VERSION
    from tether.contrib.django.conf import get_app

    assert get_app().repository.schema_version() == SCHEMA_VERSION


def test_an_order_and_its_job_commit_together_and_the_worker_confirms_it() -> None:
    from orders.models import Order
    from orders.tasks import send_confirmation

    status, body = _place("teapot")
    assert status == 201
    result = send_confirmation.get_result(body["job"])
    assert result.status == "READY" and result.args == [body["order"]]
    assert not Order.objects.get(id=body["order"]).confirmed

    _run_worker()

    assert Order.objects.get(id=body["order"]).confirmed
    result = send_confirmation.get_result(body["job"])
    assert result.status == "SUCCESSFUL" and result.finished_at is not None


def test_a_rolled_back_order_leaves_no_job() -> None:
    from orders.models import Order
    from tether.contrib.django.conf import get_app

    jobs_before = sum(get_app().counts().values())
    orders_before = Order.objects.count()
    status, body = _place("kettle", out_of_stock=True)
    assert status == 409
    assert Order.objects.count() == orders_before
    assert sum(get_app().counts().values()) == jobs_before


def test_a_failing_task_reads_back_failed_with_its_error() -> None:
    from orders.tasks import always_fails
    from tether.contrib.django.conf import get_app

    result = always_fails.using(priority=5).enqueue("no stock")
    app = get_app()
    job_id = int(result.id)
    assert app.get(job_id).priority == 5
    from django.db import connection  # make it the last attempt, so one run ends it

    with connection.cursor() as cursor:
        table = f'"{os.environ["EXAMPLE_PG_SCHEMA"]}".tether_jobs' if POSTGRES else "tether_jobs"
        cursor.execute(f"UPDATE {table} SET max_attempts = 1 WHERE id = %s", [job_id])
    _run_worker()
    failed = always_fails.get_result(result.id)
    assert failed.status == "FAILED"
    assert failed.errors[0].exception_class is ValueError
    assert "no stock" in failed.errors[0].traceback


def test_an_unknown_result_id_does_not_exist() -> None:
    from orders.tasks import send_confirmation
    from tether.contrib.django.tasks_api import TaskResultDoesNotExist

    with pytest.raises(TaskResultDoesNotExist):
        send_confirmation.get_result("999999999")


def test_the_worker_closes_stale_connections_around_each_job(monkeypatch: pytest.MonkeyPatch) -> None:
    import tether.contrib.django.runner as runner
    from orders.tasks import send_confirmation

    calls: list[str] = []
    monkeypatch.setattr(runner, "close_old_connections", lambda: calls.append("close"))
    _, body = _place("mug")
    _run_worker()
    assert calls == ["close", "close"]


def test_tether_worker_with_a_bad_option_exits_2_naming_it() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "shopsite.settings"}
    done = subprocess.run([sys.executable, "manage.py", "tether_worker", "--concurrency", "0"], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "concurrency" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_arguments_that_are_not_json_are_refused_and_nothing_is_stored() -> None:
    from orders.tasks import send_confirmation
    from tether import PayloadError
    from tether.contrib.django.conf import get_app

    before = sum(get_app().counts().values())
    with pytest.raises(PayloadError):
        send_confirmation.enqueue({1, 2})
    assert sum(get_app().counts().values()) == before


@pytest.mark.parametrize(
    ("tether", "named"),
    [({"BOGUS": 1}, "TETHER['BOGUS']"), ({"DATABASE": "nope"}, "TETHER['DATABASE']"), ({"WORKER": []}, "TETHER['WORKER']")],
)
def test_bad_tether_settings_are_refused_naming_the_key(tether: dict, named: str) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings
    from tether.contrib.django.conf import get_app

    with override_settings(TETHER=tether), pytest.raises(ImproperlyConfigured) as caught:
        get_app()
    assert named in str(caught.value)


def test_workers_are_woken_after_the_commit_not_before(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import transaction
    from orders.tasks import send_confirmation
    from tether.contrib.django.conf import get_app

    dispatcher = get_app().dispatcher
    told: list[list[int]] = []
    monkeypatch.setattr(dispatcher, "notify", lambda jobs: told.append([job.id for job in jobs]))
    with transaction.atomic():
        result = send_confirmation.enqueue(0)
        assert told == []
    assert told == [[int(result.id)]]
    with transaction.atomic():
        send_confirmation.enqueue(0)
        transaction.set_rollback(True)
    assert told == [[int(result.id)]]
    get_app().cancel(int(result.id))
