"""One JSON object per log line (``tether worker --log-format json``), through python-json-logger.

Each line holds ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``, then every extra
attribute of the record: a record about a job carries ``job_id``, ``job_type``, ``queue``,
``attempt`` and ``worker_id`` (see :mod:`tether.entrypoints.job_logs`), a job's finish line
``outcome`` and ``duration_seconds`` too; an exception's traceback is in ``exc_info``.
"""

from __future__ import annotations

import logging

from pythonjsonlogger.json import JsonFormatter


def json_formatter() -> logging.Formatter:
    """The formatter of ``--log-format json`` (see the module docstring)."""
    return JsonFormatter(
        "%(levelname)s %(name)s %(message)s",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        json_ensure_ascii=False,
    )


__all__ = ["json_formatter"]
