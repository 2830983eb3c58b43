"""A Tether job as Django's ``TaskResult``: statuses, times and errors translated.

| Tether status | TaskResult status |
|---|---|
| queued, retrying | READY |
| running | RUNNING |
| completed | SUCCESSFUL |
| dead, cancelled | FAILED |

Tether keeps no handler return values: a successful result's ``return_value`` is None.
"""

from __future__ import annotations

import builtins
from typing import Any

from django.utils.module_loading import import_string
from tether.contrib.django.tasks_api import Task, TaskError, TaskResult, TaskResultStatus
from tether.domain.job import Job, JobStatus

#: The one Tether job type every Django task is stored under; the payload names the task.
JOB_TYPE = "django.task"

_STATUS = {
    JobStatus.QUEUED: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


def task_payload(task: Any, args: Any, kwargs: Any) -> dict[str, Any]:
    """The job payload of ``task`` called with ``args``/``kwargs``: ``{"task": module path, "args": [...], "kwargs": {...}}``."""
    return {"task": task.module_path, "args": list(args), "kwargs": dict(kwargs)}


def load_task(path: str) -> Any:
    """The Task object at ``path`` (a module-level ``@task`` function).  Raises ImportError or
    TypeError when the path names no Task."""
    found = import_string(path)
    if not isinstance(found, Task):
        raise TypeError(f"{path} is a {type(found).__name__}, not a Django task")
    return found


def _exception_path(last_error: str) -> str:
    name = last_error.split(":", 1)[0].strip()
    candidate = getattr(builtins, name, None)
    if isinstance(candidate, type) and issubclass(candidate, BaseException):
        return f"builtins.{name}"
    return "builtins.Exception"


def to_task_result(task: Any, job: Job, backend: str) -> Any:
    """The TaskResult of ``job`` (a job of :data:`JOB_TYPE`), whose task is ``task``.

    ``id`` is the job id as text; ``errors`` holds the last failure (its text as the traceback)."""
    payload = job.payload
    errors = []
    if job.last_error:
        errors.append(TaskError(exception_class_path=_exception_path(job.last_error), traceback=job.last_error))
    return TaskResult(
        task=task,
        id=str(job.id),
        status=_STATUS[job.status],
        enqueued_at=job.created_at,
        started_at=job.leased_at,
        finished_at=job.finished_at,
        last_attempted_at=job.leased_at,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=backend,
        errors=errors,
        worker_ids=[job.leased_by] if job.leased_by else [],
    )


__all__ = ["JOB_TYPE", "load_task", "task_payload", "to_task_result"]
