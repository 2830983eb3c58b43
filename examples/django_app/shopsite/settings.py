"""Settings of the example project.

``EXAMPLE_DB`` picks the database: ``sqlite`` (default; the file ``EXAMPLE_SQLITE_PATH``, default
``db.sqlite3`` here) or ``postgres`` (``EXAMPLE_PG_HOST``, ``_PORT``, ``_USER``, ``_NAME``, and
``EXAMPLE_PG_SCHEMA``: the schema holding both Django's and Tether's tables).
"""

import importlib.util
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "shopsite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "tether.contrib.django",  # Tether's tables (migration) and manage.py tether_worker
    "orders",
]
if importlib.util.find_spec("django.tasks") is None:  # Django 5.2: the django-tasks backport
    INSTALLED_APPS.insert(1, "django_tasks")

if os.environ.get("EXAMPLE_DB", "sqlite") == "postgres":
    SCHEMA = os.environ.get("EXAMPLE_PG_SCHEMA", "tether_django_example")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "HOST": os.environ.get("EXAMPLE_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("EXAMPLE_PG_PORT", "5432"),
            "USER": os.environ.get("EXAMPLE_PG_USER", "postgres"),
            "NAME": os.environ.get("EXAMPLE_PG_NAME", "test"),
            "OPTIONS": {"options": f"-c search_path={SCHEMA}"},
        }
    }
else:
    SCHEMA = None
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("EXAMPLE_SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
        }
    }

# Django's tasks framework stores its tasks as Tether jobs, in the caller's transaction.
TASKS = {
    "default": {
        "BACKEND": "tether.contrib.django.backend.TetherBackend",
        "QUEUES": ["default", "emails"],
    }
}

# Everything Tether needs; every key is optional.
TETHER = {
    "DATABASE": "default",  # enqueue on this connection, inside its atomic() blocks
    "SCHEMA": SCHEMA,
    "OPTIONS": {"poll_interval": 0.2},
    "WORKER": {"concurrency": 2, "queues": ["default", "emails"], "drain_timeout": 5.0},
}
