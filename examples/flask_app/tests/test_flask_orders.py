"""The example app end to end: an order and its job commit together through ``db.session`` (a
rolled back order leaves no job), ``flask tether worker`` runs the job in the app context, and a
bad worker option is one usage error.  SQLite by default, PostgreSQL with ``EXAMPLE_DB=postgres``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from shopapp import create_app
from shopapp.jobs import tether_ext
from shopapp.models import Order, db

POSTGRES = os.environ.get("EXAMPLE_DB", "sqlite") == "postgres"
PG_URL = os.environ.get("EXAMPLE_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    if POSTGRES:
        import sqlalchemy

        schema = f"{os.environ.get('EXAMPLE_PG_SCHEMA', 'tether_flask_example')}_{os.getpid()}"
        admin = sqlalchemy.create_engine(PG_URL)
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
        config = {"SQLALCHEMY_DATABASE_URI": PG_URL, "TETHER_SCHEMA": schema,
                  "SQLALCHEMY_ENGINE_OPTIONS": {"connect_args": {"options": f"-c search_path={schema}"}}}
    else:
        config = {"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'shop.db'}"}
    flask_app = create_app(config)
    with flask_app.app_context():
        db.create_all()
    yield flask_app
    tether_ext.close(flask_app)
    with flask_app.app_context():
        db.engine.dispose()
    if POSTGRES:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


def _jobs(flask_app: Flask) -> int:
    return sum(tether_ext.app_for(flask_app).counts().values())


def test_an_order_and_its_job_commit_together_and_the_worker_confirms_it(app: Flask) -> None:
    response = app.test_client().post("/orders", json={"item": "teapot"})
    assert response.status_code == 201
    order_id, job_id = response.json["order"], response.json["job"]
    assert tether_ext.app_for(app).get(job_id).status.value == "queued"

    result = app.test_cli_runner().invoke(args=["tether", "worker", "--stop-when-idle"])
    assert result.exit_code == 0, result.output

    assert app.test_client().get(f"/orders/{order_id}").json["confirmed"] is True
    assert tether_ext.app_for(app).get(job_id).status.value == "completed"


def test_a_rolled_back_order_leaves_no_job(app: Flask) -> None:
    response = app.test_client().post("/orders", json={"item": "kettle", "out_of_stock": True})
    assert response.status_code == 409
    assert _jobs(app) == 0
    with app.app_context():
        assert db.session.query(Order).count() == 0


def test_the_worker_with_a_bad_option_is_one_usage_error(app: Flask) -> None:
    result = app.test_cli_runner().invoke(args=["tether", "worker", "--concurrency", "0"])
    assert result.exit_code == 2
    assert "concurrency" in result.output


def test_a_handler_with_a_bad_signature_is_refused_when_registered() -> None:
    from tether import ValidationError

    with pytest.raises(ValidationError, match="handler"):
        tether_ext.handler("bad.one")(lambda: None)
