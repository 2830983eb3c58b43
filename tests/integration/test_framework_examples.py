"""The Django and Flask example projects under examples/ pass their own tests, on SQLite and on
the PostgreSQL test server, each run as a separate pytest session from its own directory (a
Django process configures its settings once; the projects' module names stay out of ours).

On PostgreSQL each run gets a schema of its own (named after this test run) for the project's
tables and Tether's, dropped by the project's tests when they end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import DATABASE_URL, RUN_ID, service_unavailable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(project: str, **env: str) -> str:
    """Run ``examples/<project>``'s tests with ``env`` added; the pytest summary line."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | env
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLES / project, check=False, capture_output=True, text=True, timeout=280, env=environ,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]


def postgres_env(schema: str) -> dict[str, str]:
    url = make_url(DATABASE_URL)
    try:
        psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False), connect_timeout=5).close()
    except psycopg.Error as error:
        service_unavailable("PostgreSQL", str(error))
    return {
        "EXAMPLE_DB": "postgres",
        "EXAMPLE_PG_SCHEMA": f"tether_test_{RUN_ID}_{schema}",
        "EXAMPLE_PG_URL": DATABASE_URL,
        "EXAMPLE_PG_HOST": url.host or "127.0.0.1",
        "EXAMPLE_PG_PORT": str(url.port or 5432),
        "EXAMPLE_PG_USER": url.username or "postgres",
        "EXAMPLE_PG_NAME": url.database or "test",
    }


@pytest.mark.slow
def test_the_django_example_passes_its_tests_on_sqlite() -> None:
    assert run_example("django_app").startswith("12 passed")


@pytest.mark.slow
@pytest.mark.postgres
def test_the_django_example_passes_its_tests_on_postgres() -> None:
    assert run_example("django_app", **postgres_env("django_example")).startswith("12 passed")


@pytest.mark.slow
def test_the_flask_example_passes_its_tests_on_sqlite() -> None:
    assert run_example("flask_app").startswith("4 passed")


@pytest.mark.slow
@pytest.mark.postgres
def test_the_flask_example_passes_its_tests_on_postgres() -> None:
    assert run_example("flask_app", **postgres_env("flask_example")).startswith("4 passed")
