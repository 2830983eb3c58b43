"""The Tether handler that runs a Django task: the job's payload names the task and its arguments.

Around each job it closes Django's stale database connections (``close_old_connections``), as
Django does around each request: a worker thread keeps its connection between jobs, and one past
``CONN_MAX_AGE`` or broken must not be handed to the next task.  It sends the framework's
``task_started`` and ``task_finished`` signals.  A failure (any exception) is the job's failure,
retried by Tether's retry policy; a payload naming no task fails permanently.
"""

from __future__ import annotations

from typing import Any

from django.db import close_old_connections
from tether.contrib.django.results import JOB_TYPE, load_task, to_task_result
from tether.contrib.django.tasks_api import TaskContext, TaskResultStatus, task_finished, task_started
from tether.domain.errors import PermanentError
from tether.entrypoints.context import JobContext
from tether.entrypoints.service import Tether


def run_django_task(payload: dict[str, Any], ctx: JobContext) -> None:
    """Run the task ``payload`` names with its ``args``/``kwargs`` (``ctx``: the job's context)."""
    close_old_connections()
    try:
        try:
            task = load_task(payload["task"])
        except (ImportError, TypeError, KeyError) as error:
            raise PermanentError(f"no Django task to run: {error}") from error
        result = to_task_result(task, ctx.job, task.backend)
        sender = type(task.get_backend())
        task_started.send(sender, task_result=result)
        try:
            if task.takes_context:
                task.call(TaskContext(task_result=result), *payload.get("args", []), **payload.get("kwargs", {}))
            else:
                task.call(*payload.get("args", []), **payload.get("kwargs", {}))
        except BaseException:
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            task_finished.send(sender, task_result=result)
            raise
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        task_finished.send(sender, task_result=result)
    finally:
        close_old_connections()


def register_task_runner(app: Tether) -> None:
    """Register :func:`run_django_task` as ``app``'s handler of :data:`~.results.JOB_TYPE`."""
    if JOB_TYPE not in app.handlers:
        app.register(JOB_TYPE, run_django_task)


__all__ = ["register_task_runner", "run_django_task"]
