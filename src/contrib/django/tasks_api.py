"""Django's tasks framework, from Django itself (``django.tasks``, Django 6+) or from the
``django-tasks`` backport (Django 5.2): the names the backend uses, whichever is installed."""

from __future__ import annotations

try:  # Django 6 and newer
    from django.tasks import TaskContext, TaskResult, TaskResultStatus  # type: ignore[import-not-found]
    from django.tasks import exceptions as _exceptions  # type: ignore[import-not-found]
    from django.tasks.backends.base import BaseTaskBackend  # type: ignore[import-not-found]
    from django.tasks.base import Task, TaskError  # type: ignore[import-not-found]
    from django.tasks.signals import task_enqueued, task_finished, task_started  # type: ignore[import-not-found]

    SOURCE = "django.tasks"
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks import exceptions as _exceptions
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.signals import task_enqueued, task_finished, task_started

    SOURCE = "django_tasks"

#: Raised for a task the backend cannot run (``InvalidTask`` in Django 6, ``InvalidTaskError`` in the backport).
InvalidTaskError = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
#: Raised by ``get_result`` for an unknown id.
TaskResultDoesNotExist = _exceptions.TaskResultDoesNotExist

__all__ = [
    "SOURCE",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_enqueued",
    "task_finished",
    "task_started",
]
