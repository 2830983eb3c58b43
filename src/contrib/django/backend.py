"""``TetherBackend``: Django's tasks framework storing its tasks as Tether jobs.

::

    TASKS = {"default": {"BACKEND": "tether.contrib.django.backend.TetherBackend",
                         "QUEUES": ["default", "emails"]}}

``my_task.enqueue(*args, **kwargs)`` stores one job of type ``django.task`` (payload: the task's
module path, ``args`` and ``kwargs``, which must be JSON) with the task's queue, priority (higher
runs first, as in Django) and ``run_after``.  It runs on Django's own connection of
``TETHER["DATABASE"]`` inside the current ``atomic()`` block: a rollback leaves no job, and the
dispatcher is told of the job through ``transaction.on_commit`` (at once outside a block).  Run the
jobs with ``manage.py tether_worker``.  ``get_result(id)`` reads the job back as a ``TaskResult``
(:mod:`.results`).

Raises, from ``enqueue``: the framework's invalid-task error (a coroutine, a queue not in
``QUEUES``, a naive ``run_after``); Tether's ``PayloadError`` (arguments that are not JSON) and
``ValidationError``; ``StorageUnavailable``.  Nothing is stored then.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import connections, transaction
from tether.contrib.django.conf import get_app, tether_settings
from tether.contrib.django.results import JOB_TYPE, load_task, task_payload, to_task_result
from tether.contrib.django.tasks_api import BaseTaskBackend, TaskResultDoesNotExist, task_enqueued
from tether.domain.errors import JobNotFound, ValidationError
from tether.domain.job import Job
from tether.entrypoints.service import Tether

log = logging.getLogger("tether.contrib.django")


def _announce(app: Tether, job: Job) -> None:
    """Tell the dispatcher of a committed job; a failure is logged (the next poll or sweep finds it)."""
    try:
        app.dispatcher.notify([job])
    except Exception:
        log.exception("dispatcher notify failed for job %s; it is stored and the next poll or sweep finds it", job.id)


class TetherBackend(BaseTaskBackend):
    """A task backend storing tasks as Tether jobs, in the caller's Django transaction."""

    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = False

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Store ``task(*args, **kwargs)`` as a job; its TaskResult (status READY, ``id`` the job id)."""
        self.validate_task(task)
        app = get_app()
        alias = tether_settings()["DATABASE"]
        connection: Any = None
        if alias is not None:
            django_connection = connections[alias]
            django_connection.ensure_connection()
            connection = django_connection.connection
        result = app.enqueue(
            JOB_TYPE,
            task_payload(task, args, kwargs),
            queue=task.queue_name,
            priority=task.priority,
            run_at=task.run_after,
            connection=connection,
        )
        job = result.job
        if alias is not None:
            transaction.on_commit(lambda: _announce(app, job), using=alias)
        task_result = to_task_result(task, job, self.alias)
        task_enqueued.send(type(self), task_result=task_result)
        return task_result

    def get_result(self, result_id: str) -> Any:
        """The TaskResult of job ``result_id``.  Raises the framework's TaskResultDoesNotExist for
        an id that is no job of a Django task."""
        try:
            job = get_app().get(int(result_id))
        except (ValueError, TypeError, ValidationError, JobNotFound):
            raise TaskResultDoesNotExist(result_id) from None
        if job.job_type != JOB_TYPE:
            raise TaskResultDoesNotExist(result_id)
        return to_task_result(load_task(job.payload["task"]), job, self.alias)


__all__ = ["TetherBackend"]
